"""What every ``agenttape`` subcommand shares: its usage errors and how it is declared."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

PROG = "agenttape"
STORE_HELP = "a folder, or an fsspec URL such as s3://b/p"
Handler = Callable[[argparse.Namespace, TextIO], int]


class UsageError(Exception):
    """Bad usage: exit 2 with the one-line message, after the name of the command."""

    def __init__(self, message: str, *, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the usage block and a traceback-like dump."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')", prog=self.prog)


def command(
    commands: Any, name: str, handler: Handler, *, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """The subcommand ``name`` that runs ``handler``. Its texts are given here rather than
    taken from the handler's docstring, which ``python -OO`` drops."""
    made: argparse.ArgumentParser = commands.add_parser(name, help=help, description=description)
    made.set_defaults(handler=handler)
    return made
