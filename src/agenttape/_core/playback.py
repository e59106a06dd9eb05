"""Playback: when each part of a replayed response is due (``Schedule``), and the walk that
hands it over step by step (``Walk``), the same way for every library.

The replay walk: a recorded response handed over step by step, the same way for every
library — the head when it arrived, each body piece at its time and in its turn, then the end:
the end of the stream, the recorded failure, or, for a body the client closed early, nothing
until it closes it or gives up.

Each step waits for its time (``Schedule.wait``: at once, or at the recorded offset with
``realtime``) and then for its turn (``Schedule.turn``: the requests recorded as starting
before it were made again). The end is a step too: it is ordered against those requests as
the pieces are, so a stream the server ended when the client made another request ends there
on replay. An adapter walks it in the form its library drives: a loop (``__iter__``), a
coroutine (``__aiter__``), or a transport driven by event-loop callbacks (``poll``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar

from .bodies import reached_end_of_stream
from .matching.replay_queue import Precedents
from .models import Failure, Interaction
from .tracebacks import note_replayed

if TYPE_CHECKING:
    from .tape import Tape

TURN_GRACE = 2.0
"""Seconds a replayed body piece waits for a request recorded before it beyond the recorded
gap before the piece: a replay slower than the recording here and there keeps its order, and a
client that no longer makes the request is not held up for long."""

_RELEASE_LOCK = threading.Lock()
"""Orders a client's close against a ``hold`` making its event."""


def held(interaction: Interaction) -> bool:
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
        held_body = held(interaction)
        if not realtime:
            return cls(False, 0.0, (), None, held_body, started)
        duration = interaction.duration
        if response is None:
            return cls(True, duration or 0.0, (), duration, False, started)
        end = duration if interaction.error is not None else None
        chunks = tuple(offset for _size, offset in response.chunks)
        return cls(True, interaction.ttfb or 0.0, chunks, end, held_body, started)

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
                except TimeoutError:
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
        except TimeoutError:
            return False
        finally:
            self._wakers.remove(wake)
        return True


Ending = Literal["eof", "failed", "held"]
"""How a walk ended: the stream ended, the recorded failure is due, or the body is held open
(the client closed it early when it was recorded)."""

E = TypeVar("E", bound=BaseException)

TURN_POLL = 0.005
"""Seconds between two asks of a polled walk waiting for its turn."""


class WalkTimedOut(Exception):
    """The client's read timeout ran out before the next step was due."""


def _timed_out() -> BaseException:
    return WalkTimedOut("timed out")


