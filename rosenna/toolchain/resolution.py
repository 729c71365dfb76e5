"""Resolving a profile by name, by version as Spack/EasyBuild spell it, or by detecting the node.

This module sits above the others of the package: it reads the catalog, builds with
:func:`rosenna.toolchain.profile.build`, chooses with :func:`rosenna.toolchain.select.select` and
checks a requested version with :mod:`rosenna.toolchain.request`; none of those import it.
"""

import os

from rosenna.toolchain import detection as detect_mod
from rosenna.toolchain import request
from rosenna.toolchain.catalog import Catalog
from rosenna.toolchain.profile import build
from rosenna.toolchain.select import select
from rosenna.toolchain.template import TemplateError, expand_env


def resolve(name, *, detection=None, catalog=None, environ=None, target=None, gpu_arch=None):
    """The profile ``name`` resolved for this machine.

    Args:
        name: a profile name or alias, optionally with a version as Spack or EasyBuild spell it
            (``gcc@13.2.0``, ``GCC/13.2.0``, ``foss/2023a``: :mod:`rosenna.toolchain.request`); "auto" to detect this node and choose (see
            :func:`rosenna.toolchain.select.select`); None for today's defaults, the ``gcc`` profile.
        detection: a :class:`rosenna.toolchain.detection.Detection` to use instead of detecting.
        catalog: the profiles to choose from (default: those on the search path).
        environ: the environment for ``${...}`` and PATH (default: ``os.environ``).
        target: ``--target``: archspec's name of the CPU to build for (default: this host).
        gpu_arch: ``--gpu-arch``: the GPU to build for (default: the profile's, else detected).

    Raises:
        ToolchainError: for an unknown name and for any broken profile involved.
    """
    catalog = Catalog() if catalog is None else catalog
    environ = os.environ if environ is None else environ
    if name is None:
        name = "gcc"
    if name == "auto":
        if detection is None:
            detection = detect_mod.detect(compiler_commands(catalog, environ))
        selection = select(catalog, detection, environ=environ)
        profile = selection.profile
        if target is None and gpu_arch is None:
            return profile
        return build(catalog, catalog.lookup(profile.name), gpus=detection.gpus, environ=environ,
                     reason=profile.reason, target=target, gpu_arch=gpu_arch)
    gpus = detection.gpus if detection is not None else None
    asked = request.parse(name)  # gcc@13.2.0, GCC/13.2.0, foss/2023a: the version is checked
    profile = build(catalog, catalog.lookup(asked.name), gpus=gpus, environ=environ, target=target,
                    gpu_arch=gpu_arch)
    return request.check(profile, asked, environ)


def compiler_commands(catalog, environ=None):
    """Every compiler command the winning profiles name, ``${...}`` expanded, for detection."""
    environ = os.environ if environ is None else environ
    commands = []
    for f in catalog.winners():
        for command in f.data.get("compilers", {}).values():
            try:
                commands.append(expand_env(command, environ))
            except TemplateError:
                pass  # reported when that profile is resolved
    return list(dict.fromkeys(commands))
