"""The `rosenna` command: a thin shell over the library.

Each subcommand lives in a module that exposes ``register(subparsers)``; ``register`` adds its
parser and sets ``func`` (``args -> int``) as the parser default. Library code raises
:class:`rosenna.errors.RosennaError`; only :func:`main` turns those into a message and status 2.
"""

import argparse
import importlib
import os
import signal
import sys

from rosenna import __version__
from rosenna.errors import BuildError, RosennaError, UnsupportedOp
from rosenna.quoting import terminal_text

# The subcommand modules, in the order `rosenna --help` lists them. One line per command.
SUBCOMMANDS = (
    "rosenna.commands.generate",
    "rosenna.commands.verify",
    "rosenna.commands.info",
    "rosenna.commands.zoo",
    "rosenna.commands.toolchain",
    "rosenna.commands.gpu_gate",
    "rosenna.commands.conformance",
    "rosenna.commands.doctor",
    "rosenna.commands.weights",
)


class Parser(argparse.ArgumentParser):
    """argparse with rosenna's error form: one line saying what is wrong, one hint line, status 2
    (argparse's own prints the whole usage block first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\nhint: {self.prog} --help\n")


def build_parser():
    parser = Parser(
        prog="rosenna",
        description="Turn an ONNX model into a per-point C library and Fortran module.",
    )
    parser.add_argument("--version", action="version", version=f"rosenna {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).register(subparsers)
    return parser


def subparsers_of(parser):
    """The subcommand names, in --help order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        print(f"rosenna: error: give a command: {', '.join(subparsers_of(parser))}\nhint: rosenna --help",
              file=sys.stderr)
        return 2
    if argv is None:  # the real command line: a kill (SIGTERM) unwinds like Ctrl-C, so work folders go
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        return args.func(args)
    except RosennaError as exc:
        # names in a message come from model files and profiles: no control character reaches the terminal
        # a compiler's output keeps its lines, and so does a refusal's list (one line per op, names quoted)
        text = terminal_text(exc, keep_newlines=isinstance(exc, (BuildError, UnsupportedOp)))
        print(f"rosenna {args.command}: error: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rosenna: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`rosenna toolchain list | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
