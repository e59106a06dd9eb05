"""Tracebacks that show the user's code, the library it called, and the message.

A miss, or a failure replayed from a cassette, is raised deep inside agenttape's adapters:
printed as it is, its traceback runs through a dozen of agenttape's frames before the
message, none of which the user can act on. ``trim`` takes agenttape's own frames out of such
an exception's traceback (and out of the exceptions chained to it), keeping every frame of
the user's code and of the HTTP library, in order.

Only agenttape's errors and the failures it replayed are trimmed: any other exception that
passes through (a bug of agenttape's own among them) keeps its whole traceback.
"""

from __future__ import annotations

import itertools
import sys
from types import TracebackType

from .errors import AgentTapeError

PACKAGE = __name__.split(".", 1)[0]

NOTE_START = "agenttape: replayed from"
"""How the note (PEP 678) on a replayed failure begins."""


def replayed(exception: BaseException) -> bool:
    """Whether ``exception`` carries the note of a failure replayed from a cassette."""
    notes = getattr(exception, "__notes__", ())
    return any(note.startswith(NOTE_START) for note in notes if isinstance(note, str))


def chain(exception: BaseException) -> list[BaseException]:
    """``exception`` and those it was raised from or while handling, outermost first."""
    found: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exception
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def ours(exception: BaseException) -> bool:
    """Whether ``exception``, or one in its chain, is a miss or another error of agenttape's,
    or a failure replayed from a cassette."""
    return any(isinstance(e, AgentTapeError) or replayed(e) for e in chain(exception))


def _own(traceback: TracebackType) -> bool:
    name = traceback.tb_frame.f_globals.get("__name__")
    return isinstance(name, str) and (name == PACKAGE or name.startswith(PACKAGE + "."))


def trim(exception: BaseException) -> BaseException:
    """Takes agenttape's frames out of the traceback of ``exception`` and of every exception
    in its chain, when one of them is agenttape's or was replayed (``ours``); returns
    ``exception``. Each frame kept keeps its line; the frames are relinked in place, so the
    exception raised on from here carries the shorter traceback."""
    if not ours(exception):
        return exception
    for each in chain(exception):
        each.__traceback__ = _without_own(each.__traceback__)
    return exception


def _without_own(traceback: TracebackType | None) -> TracebackType | None:
    kept: list[TracebackType] = []
    while traceback is not None:
        if not _own(traceback):
            kept.append(traceback)
        traceback = traceback.tb_next
    for outer, inner in itertools.pairwise(kept):
        outer.tb_next = inner
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def install_hook() -> None:
    """Trims what an uncaught exception prints (``sys.excepthook``), for a
    program agenttape runs with no ``with`` block of its own (``agenttape run``)."""
    previous = sys.excepthook

    def excepthook(
        kind: type[BaseException], value: BaseException, traceback: TracebackType | None
    ) -> None:
        if ours(value):
            traceback = trim(value).__traceback__
        previous(kind, value, traceback)

    sys.excepthook = excepthook
