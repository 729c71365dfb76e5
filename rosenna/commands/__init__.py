"""Subcommands of the rosenna CLI, one module each."""
