"""A replayed call whose requests stream and whose answers stream, matched message by message.

Each request message is matched as the caller sends it against the recorded calls of the
same method that began with the same messages (in the order the cassette serves identical
requests: the first recorded one still unplayed answers). The answers that call had received
before its next message was sent are handed over then, so a bidirectional ping-pong (each
message sent once the answer to the last one came) replays as it was recorded. A message
nothing recorded begins with raises the miss at once, naming it; once the requests end, the
cassette serves the call as a whole (``Tape.begin``), and its remaining answers and status
follow.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from ..._core.errors import UnmatchedInteractionError
from ..._core.models import Interaction, Request
from ..._core.tape import Tape
from ..._core.tracebacks import note_replayed
from ..._core.wire import grpc as grpc_wire
from .common import Metadatum, Method, Outcome, encoding
from .replayed import ReplayedCall, StreamFuture

ITERATING_FAILED = "Exception iterating requests!"
"""The details grpcio gives a call whose request iterator raised."""


@dataclass(slots=True)
class _Recorded:
    """One recorded call as message-by-message replay reads it: its request messages (as
    framed), its answers, and how many request messages each answer waits for."""

    interaction: Interaction
    requests: list[bytes]
    answers: list[bytes]
    needs: list[int]

    @classmethod
    def of(cls, interaction: Interaction) -> _Recorded:
        request = interaction.request
        requests = _frames(request.body)
        answers: list[bytes] = []
        arrivals: list[float] = []
        response = interaction.response
        if response is not None:
            reader = grpc_wire.MessageReader(encoding(interaction))
            offsets = [offset for _size, offset in response.chunks]
            last = offsets[-1] if offsets else 0.0
            for index, piece in enumerate(response.pieces()):
                for message in reader.feed(piece):
                    answers.append(message)
                    arrivals.append(offsets[index] if index < len(offsets) else last)
        sent = _sent_at(request, requests)
        if sent is None:
            # Sent before send times were kept: one answer per message, the rest at the end.
            needs = [min(index + 1, len(requests)) for index in range(len(answers))]
        else:
            needs = [bisect.bisect_right(sent, arrival) for arrival in arrivals]
        return cls(interaction, requests, answers, needs)


def _frames(body: bytes) -> list[bytes]:
    """A gRPC body's messages, each with its five-byte prefix, as sent."""
    frames = []
    start = 0
    while len(body) - start >= grpc_wire.PREFIX.size:
        _flag, size = grpc_wire.PREFIX.unpack_from(body, start)
        end = start + grpc_wire.PREFIX.size + size
        frames.append(body[start:end])
        start = end
    return frames


def _sent_at(request: Request, frames: list[bytes]) -> list[float] | None:
    """When each request message was sent (the offset of the chunk it begins in), ascending;
    None when the recording kept no send times for all of them."""
    chunks = request.chunks
    if not chunks or sum(size for size, _offset in chunks) < len(request.body):
        return None
    sent = []
    chunk, chunk_end, start = -1, 0, 0
    for frame in frames:
        while chunk_end <= start:
            chunk += 1
            chunk_end += chunks[chunk][0]
        sent.append(chunks[chunk][1])
        start += len(frame)
    return sorted(sent)


class Conversation:
    """The matching of one call, message by message, and which answers are due. Not
    thread-safe: its callers hold one lock around it."""

    def __init__(
        self, tape: Tape, method: Method, model: Request, candidates: list[Interaction]
    ) -> None:
        self._tape = tape
        self.method = method
        self._model = model
        self._candidates = [_Recorded.of(interaction) for interaction in candidates]
        self._payloads: list[bytes] = []
        self._sent: list[bytes] = []
        self.served: _Recorded | None = None
        """The call as the cassette served it, once its requests ended."""
        self.error: BaseException | None = None
        """The miss, or what stopped the caller's requests."""
        self.handed = 0
        """How many answers were handed over."""

    @property
    def decided(self) -> bool:
        """Whether the requests need no more reading: the call was served, or failed."""
        return self.served is not None or self.error is not None

    def heard(self, message: Any) -> None:
        """The caller sent ``message``: the recorded calls that begin otherwise drop out; when
        none is left, the cassette is asked for the call as sent so far (the miss)."""
        payload = self.method.payload(message)
        index = len(self._sent)
        self._payloads.append(payload)
        self._sent.append(self._tape.client_frame(grpc_wire.frame(payload)))
        sent = self._sent[index]
        self._candidates = [
            recorded
            for recorded in self._candidates
            if index < len(recorded.requests) and recorded.requests[index] == sent
        ]
        if not self._candidates:
            self.end()

    def end(self) -> None:
        """The requests ended: the cassette serves the call (or raises the miss)."""
        model = dataclasses.replace(self._model, body=grpc_wire.frames(self._payloads))
        try:
            plan = self._tape.begin(model)
        except UnmatchedInteractionError as miss:
            self.error = miss
            return
        assert isinstance(plan, Interaction), "candidates come from a tape that replays"
        self.served = _Recorded.of(plan)

    def stopped(self, details: str) -> None:
        """The caller's requests failed (grpcio ends the call with UNKNOWN)."""
        self.error = Failed(Outcome((), (), grpc.StatusCode.UNKNOWN, details))

    @property
    def _answering(self) -> _Recorded | None:
        if self.served is not None:
            return self.served
        return self._candidates[0] if self._candidates else None

    def due(self) -> bool:
        """Whether the next answer may be handed over now."""
        recorded = self._answering
        if recorded is None or self.handed >= len(recorded.answers):
            return False
        return self.served is not None or recorded.needs[self.handed] <= len(self._sent)

    def take(self) -> bytes:
        recorded = self._answering
        assert recorded is not None
        self.handed += 1
        return recorded.answers[self.handed - 1]

    @property
    def over(self) -> bool:
        """Whether every answer of the served call was handed over (its status is next)."""
        return self.served is not None and self.handed >= len(self.served.answers)

    @property
    def initial(self) -> tuple[Metadatum, ...]:
        recorded = self._answering
        return () if recorded is None else Outcome.of(recorded.interaction).initial

    def noted(self, error: BaseException) -> BaseException:
        """``error`` for the served call's recorded failure, with the note saying so."""
        if self.served is not None:
            note_replayed(error, self._tape, self.served.interaction)
        return error


