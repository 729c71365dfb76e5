"""Optional dependencies: what each pip extra (and Spack variant) adds, and the one-line message
when a command needs one that is not installed.

``onnxruntime`` is the reference ``rosenna verify`` and ``rosenna gpu-gate`` compare with; it is the
``verify`` extra (``pip install 'rosenna[verify]'``) and the Spack recipe's ``+verify`` variant, so
that an install for generating code alone does not pull it in.
"""

import importlib

from rosenna.errors import RosennaError

#: extra name -> the modules it provides (setup.cfg [options.extras_require] lists the packages).
EXTRAS = {"verify": ("onnxruntime",)}


class MissingExtra(RosennaError):
    """A command needs an optional dependency that is not installed."""


def onnxruntime():
    """The ``onnxruntime`` module, for the commands that compare with it (verify, gpu-gate).

    Raises:
        MissingExtra: one line naming the missing module and how to install it (the CLI's prefix
            names the command).
    """
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as exc:
        raise MissingExtra(
            f"this command compares with onnxruntime, which is not installed ({exc}); install it with "
            "`pip install 'rosenna[verify]'`, `spack install rosenna+verify`, or load an ONNX-Runtime module"
        ) from None
