"""What every ``agenttape`` subcommand shares: the program's name, the one-line usage error,
the parser that raises it, and how a subcommand is declared."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

PROG = "agenttape"


class UsageError(Exception):
    """Bad usage: exit 2 with the one-line message, after the name of the command."""

    def __init__(self, message: str, *, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the usage block and a traceback-like dump."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')", prog=self.prog)


Handler = Callable[[argparse.Namespace, TextIO], int]


def subcommand(
    commands: Any, name: str, handler: Handler, *, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """The subcommand ``name`` that runs ``handler``. Its texts are given here rather than
    taken from the handler's docstring, which ``python -OO`` drops."""
    command: argparse.ArgumentParser = commands.add_parser(name, help=help, description=description)
    command.set_defaults(handler=handler)
    return command


def repeatable(parser: argparse.ArgumentParser, flag: str, metavar: str, help: str) -> None:
    parser.add_argument(flag, action="append", default=[], metavar=metavar, help=help)
