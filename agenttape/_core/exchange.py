"""The one seam every adapter calls: an HTTP library's request, in the library-neutral model,
goes in; the tape decides whether it is replayed or recorded; the adapter gets back what its
library expects.

An adapter translates and nothing more. It hands ``begin`` the request and gets back a
value: ``Replay`` (the recorded interaction, its ``playback`` and, for nearly every one, the
body to hand over at once) or ``Live`` (the recording a real exchange feeds). It branches on
that value: it builds its library's answer from the recording, or calls the library's own
transport (with or without ``await``), inside one ``with serving(tape, plan, failure_of)``.
What happens around the branch is decided here, once for every library, sync or async: the
signal that lets retry waits after a replayed response take no time, the note that says a
replayed failure was replayed, how a live failure is written down (``failure_of``: what one of
the library's exceptions stands for), that live traffic inside it is never recorded twice,
and when each replayed part is due (``Schedule``), also against the other requests the client
makes meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from . import runtime
from .bodies import reached_end_of_stream
from .errors import AgentTapeError, CassetteFormatError
from .faults import FAULT_HEADER
from .models import Failure, Interaction, Request
from .options import MODE_ENVIRONMENT_VARIABLE
from .replay_queue import Precedents
from .tape import Recording, Tape
from .tracebacks import NOTE_START, chain, replayed

if TYPE_CHECKING:
    from .faults import FiredFault

R = TypeVar("R")

FailureOf = Callable[[BaseException], Failure | None]
"""An adapter's reading of one of its library's exceptions; None for one that is not a
transport failure (it propagates and is not written down)."""

TURN_GRACE = 2.0
"""Seconds a replayed body piece waits for a request recorded before it beyond the recorded
gap before the piece: a replay slower than the recording here and there keeps its order, and a
client that no longer makes the request is not held up for long."""

_RELEASE_LOCK = threading.Lock()
"""Orders a client's close against a ``hold`` making its event."""

_replayed: ContextVar[bool] = ContextVar("agenttape_replayed", default=False)


def skip_retry_wait() -> bool:
    """True when a retry wait should take no time: the exchange just made here was replayed
    and the tape asks for ``fast_retries``. Retry loops (urllib3, botocore, the OpenAI and
    Anthropic SDKs) ask this before sleeping; ``time.sleep`` itself is never touched."""
    if not _replayed.get():
        return False
    tape = runtime.active()
    return tape is not None and tape.fast_retries


@dataclass(slots=True)
class Replay:
    """The tape's answer for a request it replays: the recorded ``interaction``.

    ``body`` is given for nearly every one: an interaction with nothing to pace, hold, fail
    or wait for, whose body is handed over in at most one piece. The adapter hands that body
    to its library as any response read from memory, with no ``playback`` made and nothing
    of ``serving`` run (the exchange is marked replayed already). Any other is served inside
    ``serving`` by way of ``playback``."""

    interaction: Interaction
    tape: Tape = field(repr=False)
    body: bytes | None = None
    _playback: Schedule | None = field(default=None, repr=False)

    @property
    def playback(self) -> Schedule:
        """When each part of the replayed answer is due, counted from the first time it is
        asked for (where the adapter starts serving it, not where it began)."""
        playback = self._playback
        if playback is None:
            tape, interaction = self.tape, self.interaction
            playback = self._playback = Schedule.of(
                interaction, _paced(tape, interaction), tape.precedents(interaction), tape
            )
        return playback


@dataclass(slots=True)
class Live:
    """The tape's answer for a request it records: the real exchange runs (inside
    ``serving``) and feeds ``recording``."""

    recording: Recording


def begin(tape: Tape, request: Request, boundary: str = "http") -> Replay | Live:
    """The tape's decision for ``request``: replay a recorded interaction or record a live
    one. Raises UnmatchedInteractionError when replay is the only option and nothing
    matches."""
    plan = tape.begin(request, boundary)
    if not isinstance(plan, Interaction):
        return Live(plan)
    response = plan.response
    if (
        response is None
        or plan.error is not None
        or plan.injected is not None
        or tape.realtime
        or (response.truncated and _held(plan))
        or tape.precedents(plan) is not None
    ):
        return Replay(plan, tape)
    chunks, body = response.chunks, response.body
    if chunks and (len(chunks) > 1 or chunks[0][0] != len(body)):
        return Replay(plan, tape)  # more than one piece (``Response.pieces``)
    _replayed.set(True)
    return Replay(plan, tape, body)


