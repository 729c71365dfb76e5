"""Running compilers and generated programs, with failures turned into BuildError."""

import os
import shlex
import shutil
import subprocess

from rosenna.errors import BuildError


def compiler(env_var, default):
    """The compiler command from ``$env_var`` (default ``default``) as an argument list."""
    words = shlex.split(os.environ.get(env_var) or default)
    if not words or shutil.which(words[0]) is None:
        raise BuildError(f"{env_var}={words[0] if words else ''!r}: compiler not found; install it or set {env_var}")
    return words


def run(cmd, cwd, what, env=None, timeout=900):
    """Run ``cmd`` in ``cwd``; raise BuildError with its output when it fails."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
    except FileNotFoundError:
        raise BuildError(f"{what}: {cmd[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: timed out after {timeout} s: {shlex.join(cmd)}") from None
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-25:]
        raise BuildError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n  " + "\n  ".join(tail))
    return proc