class Walk:
    """The steps of one replayed response.

    ``pieces`` are the body pieces as the library reads them (recorded chunks, or their wire
    form); a piece past the recorded ones is due at once and waits for the end's turn.
    ``head``, when given, is handed over first, when the response head arrived. ``timeout``
    is the client's read timeout: a step due later raises ``timed_out()``, the library's own
    exception. With ``hold`` False a held body ends the walk with ``"held"`` at once and the
    adapter keeps it open its own way; otherwise the walk waits there until the client closes
    the body (``Schedule.release``) or gives up."""

    __slots__ = (
        "_index",
        "_stepping",
        "_waiting",
        "before_turn",
        "delivered",
        "ending",
        "failure",
        "head",
        "hold",
        "pieces",
        "schedule",
        "timed_out",
        "timeout",
    )

    def __init__(
        self,
        schedule: Schedule,
        pieces: Sequence[bytes],
        failure: Failure | None = None,
        *,
        head: bytes | None = None,
        timeout: float | None = None,
        timed_out: Callable[[], BaseException] = _timed_out,
        hold: bool = True,
        before_turn: Callable[[], None] | None = None,
    ) -> None:
        self.schedule = schedule
        self.pieces = pieces
        self.failure = failure
        self.head = head
        self.timeout = timeout
        self.timed_out = timed_out
        self.hold = hold
        self.before_turn = before_turn
        self.ending: Ending | None = None
        self.delivered = 0
        self._index = -1 if head is not None else 0
        self._stepping: Iterator[bytes | _Wait] | None = None
        self._waiting: _Wait | None = None

    @classmethod
    def of(
        cls,
        interaction: Interaction,
        schedule: Schedule,
        *,
        timeout: float | None = None,
        timed_out: Callable[[], BaseException] = _timed_out,
        hold: bool = True,
        before_turn: Callable[[], None] | None = None,
    ) -> Walk:
        """The walk of a recorded response's chunks as they arrived."""
        response = interaction.response
        pieces = response.pieces() if response is not None else []
        return cls(
            schedule,
            pieces,
            interaction.error,
            timeout=timeout,
            timed_out=timed_out,
            hold=hold,
            before_turn=before_turn,
        )

    def noted(self, exception: E) -> E:
        """``exception``, the library's own for the recorded failure this walk ends with,
        with the note (PEP 678) that says it was replayed, from which cassette and
        interaction, recorded when and how to record it again: a body cut short on replay is
        never mistaken for a live one, as a failure at the head is not."""
        self.schedule.note(exception)
        return exception

    @contextmanager
    def noting(self) -> Iterator[None]:
        """Around the library's own reading of the body: an exception it raises once the walk
        ended in the recorded failure (an end of stream the library reports in its own
        words, a reset it wraps) gets the note too (``noted``)."""
        try:
            yield
        except Exception as exc:
            if self.ending == "failed":
                self.noted(exc)
            raise

    def arrives(self, due: float | None) -> None:
        """Returns at ``due`` (see ``Schedule.wait``); raises ``timed_out()`` when the client
        gives up first."""
        if not self.schedule.wait(due, self.timeout):
            raise self.timed_out()

    async def arrives_async(self, due: float | None) -> None:
        if not await self.schedule.wait_async(due, self.timeout):
            raise self.timed_out()

    def _before_turn(self, index: int | None) -> None:
        """What goes before a step that waits for its turn (``before_turn``)."""
        if self.before_turn is not None and self.schedule.waits(index):
            self.before_turn()

    def _ended(self) -> Ending:
        if self.failure is not None:
            return "failed"
        return "held" if self.schedule.held else "eof"

    def _steps(self) -> Iterator[bytes | _Wait]:
        """The walk's one sequence of steps, which every driver follows: a piece to hand
        over, or a wait (``_Wait``) each driver makes its own way — blocking (``__iter__``),
        awaiting (``__aiter__``) or asking again later (``poll``). Nothing paced and no
        request to wait for: every step is due now, and the replay of nearly every response
        has no waits at all."""
        schedule = self.schedule
        asks = not schedule.at_once
        if self._index < 0 and self.head is not None:
            if asks:
                yield _Wait(schedule.head, -1)
            self._index = 0
            self.delivered += 1
            yield self.head
        pieces = self.pieces
        for index in range(self._index, len(pieces)):
            if asks:
                yield _Wait(schedule.chunk(index), index)
            self._index = index + 1
            self.delivered += 1
            yield pieces[index]
        if asks:
            yield _Wait(schedule.end, None)

    def __iter__(self) -> Iterator[bytes]:
        schedule = self.schedule
        for step in self._steps():
            if not isinstance(step, _Wait):
                yield step
                continue
            self.arrives(step.due)
            if step.turn != -1:
                self._before_turn(step.turn)
                schedule.turn(step.turn)
        ending = self._ended()
        if ending == "held" and self.hold and not schedule.hold(self.timeout):
            raise self.timed_out()
        self.ending = ending

    async def __aiter__(self) -> AsyncIterator[bytes]:
        schedule = self.schedule
        for step in self._steps():
            if not isinstance(step, _Wait):
                yield step
                continue
            await self.arrives_async(step.due)
            if step.turn != -1:
                self._before_turn(step.turn)
                await schedule.turn_async(step.turn)
        ending = self._ended()
        if ending == "held" and self.hold and not await schedule.hold_async(self.timeout):
            raise self.timed_out()
        self.ending = ending

    def stop(self) -> None:
        """The driver asks no more (a response that ends with its last piece has no step
        for the end): the generator of steps, which refers back to the walk, is let go, so
        the walk and the interaction it plays are freed without waiting for a collection."""
        self._stepping = None

    @property
    def exhausted(self) -> bool:
        """Whether every piece was handed over (only the end is left)."""
        return self._index >= len(self.pieces)

    def poll(self) -> bytes | float | Ending:
        """The next step for a transport driven by event-loop callbacks, which asks again
        after a wait: a piece to hand over now, the seconds to wait before asking again, or
        the ending once it is due (the walk is then over; a held body is left to the
        client's own read timeout)."""
        if self.ending is not None:
            return self.ending
        schedule = self.schedule
        steps = self._stepping
        if steps is None:
            steps = self._stepping = self._steps()
        step: bytes | _Wait | None = self._waiting
        while True:
            if step is None:
                step = next(steps, None)
                if step is None:
                    break
            if not isinstance(step, _Wait):
                self._waiting = None
                return step
            wait = step
            if not wait.arrived:
                if schedule.paced and wait.due is not None:
                    delay = schedule.delay(wait.due)
                    if delay > 0:
                        self._waiting = wait
                        return delay
                wait.arrived = True
                if wait.turn != -1:
                    self._before_turn(wait.turn)
            if wait.turn != -1 and not schedule.ready(wait.turn):
                self._waiting = wait
                return TURN_POLL
            step = None
        self._waiting = None
        self.ending = self._ended()
        return self.ending


class _Wait:
    """A step of a walk that waits: until ``due`` (see ``Schedule.wait``), then, unless
    ``turn`` is -1 (the head), for the turn of body piece ``turn`` (None: the end).
    ``arrived`` is for ``poll``, which asks about one step more than once."""

    __slots__ = ("arrived", "due", "turn")

    def __init__(self, due: float | None, turn: int | None) -> None:
        self.due = due
        self.turn = turn
        self.arrived = False
