"""Tracebacks that show the user's code, the library it called, and the message.

A miss, or a failure replayed from a cassette, is raised deep inside agenttape's adapters:
printed as it is, its traceback runs through a dozen of agenttape's frames before the
message, none of which the user can act on. ``trim`` takes agenttape's own frames out of such
an exception's traceback (and out of the exceptions chained to it), keeping every frame of
the user's code and of the HTTP library, in order.

Only agenttape's errors and the failures it replayed are trimmed: any other exception that
passes through (a bug of agenttape's own among them) keeps its whole traceback.

The notes (PEP 678) are here too: what an exception the agent catches says about where it
came from — replayed from which cassette and interaction (``note_replayed``, carried up to
the library's own error by ``carry_note``), or injected by a fault (``note_injected``,
``note_fired``).
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .blame import passed_through
from .errors import AgentTapeError
from .models import FAULT_HEADER
from .options import MODE_ENVIRONMENT_VARIABLE
from .wire.stored import position_of

if TYPE_CHECKING:
    from .faults import FiredFault
    from .models import Interaction
    from .tape import Tape

__tracebackhide__ = passed_through

R = TypeVar("R")

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


FAULT_NOTE = "agenttape: injected fault"
"""How the note (PEP 678) on an exception a fault caused begins."""


def note_injected(exception: BaseException, headers: object) -> None:
    """Adds the note naming the fault whose error answer ``exception`` was built from (its
    ``headers`` carry ``FAULT_HEADER``), so the exception the agent catches says the failure
    was injected. Anything that is not a response's headers, or has no such header, is left
    alone: this runs inside another library's exception constructor and must never fail."""
    try:
        value = headers.get(FAULT_HEADER) if headers is not None else None  # type: ignore[attr-defined]
    except Exception:
        return
    if not isinstance(value, str):
        return
    notes = getattr(exception, "__notes__", ())
    if any(isinstance(note, str) and "injected fault" in note for note in notes):
        return
    exception.add_note(f"{FAULT_NOTE}: {value}; the service did not fail this way.")


def note_fired(exception: BaseException, path: object, fired: list[FiredFault]) -> None:
    """Adds a note on ``exception`` naming the faults that fired (at most five), unless one
    of its notes names an injected fault already: the failure the agent met may be one of
    them, and must never be taken for the service's."""
    if not fired or isinstance(exception, AgentTapeError):
        return
    notes = getattr(exception, "__notes__", ())
    if any(isinstance(note, str) and "injected fault" in note for note in notes):
        return
    shown = "; ".join(
        f"{item.fault.describe()}, fired on {item.method} {item.url}"
        + ("" if item.index is None else f" (interaction {item.index})")
        for item in fired[-5:]
    )
    more = f" ({len(fired) - 5} more before)" if len(fired) > 5 else ""
    exception.add_note(
        f"{FAULT_NOTE} while cassette {path} was open{more}: {shown}. These failures were "
        "injected (faults=), not the service's.",
    )


REPLAYED_FAILURE_HINT = (
    f"To record it again against the live service: {MODE_ENVIRONMENT_VARIABLE}=all (or "
    "mode='all', pytest --agenttape-record, agenttape run --mode all)."
)


def note_replayed(exception: BaseException, tape: Tape, interaction: Interaction) -> None:
    """Adds a note (PEP 678) to an exception built from ``interaction``'s recorded failure:
    it was replayed, from which cassette and interaction, recorded when, and how to record it
    again. A replayed connection error must never be mistaken for a live one. Errors of
    agenttape's own (a miss, an unplayable cassette) and interactions that recorded no
    failure are left alone."""
    if interaction.error is None or isinstance(exception, AgentTapeError):
        return
    if replayed(exception):
        return  # a library re-raised it through another replayed layer
    number = position_of(tape.interactions, interaction)
    which = "an interaction" if number is None else f"interaction {number}"
    request = interaction.request
    recorded = interaction.started.strftime("%Y-%m-%d %H:%M:%S UTC")
    kind = interaction.error.kind
    what = "exception" if kind == "raised" else kind.replace("_", " ")
    _moved_from_causes(exception)
    if interaction.injected is not None:
        exception.add_note(
            f"{NOTE_START} cassette {tape.path}, {which} ({request.method} {request.url}): "
            f"injected fault {interaction.injected}; the service did not fail this way. "
            "Without the fault the recorded interaction is served.",
        )
        return
    exception.add_note(
        f"{NOTE_START} cassette {tape.path}, {which} ({request.method} {request.url}), "
        f"recorded {recorded}: this {what} happened while "
        f"recording, not now. {REPLAYED_FAILURE_HINT}",
    )


def _moved_from_causes(exception: BaseException) -> None:
    """Takes the note off the exceptions ``exception`` wraps (a reset the library turned into
    its own error): a printed traceback says it once, on the exception the caller gets."""
    seen = {id(exception)}
    inner = exception.__cause__ or exception.__context__
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        notes = getattr(inner, "__notes__", None)
        if isinstance(notes, list) and replayed(inner):
            notes[:] = [n for n in notes if not (isinstance(n, str) and n.startswith(NOTE_START))]
            if not notes:
                del inner.__notes__
        inner = inner.__cause__ or inner.__context__


def carry_note(exception: BaseException) -> None:
    """Moves the note of a replayed failure onto ``exception`` from the one it wraps: the
    library above the adapter (requests over urllib3, botocore over urllib3, an SDK over
    httpx) turned the replayed failure into its own error, the one the caller catches."""
    if replayed(exception):
        return
    inner = next((link for link in chain(exception)[1:] if replayed(link)), None)
    if inner is None:
        return
    notes = [note for note in inner.__notes__ if str(note).startswith(NOTE_START)]
    _moved_from_causes(exception)
    for note in notes:
        exception.add_note(note)


def noting(function: Callable[..., R]) -> Callable[..., R]:
    """``function`` (a library's entry point, which raises its own errors around the ones an
    adapter replays) handing out its exceptions with the replay note on them (``carry_note``)."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> R:
        try:
            return function(*args, **kwargs)
        except Exception as exc:
            carry_note(exc)
            raise

    return call


def noting_async(function: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """``noting`` for a coroutine function."""

    @functools.wraps(function)
    async def call(*args: Any, **kwargs: Any) -> R:
        try:
            return await function(*args, **kwargs)
        except Exception as exc:
            carry_note(exc)
            raise

    return call