class Failed(Exception):
    """The caller's requests failed: the call ends with ``outcome``."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.details)
        self.outcome = outcome


class MatchedStream(StreamFuture):
    """The answers of a sync channel's call whose requests stream, replayed message by
    message: grpcio's response iterator and ``grpc.Call``. The caller's requests are read
    on a thread of their own, as grpcio reads them."""

    def __init__(
        self, conversation: Conversation, requests: Iterator[Any], timeout: float | None
    ) -> None:
        ReplayedCall.__init__(self, Outcome((), (), grpc.StatusCode.OK, ""))
        self._conversation = conversation
        self._method = conversation.method
        self._changed = threading.Condition()
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._ended = False
        self._callbacks: list[Callable[[Any], None]] = []
        threading.Thread(
            target=self._read, args=(requests,), name="agenttape-grpc-requests", daemon=True
        ).start()

    def _read(self, requests: Iterator[Any]) -> None:
        conversation, changed = self._conversation, self._changed
        try:
            for message in requests:
                with changed:
                    if self._ended or conversation.decided:
                        return
                    conversation.heard(message)
                    changed.notify_all()
            with changed:
                if not (self._ended or conversation.decided):
                    conversation.end()
        except Exception:
            with changed:
                if not conversation.decided:
                    conversation.stopped(ITERATING_FAILED)
        finally:
            with changed:
                changed.notify_all()

    def _wait(self, ready: Callable[[], bool]) -> None:
        """Waits (holding the lock) until ``ready()``, the call ends, or its deadline passes
        (the call then ends with DEADLINE_EXCEEDED)."""
        while not (self._ended or ready()):
            left = None if self._deadline is None else self._deadline - time.monotonic()
            if left is not None and left <= 0:
                self._end(Outcome.deadline())
                return
            self._changed.wait(left)

    def _settled(self) -> bool:
        """Whether the call's end is known: served, failed, missed."""
        conversation = self._conversation
        if isinstance(conversation.error, Failed):
            self._end(conversation.error.outcome)
        elif conversation.error is not None:
            raise conversation.error
        elif conversation.served is not None:
            self._outcome = Outcome.of(conversation.served.interaction)
            return True
        return False

    def __iter__(self) -> MatchedStream:
        return self

    def __next__(self) -> Any:
        conversation = self._conversation
        with self._changed:
            self._wait(lambda: conversation.due() or conversation.over or conversation.decided)
            if not self._ended and conversation.due():
                raw = conversation.take()
            else:
                if not self._ended:
                    self._settled()
                    self._end(self._outcome)
                if self._outcome.code is grpc.StatusCode.OK:
                    raise StopIteration
                served = conversation.served
                if served is not None and self._outcome == Outcome.of(served.interaction):
                    raise conversation.noted(self)
                raise self
        return self._method.deserialize(raw)

    next = __next__

    def _end(self, outcome: Outcome) -> None:
        if self._ended:
            return
        self._ended = True
        self._outcome = outcome
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)
        self._changed.notify_all()

    def _finished(self) -> Outcome:
        """The call's status once known (grpcio's ``code()`` waits for it too)."""
        with self._changed:
            self._wait(self._settled)
        return self._outcome

    def initial_metadata(self) -> tuple[Metadatum, ...]:
        conversation = self._conversation
        with self._changed:
            self._wait(lambda: conversation.due() or conversation.decided)
            return conversation.initial

    def trailing_metadata(self) -> tuple[Metadatum, ...]:
        return self._finished().trailing

    def code(self) -> grpc.StatusCode:
        return self._finished().code

    def details(self) -> str:
        return self._finished().details

    def is_active(self) -> bool:
        return not self._ended

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def cancel(self) -> bool:
        with self._changed:
            if self._ended:
                return False
            initial = self._conversation.initial
            cancelled = "Locally cancelled by application!"
            self._end(Outcome(initial, (), grpc.StatusCode.CANCELLED, cancelled))
            return True

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        with self._changed:
            if not self._ended:
                self._callbacks.append(fn)
                return
        fn(self)
