"""The replay walk: a recorded response handed over step by step, the same way for every
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

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, TypeVar

from .exchange import Schedule
from .models import Failure, Interaction

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
        "_left",
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
        self._left: float | None = schedule.end

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

    def _turn(self, index: int | None) -> None:
        schedule = self.schedule
        if self.before_turn is not None and schedule.waits(index):
            self.before_turn()
        schedule.turn(index)

    def _ended(self) -> Ending:
        if self.failure is not None:
            return "failed"
        return "held" if self.schedule.held else "eof"

    def __iter__(self) -> Iterator[bytes]:
        schedule = self.schedule
        # Nothing paced and no request to wait for: every step is due now, and the replay of
        # nearly every response skips asking.
        asks = not schedule.at_once
        if self.head is not None and self._index < 0:
            if asks:
                self.arrives(schedule.head)
            self._index = 0
            yield self.head
        pieces = self.pieces
        for index in range(self._index, len(pieces)):
            self._index = index + 1
            if asks:
                self.arrives(schedule.chunk(index))
                self._turn(index)
            yield pieces[index]
        if asks:
            self.arrives(schedule.end)
            self._turn(None)
        ending = self._ended()
        if ending == "held" and self.hold and not schedule.hold(self.timeout):
            raise self.timed_out()
        self.ending = ending

    async def __aiter__(self) -> AsyncIterator[bytes]:
        schedule = self.schedule
        asks = not schedule.at_once  # as ``__iter__``
        if self.head is not None and self._index < 0:
            if asks:
                await self.arrives_async(schedule.head)
            self._index = 0
            yield self.head
        pieces = self.pieces
        for index in range(self._index, len(pieces)):
            self._index = index + 1
            if asks:
                await self.arrives_async(schedule.chunk(index))
                await schedule.turn_async(index)
            yield pieces[index]
        if asks:
            await self.arrives_async(schedule.end)
            await schedule.turn_async(None)
        ending = self._ended()
        if ending == "held" and self.hold and not await schedule.hold_async(self.timeout):
            raise self.timed_out()
        self.ending = ending

    @property
    def exhausted(self) -> bool:
        """Whether every piece was handed over (only the end is left)."""
        return self._index >= len(self.pieces)

    def poll(self) -> bytes | float | Ending:
        """The next step for a transport driven by event-loop callbacks, which asks again
        after a wait: a piece to hand over now, the seconds to wait before asking again, or
        the ending once it is due (the walk is then over; a held body is left to the
        client's own read timeout)."""
        schedule = self.schedule
        index = self._index
        if index < len(self.pieces):
            if schedule.paced:
                delay = schedule.delay(schedule.head if index < 0 else schedule.chunk(index))
                if delay > 0:
                    return delay
            if index >= 0 and not schedule.ready(index):
                return TURN_POLL
            self._index = index + 1
            self.delivered += 1
            return self.head if index < 0 and self.head is not None else self.pieces[index]
        if self.ending is not None:
            return self.ending
        if schedule.held:
            self.ending = "held"
            return "held"
        if not schedule.ready(None):
            return TURN_POLL
        if self._left is not None:
            delay, self._left = schedule.delay(self._left), None
            if delay > 0:
                return delay
        self.ending = self._ended()
        return self.ending
