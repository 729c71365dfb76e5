"""Subcommands of the rosenna CLI, one module each: owns the arguments of each command and
turns them into library calls (rosenna.cli owns the parser and the exit codes)."""
