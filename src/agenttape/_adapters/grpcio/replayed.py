"""What a replayed grpcio call hands its caller on a sync channel: the same objects' faces
grpcio's own calls show (``grpc.Call``, ``grpc.Future``, an iterator of responses, and
``grpc.RpcError`` for a status that is not OK), built from a recorded interaction."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from ..._core.models import Interaction
from ..._core.playback import Schedule
from ..._core.wire import grpc as grpc_wire
from .common import DeadlinePassed, Metadatum, Method, Outcome, encoding, walk


class ReplayedCall(grpc.Call, grpc.Future):  # type: ignore[misc]
    """A finished unary call: its response, metadata and status, as ``with_call`` and
    ``future`` hand them."""

    def __init__(self, outcome: Outcome, response: Any = None) -> None:
        self._outcome = outcome
        self._response = response

    # grpc.Call
    def initial_metadata(self) -> tuple[Metadatum, ...]:
        return self._outcome.initial

    def trailing_metadata(self) -> tuple[Metadatum, ...]:
        return self._outcome.trailing

    def code(self) -> grpc.StatusCode:
        return self._outcome.code

    def details(self) -> str:
        return self._outcome.details

    def debug_error_string(self) -> str:
        return f"replayed by agenttape: {self._outcome.code} {self._outcome.details!r}"

    # grpc.RpcContext
    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False

    # grpc.Future
    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return self._response

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return None

    def traceback(self, timeout: float | None = None) -> Any:
        return None

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)


class ReplayedRpcError(grpc.RpcError, ReplayedCall):  # type: ignore[misc]
    """A recorded call that ended with a status other than OK, raised as grpcio raises
    one: an ``RpcError`` that is also the ``Call`` (``code()``, ``details()``,
    ``trailing_metadata()``)."""

    def __init__(self, outcome: Outcome, response: Any = None) -> None:
        ReplayedCall.__init__(self, outcome, response)

    def result(self, timeout: float | None = None) -> Any:
        raise self

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self

    def __str__(self) -> str:
        return (
            "<ReplayedRpcError of RPC that terminated with:\n"
            f"\tstatus = {self._outcome.code}\n"
            f'\tdetails = "{self._outcome.details}"\n>'
        )

    __repr__ = __str__


def unary(
    method: Method, interaction: Interaction, schedule: Schedule, timeout: float | None
) -> ReplayedCall:
    """A recorded unary answer: the call, or the error to raise (a ``ReplayedRpcError``)."""
    outcome = Outcome.of(interaction)
    reader = grpc_wire.MessageReader(encoding(interaction))
    messages: list[bytes] = []
    try:
        for piece in walk(interaction, schedule, timeout):
            messages.extend(reader.feed(piece))
        if schedule.paced and not schedule.wait(interaction.duration, timeout):
            raise DeadlinePassed()
    except DeadlinePassed:
        return ReplayedRpcError(Outcome.deadline())
    if outcome.code is not grpc.StatusCode.OK:
        return ReplayedRpcError(outcome)
    if not messages:
        return ReplayedRpcError(_broken(outcome, "the recorded call holds no response message"))
    try:
        response = method.deserialize(messages[0])
    except Exception:
        return ReplayedRpcError(_broken(outcome, "Exception deserializing response!"))
    return ReplayedCall(outcome, response)


def _broken(outcome: Outcome, details: str) -> Outcome:
    return Outcome(outcome.initial, outcome.trailing, grpc.StatusCode.INTERNAL, details)


class StreamFuture(ReplayedRpcError):
    """A streamed call's ``grpc.Future`` side: running until its stream has ended, then done
    with the recorded status (a failed one raised by ``result``)."""

    _ended: bool

    def cancelled(self) -> bool:
        return self._outcome.code is grpc.StatusCode.CANCELLED

    def running(self) -> bool:
        return not self._ended

    def done(self) -> bool:
        return self._ended

    def result(self, timeout: float | None = None) -> Any:
        if self._outcome.code is not grpc.StatusCode.OK and self._ended:
            raise self
        return None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self if self._ended and self._outcome.code is not grpc.StatusCode.OK else None


class ReplayedStream(StreamFuture):
    """A recorded stream of responses, handed over message by message through the stub's
    deserializer (paced with ``realtime``); a status other than OK is raised at its end, by
    the stream itself, as grpcio does."""

    def __init__(
        self,
        method: Method,
        interaction: Interaction,
        schedule: Schedule,
        timeout: float | None,
    ) -> None:
        ReplayedCall.__init__(self, Outcome.of(interaction))
        self._method = method
        self._interaction = interaction
        self._schedule = schedule
        self._timeout = timeout
        self._walk = walk(interaction, schedule, timeout)
        self._pieces = iter(self._walk)
        self._reader = grpc_wire.MessageReader(encoding(interaction))
        self._ready: deque[bytes] = deque()
        self._ended = False
        self._callbacks: list[Callable[[Any], None]] = []

    def __iter__(self) -> ReplayedStream:
        return self

    def __next__(self) -> Any:
        while not self._ready:
            if self._ended:
                if self._outcome.code is grpc.StatusCode.OK:
                    raise StopIteration
                if self._walk.ending == "failed" and self._outcome == Outcome.of(self._interaction):
                    self._walk.noted(self)
                raise self
            try:
                piece = next(self._pieces)
            except StopIteration:
                if self._schedule.paced and not self._schedule.wait(
                    self._interaction.duration, self._timeout
                ):
                    self._outcome = Outcome.deadline()
                self._end()
                continue
            except DeadlinePassed:
                self._outcome = Outcome.deadline()
                self._end()
                continue
            self._ready.extend(self._reader.feed(piece))
        return self._method.deserialize(self._ready.popleft())

    next = __next__

    def _end(self) -> None:
        self._ended = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def is_active(self) -> bool:
        return not self._ended

    def cancel(self) -> bool:
        if self._ended:
            return False
        self._outcome = Outcome(
            self._outcome.initial,
            (),
            grpc.StatusCode.CANCELLED,
            "Locally cancelled by application!",
        )
        self._ready.clear()
        self._schedule.release()
        self._end()
        return True

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        if self._ended:
            fn(self)
        else:
            self._callbacks.append(fn)