class serving:
    """Around the adapter serving ``plan``, sync or async (``with`` works in a coroutine):
    marks the exchange replayed or not (``skip_retry_wait``); a replayed failure's exception
    leaves with the note that says it was replayed (``note_replayed``); a live exchange
    passes the network guard, and an exception escaping it is written down (``failure_of``)
    as the recording's failure."""

    __slots__ = ("failure_of", "plan", "tape", "token")

    def __init__(self, tape: Tape, plan: Replay | Live, failure_of: FailureOf) -> None:
        self.tape = tape
        self.plan = plan
        self.failure_of = failure_of

    def __enter__(self) -> None:
        if isinstance(self.plan, Replay):
            _replayed.set(True)
            return
        _replayed.set(False)
        self.token = runtime.enter_adapter()

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        plan = self.plan
        if isinstance(plan, Replay):
            if isinstance(exc, Exception):
                note_replayed(exc, self.tape, plan.interaction)
            return
        try:
            if exc is not None:
                _failed(plan.recording, exc, self.failure_of)
        finally:
            runtime.exit_adapter(self.token)


def _paced(tape: Tape, interaction: Interaction) -> bool:
    """Whether the interaction is served at its recorded moments: with ``realtime``, and
    always for one a fault made (a ``slow`` fault's delays are its own, and the others have
    none)."""
    return tape.realtime or interaction.injected is not None


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
    _add_note(exception, f"{FAULT_NOTE}: {value}; the service did not fail this way.")


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
    _add_note(
        exception,
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
    number = next((i for i, known in enumerate(tape.interactions) if known is interaction), None)
    which = "an interaction" if number is None else f"interaction {number}"
    request = interaction.request
    recorded = interaction.started.strftime("%Y-%m-%d %H:%M:%S UTC")
    kind = interaction.error.kind
    what = "exception" if kind == "raised" else kind.replace("_", " ")
    _moved_from_causes(exception)
    if interaction.injected is not None:
        _add_note(
            exception,
            f"{NOTE_START} cassette {tape.path}, {which} ({request.method} {request.url}): "
            f"injected fault {interaction.injected}; the service did not fail this way. "
            "Without the fault the recorded interaction is served.",
        )
        return
    _add_note(
        exception,
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
        _add_note(exception, note)


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


def _add_note(exception: BaseException, note: str) -> None:
    """``add_note``, also on Python 3.10 (which keeps ``__notes__`` but does not print it)."""
    if sys.version_info >= (3, 11):
        exception.add_note(note)
    else:
        exception.__notes__ = [*getattr(exception, "__notes__", ()), note]


def unplayable(tape: Tape, interaction: Interaction, library: str, problem: str) -> Exception:
    """The error for a recorded interaction ``library`` cannot be handed (its parser refuses
    a header): it names the cassette and the interaction, where the library would fail deep
    inside itself or read something else than was recorded."""
    number = next((i for i, known in enumerate(tape.interactions) if known is interaction), None)
    which = "an interaction" if number is None else f"interaction {number}"
    return CassetteFormatError(
        f"{tape.path}: {which} cannot be replayed through {library}: {problem}; "
        "correct the cassette or record it again"
    )


def _failed(recording: Recording, exc: BaseException, failure_of: FailureOf) -> None:
    """Writes down an exception that escaped the live exchange: the failure in place of a
    response; a body already under way is marked cut (its own errors were taken where it was
    read)."""
    if recording.finished:
        return
    if recording.interaction.response is not None:
        recording.finish(truncated=True)
        return
    failure = failure_of(exc)
    if failure is not None:
        recording.fail(failure)


def _held(interaction: Interaction) -> bool:
    """Whether the replayed body stays open after its last piece (``Schedule.held``)."""
    response = interaction.response
    return (
        response is not None
        and response.truncated
        and interaction.error is None
        and not reached_end_of_stream(response)
    )


@dataclass(slots=True)
class Schedule:
    """When each part of a replayed exchange is due, in seconds after the request was made:
    everything at once, unless the tape replays in ``realtime`` (then ``paced``).

    ``head`` is when the response head arrived (or, with no response, when the recorded error
    came); ``chunks`` when each body piece did; ``end``, with ``realtime``, when a recorded
    error fired.

    ``held`` marks a body the client closed before the server ended it. Whatever the mode, it
    sends nothing after its last recorded piece and never ends by itself: an early end would
    be an end of stream that never happened, and SDKs act on one (reconnect, retry, report a
    broken stream). It stays open until the client closes it (``release``) or the client's
    own read timeout fires (``hold`` returns False). A stream of events the client closed
    after its own end-of-stream event (``data: [DONE]``, ``message_stop``) is not held: the
    server ends it there, and a client that reads on (the openai npm SDK does) must see it
    end.

    ``precedents`` are the requests the client started while this response was under way.
    A body piece, or the end, recorded after one of them started waits (``turn``) until the
    client makes that request again: an event a tool call announced comes after the call, and
    an event stream the server ended when the session closed ends after the closing request,
    not the moment its last piece is sent (the client would reconnect with requests never
    recorded). The wait lasts at most the recorded gap before that piece and ``TURN_GRACE``,
    so a client that no longer makes the request is not held up for long.
    """

    paced: bool
    head: float
    chunks: tuple[float, ...]
    end: float | None
    held: bool
    started: float
    precedents: Precedents | None = None
    # The cassette and interaction replayed, for the note on the recorded failure.
    origin: tuple[Tape, Interaction] | None = field(default=None, repr=False)
    _marks: tuple[float, ...] = ()
    _finish: float = 0.0
    _asked: tuple[int | None, float] | None = None
    # Whether the client closed the body; the event for ``hold`` is made only when one
    # waits (most replayed bodies are read to their end and never held).
    _closed: bool = False
    _released: threading.Event | None = field(default=None, repr=False)
    _wakers: list[Callable[[], None]] = field(default_factory=list, repr=False)

    @classmethod
    def of(
        cls,
        interaction: Interaction,
        realtime: bool,
        precedents: Precedents | None = None,
        tape: Tape | None = None,
    ) -> Schedule:
        schedule = cls._timed(interaction, realtime)
        if tape is not None:
            schedule.origin = (tape, interaction)
        response = interaction.response
        if precedents is not None:
            schedule.precedents = precedents
            schedule._finish = interaction.duration or 0.0
            chunks = response.chunks if response is not None else []
            schedule._marks = (interaction.ttfb or 0.0, *(offset for _size, offset in chunks))
        return schedule

    @classmethod
    def _timed(cls, interaction: Interaction, realtime: bool) -> Schedule:
        started = time.perf_counter()
        response = interaction.response
        held = _held(interaction)
        if not realtime:
            return cls(False, 0.0, (), None, held, started)
        duration = interaction.duration
        if response is None:
            return cls(True, duration or 0.0, (), duration, False, started)
        end = duration if interaction.error is not None else None
        chunks = tuple(offset for _size, offset in response.chunks)
        return cls(True, interaction.ttfb or 0.0, chunks, end, held, started)

    @property
    def at_once(self) -> bool:
        """Whether every part is due now: nothing paced, no request to wait for."""
        return not self.paced and self.precedents is None

    def note(self, exception: BaseException) -> None:
        """Adds the note that says ``exception``, a library's own for the recorded failure,
        was replayed (``note_replayed``); nothing for a schedule made without its tape."""
        if self.origin is not None:
            note_replayed(exception, *self.origin)

    def chunk(self, index: int) -> float:
        """When body piece ``index`` is due (at once past the recorded offsets)."""
        return self.chunks[index] if index < len(self.chunks) else 0.0

    def delay(self, due: float) -> float:
        """Seconds from now until ``due``; zero or less when it is already due."""
        return due - (time.perf_counter() - self.started)

    def _pause(self, due: float | None, timeout: float | None) -> tuple[float, bool]:
        """(seconds to wait, whether ``due`` comes before the client gives up)."""
        if not self.paced or due is None:
            return 0.0, True
        delay = self.delay(due)
        if timeout is not None and delay > timeout:
            return max(timeout, 0.0), False
        return max(delay, 0.0), True

    def wait(self, due: float | None, timeout: float | None = None) -> bool:
        """Returns at ``due`` (at once unless paced): True. With ``timeout``, the seconds the
        client waits for data, returns after that much when ``due`` is later: False, and the
        adapter raises the client's read timeout, as live."""
        delay, arrives = self._pause(due, timeout)
        if delay:
            time.sleep(delay)
        return arrives

    async def wait_async(self, due: float | None, timeout: float | None = None) -> bool:
        """``wait`` without blocking the event loop; cancelling the caller ends it too."""
        delay, arrives = self._pause(due, timeout)
        if delay:
            import asyncio  # loaded already: the caller runs on an event loop

            await asyncio.sleep(delay)
        return arrives

    def _turn(self, index: int | None) -> tuple[float, float] | None:
        """(recorded offset, longest wait) of body piece ``index`` (None: the end) when it
        waits for a request the client has not made again yet; None when it may go."""
        precedents = self.precedents
        if precedents is None or self._closed:
            return None
        marks = self._marks
        if index is None or index + 1 >= len(marks):  # past the recorded pieces: the end
            offset, last = self._finish, marks[-1]
        else:
            offset, last = marks[index + 1], marks[index]
        if precedents.begun(offset):
            return None
        return offset, max(offset - last, 0.0) + TURN_GRACE

    def waits(self, index: int | None) -> bool:
        """Whether body piece ``index`` (None, or past the recorded pieces: the end) waits for
        a request now (``turn``)."""
        return self._turn(index) is not None

    def ready(self, index: int | None) -> bool:
        """``turn`` for a transport driven by event-loop callbacks, which asks again until it
        is True; the longest wait counts from the first time it asks about ``index``."""
        due = self._turn(index)
        if due is None:
            return True
        now = time.perf_counter()
        if self._asked is None or self._asked[0] != index:
            self._asked = (index, now + due[1])
        return now >= self._asked[1]

    def turn(self, index: int | None) -> None:
        """Returns when body piece ``index`` (None: the end) may be handed over: the requests
        recorded before it were made again, the client closed the body, or the longest wait
        ran out."""
        due = self._turn(index)
        if due is None:
            return
        offset, longest = due
        woken = threading.Event()
        wake = woken.set
        deadline = time.perf_counter() + longest
        self._watch(wake)
        try:
            while (left := self._left(offset, deadline)) > 0:
                woken.wait(left)
                woken.clear()
        finally:
            self._unwatch(wake)

    async def turn_async(self, index: int | None) -> None:
        """``turn`` without blocking the event loop; cancelling the reader ends it too."""
        due = self._turn(index)
        if due is None:
            return
        offset, longest = due
        import asyncio  # loaded already: the caller runs on an event loop

        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            # Called from whichever thread made a request; a loop closed under a reader it
            # never resumed is no error of that request.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(woken.set)

        deadline = time.perf_counter() + longest
        self._watch(wake)
        try:
            while (left := self._left(offset, deadline)) > 0:
                try:
                    await asyncio.wait_for(woken.wait(), left)
                except asyncio.TimeoutError:
                    return
                woken.clear()
        finally:
            self._unwatch(wake)

    def _left(self, offset: float, deadline: float) -> float:
        """Seconds the body piece recorded at ``offset`` still waits for its turn; zero or
        less once the requests before it were made again, the client closed the body, or
        ``deadline`` passed."""
        precedents = self.precedents
        if self._closed or precedents is None or precedents.begun(offset):
            return 0.0
        return deadline - time.perf_counter()

    def _watch(self, wake: Callable[[], None]) -> None:
        self._wakers.append(wake)
        if self.precedents is not None:
            self.precedents.watch(wake)

    def _unwatch(self, wake: Callable[[], None]) -> None:
        self._wakers.remove(wake)
        if self.precedents is not None:
            self.precedents.unwatch(wake)

    def release(self) -> None:
        """The client closed the body: a ``hold`` or ``turn`` under way returns."""
        with _RELEASE_LOCK:
            self._closed = True
            released = self._released
        if released is not None:
            released.set()
        if self._wakers:
            for wake in tuple(self._wakers):
                wake()

    def hold(self, timeout: float | None) -> bool:
        """Keeps a ``held`` body open: True once the client closed it, False when ``timeout``
        (the client's read timeout; None waits for the close alone) ran out first."""
        with _RELEASE_LOCK:
            released = self._released
            if released is None:
                released = self._released = threading.Event()
                if self._closed:
                    released.set()
        return released.wait(timeout)

    async def hold_async(self, timeout: float | None) -> bool:
        """``hold`` without blocking the event loop; cancelling the reader ends it too."""
        if self._closed:
            return True
        import asyncio  # loaded already: the caller runs on an event loop

        loop = asyncio.get_running_loop()
        closed = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(closed.set)

        self._wakers.append(wake)
        if self._closed:  # closed from another thread meanwhile
            closed.set()
        try:
            await asyncio.wait_for(closed.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            self._wakers.remove(wake)
        return True
