"""Typed errors. Library code raises these; only the CLI turns them into messages and exit codes."""


class RosennaError(Exception):
    """Base of every error rosenna reports to the user (exit status 2, no traceback)."""


class ModelError(RosennaError):
    """The model file is missing, not ONNX, invalid, or uses values rosenna cannot handle."""


class UnsupportedOp(ModelError):
    """One or more nodes use ops (or attribute values) that rosenna does not lower."""


class UsageError(RosennaError):
    """A command-line option has a value rosenna cannot use."""


class ToolchainError(RosennaError):
    """A toolchain profile is broken, or a compiler it names cannot be found or run."""


class BuildError(RosennaError):
    """A compiler or generated program failed while verifying or gating."""
