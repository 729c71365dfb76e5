"""Toolchain profiles: which compilers, offload flags, backend and thresholds to build with.

Owns the profiles' search path, schema, detection and resolution.

A profile is a YAML file (see docs/toolchains.md for the keys). This package finds profiles on a
search path (:mod:`.catalog`), validates them with a JSON schema (:mod:`.schema`), detects the node
(:mod:`.detection`: archspec for the CPU, nvidia-smi / rocm_agent_enumerator / rocminfo / sycl-ls for
GPUs, compilers on PATH), chooses one (:mod:`.select`), builds the resolved profile (:mod:`.profile`); :mod:`.resolution` ties them together.

The public entry point is :func:`resolve`::

    profile = resolve("auto")            # detect this node and choose
    profile = resolve("nvhpc")           # by name or alias (e.g. "NVHPC")
    profile = resolve(None)              # today's defaults: the gcc profile
    profile.make_defaults()              # CC, FC, CFLAGS, FFLAGS, DEVCC, DEVFLAGS, ROSENNA_OFFLOAD_FLAGS, ROSENNA_BACKEND
"""

from rosenna.toolchain.catalog import Catalog, search_path
from rosenna.toolchain.detection import Detection, Gpu, detect
from rosenna.toolchain.profile import GpuTarget, Profile
from rosenna.toolchain.resolution import resolve
from rosenna.toolchain.select import Selection, select

__all__ = [
    "Catalog", "Detection", "Gpu", "GpuTarget", "Profile", "Selection",
    "detect", "resolve", "search_path", "select",
]
