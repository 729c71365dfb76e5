"""Running compilers and generated programs: the one subprocess runner of verify and the gate.

:func:`execute` runs a command and never raises: a command that cannot start or runs past its
time gives status -1 and the reason as its output. :func:`run` turns a failure into
:class:`rosenna.errors.BuildError` with the command and the tail of its output (verify);
the gate's ``Shell`` keeps every command, status and output for its report.
"""

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


#: Status of a command that could not start or ran past its time.
NOT_RUN = -1


def execute(cmd, cwd=None, env=None, timeout=900):
    """Run ``cmd`` (an argument list) in ``cwd`` with no input; return ``(status, output)``,
    stdout then stderr. Never raises: :data:`NOT_RUN` and the reason when it cannot run."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return NOT_RUN, f"{cmd[0]} not found"
    except subprocess.TimeoutExpired:
        return NOT_RUN, f"timed out after {timeout} s"
    except OSError as exc:
        return NOT_RUN, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def run(cmd, cwd, what, env=None, timeout=900):
    """Run ``cmd`` in ``cwd``; raise BuildError naming ``what``, the command and the tail of its
    output when it fails. Returns the output."""
    status, output = execute(cmd, cwd, env, timeout)
    if status == NOT_RUN:
        raise BuildError(f"{what}: {output}: {shlex.join(cmd)}")
    if status != 0:
        tail = output.strip().splitlines()[-25:]
        raise BuildError(f"{what} failed (exit {status}): {shlex.join(cmd)}\n  " + "\n  ".join(tail))
    return output
