"""What every ``agenttape`` subcommand shares: the program's name, the one-line usage error,
the parser that raises it, and how a subcommand is declared."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a subcommand, as ``add_argument`` takes it."""

    names: tuple[str, ...]
    options: dict[str, Any]


def arg(*names: str, **options: Any) -> Arg:
    return Arg(names, options)


def operands(*names: str) -> tuple[Arg, ...]:
    """Positional arguments, each shown in the usage as its name in capitals."""
    return tuple(Arg((name,), {"metavar": name.upper()}) for name in names)


def moment(name: str, help: str) -> Arg:
    """An option naming a moment T: a time ago (30m, 2h, 7d, 1w) or an ISO date/time."""
    return Arg((name,), {"metavar": "T", "help": help})


def flag(name: str, help: str) -> Arg:
    """An option that is on or off."""
    return Arg((name,), {"action": "store_true", "help": help})


def repeated(name: str, metavar: str, help: str) -> Arg:
    """An option given any number of times, its values in a list."""
    return Arg((name,), {"action": "append", "default": [], "metavar": metavar, "help": help})


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand declared as data (see ``command``)."""

    name: str
    handler: Handler
    arguments: tuple[Arg, ...]
    help: str
    description: str | None
    actions: tuple[Command, ...]

    def declare(self, commands: Any) -> argparse.ArgumentParser:
        """The subcommand among ``commands`` (an ``add_subparsers`` result), its arguments
        added, and its actions (``NAME ACTION ...``, the action in ``NAME_action``)."""
        parser = subcommand(
            commands, self.name, self.handler, help=self.help, description=self.description
        )
        add(parser, self.arguments)
        if self.actions:
            dest = f"{self.name}_action"
            actions = parser.add_subparsers(dest=dest, metavar="ACTION", parser_class=Parser)
            for action in self.actions:
                action.declare(actions)
        return parser


def command(
    name: str,
    handler: Handler,
    *arguments: Arg,
    help: str,
    description: str | None = None,
    actions: tuple[Command, ...] = (),
) -> Command:
    """The subcommand ``name``, run by ``handler``, with ``arguments``."""
    return Command(name, handler, arguments, help, description, actions)


JSON = flag("--json", "JSON for machines")


def add(parser: argparse.ArgumentParser, arguments: Iterable[Arg]) -> None:
    for argument in arguments:
        parser.add_argument(*argument.names, **argument.options)
