"""What grpcio's sync and asyncio channels share: a call's method, its request in the model,
what a recorded call ended with, and how a live call's end is written down."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc

from ..._core.models import Failure, Interaction, Request
from ..._core.playback import Schedule, Walk
from ..._core.tape import Recording, Tape
from ..._core.wire import grpc as grpc_wire

CODES: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}
Metadata = tuple[tuple[str, str | bytes], ...]


class Metadatum(NamedTuple):
    """One metadata pair as grpcio hands it (``key``, ``value``; a tuple too)."""

    key: str
    value: str | bytes


def as_metadata(pairs: Iterable[tuple[str, str | bytes]]) -> tuple[Metadatum, ...]:
    return tuple(Metadatum(key, value) for key, value in pairs)


def _decoder(message_class: Any) -> grpc_wire.Decoder | None:
    """A protobuf class's bytes → dict with field names, for miss messages and the tools."""
    parse = getattr(message_class, "FromString", None)
    if parse is None or getattr(message_class, "DESCRIPTOR", None) is None:
        return None
    try:
        from google.protobuf import json_format
    except ImportError:
        return None

    def decode(data: bytes) -> Any:
        message = parse(data)
        try:
            return json_format.MessageToDict(
                message,
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
            )
        except TypeError:  # protobuf before 5.26
            return json_format.MessageToDict(message, preserving_proto_field_name=True)

    return decode


@dataclass(slots=True)
class Method:
    """One method of one channel: where calls go and how its messages become bytes."""

    url: str
    path: str
    serializer: Callable[[Any], bytes] | None
    deserializer: Callable[[bytes], Any] | None
    registered: bool = False

    @classmethod
    def of(cls, target: str, path: Any, serializer: Any, deserializer: Any) -> Method:
        text = path.decode("ascii") if isinstance(path, bytes) else str(path)
        return cls(grpc_wire.url(target, text), text, serializer, deserializer)

    def serialize(self, message: Any) -> bytes:
        if self.serializer is None:
            return bytes(message)
        return bytes(self.serializer(message))

    def deserialize(self, data: bytes) -> Any:
        return data if self.deserializer is None else self.deserializer(data)

    def request(self, messages: Sequence[Any], metadata: Any) -> tuple[Request, list[bytes]]:
        """The call in the model, and its messages' bytes as they will be sent."""
        payloads = [self.payload(message) for message in messages]
        headers = [("content-type", grpc_wire.CONTENT_TYPE), *grpc_wire.metadata_headers(metadata)]
        return Request("POST", self.url, headers, grpc_wire.frames(payloads)), payloads

    def payload(self, message: Any) -> bytes:
        """One request message's bytes (the first one also tells the tools its types)."""
        if not self.registered:
            self.registered = True
            self._register(message)
        return self.serialize(message)

    def sent(self, tape: Tape, recording: Recording, messages: Iterable[Any]) -> Iterator[bytes]:
        """A streamed request's messages as bytes, each written into the recorded request
        as grpcio takes it to send (``written``)."""
        return (self.written(tape, recording, message) for message in messages)

    def written(self, tape: Tape, recording: Recording, message: Any) -> bytes:
        """``message``'s bytes, added to the recorded request (redacted as a request body
        is) with the moment it is sent: the call runs while the caller still writes, so a
        client that sends its next message once it has the answer to the last one (a
        bidirectional ping-pong) gets each answer as it comes, and replay answers it so."""
        payload = self.payload(message)
        recording.sent(tape.client_frame(grpc_wire.frame(payload)))
        return payload

    def _register(self, message: Any) -> None:
        request = _decoder(type(message))
        if request is not None:
            grpc_wire.register(self.path, "request", request)
        response = _decoder(getattr(self.deserializer, "__self__", None))
        if response is not None:
            grpc_wire.register(self.path, "response", response)


@dataclass(slots=True)
class Outcome:
    """How a recorded call ended: its metadata both ways, status code and details."""

    initial: tuple[Metadatum, ...]
    trailing: tuple[Metadatum, ...]
    code: grpc.StatusCode
    details: str

    @classmethod
    def of(cls, interaction: Interaction) -> Outcome:
        response = interaction.response
        if response is None:
            failure = interaction.error
            what = f"{failure.type}: {failure.message}" if failure else "no response"
            return cls((), (), grpc.StatusCode.UNAVAILABLE, what)
        number, details = grpc_wire.status(response)
        if interaction.error is not None and grpc_wire.first_status(response) is None:
            number, details = 14, f"{interaction.error.type}: {interaction.error.message}"
        return cls(
            as_metadata(grpc_wire.header_metadata(response.headers)),
            as_metadata(grpc_wire.trailing_metadata(response)),
            CODES.get(number, grpc.StatusCode.UNKNOWN),
            details,
        )

    @classmethod
    def deadline(cls) -> Outcome:
        return cls((), (), grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


class DeadlinePassed(Exception):
    """A paced replay reached the caller's deadline before the next message was due."""


def _deadline() -> BaseException:
    return DeadlinePassed()


def walk(interaction: Interaction, schedule: Schedule, timeout: float | None) -> Walk:
    """The recorded message pieces, paced as recorded with ``realtime``; a body held open
    when recorded ends where its recording did."""
    return Walk.of(interaction, schedule, timeout=timeout, timed_out=_deadline, hold=False)


def encoding(interaction: Interaction) -> str | None:
    response = interaction.response
    return None if response is None else response.header("grpc-encoding")


def response_headers(metadata: Any) -> list[tuple[str, str]]:
    """A live call's initial metadata as the response head gRPC sent."""
    headers = grpc_wire.metadata_headers(metadata)
    if not any(name.lower() == "content-type" for name, _ in headers):
        headers.insert(0, ("content-type", grpc_wire.CONTENT_TYPE))
    return headers


def _call_value(call: Any, name: str) -> Any:
    method = getattr(call, name, None)
    if method is None:
        return None
    try:
        return method()
    except Exception:
        return None


def record_head(recording: Recording, call: Any) -> None:
    """The initial metadata arrived (or the call ended without any)."""
    if recording.interaction.response is None and not recording.finished:
        initial = _call_value(call, "initial_metadata")
        recording.respond(200, "", "HTTP/2", response_headers(initial))


def record_message(recording: Recording, message: bytes) -> None:
    recording.chunk(grpc_wire.frame(message))


def record_end(recording: Recording, code: Any, details: str | None, trailing: Any) -> None:
    """The call ended: its status and trailing metadata become the trailers."""
    if recording.finished:
        return
    if recording.interaction.response is None:
        recording.respond(200, "", "HTTP/2", response_headers(()))
    number = code.value[0] if isinstance(code, grpc.StatusCode) else 2
    recording.trail(grpc_wire.status_trailers(number, details, trailing))
    recording.finish()


def record_call_end(recording: Recording, call: Any) -> None:
    """``record_end`` read from a finished grpcio call (or its error)."""
    record_head(recording, call)
    record_end(
        recording,
        _call_value(call, "code"),
        _call_value(call, "details"),
        _call_value(call, "trailing_metadata"),
    )


def bytes_twin(multi_callable: Any) -> Any:
    """A copy of grpcio's multi-callable that sends and receives bytes as they are."""
    twin = object.__new__(type(multi_callable))
    for klass in type(multi_callable).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(multi_callable, name):
                setattr(twin, name, getattr(multi_callable, name))
    for name, value in getattr(multi_callable, "__dict__", {}).items():
        setattr(twin, name, value)
    twin._request_serializer = None
    twin._response_deserializer = None
    return twin


def records_unmatched(tape: Tape) -> bool:
    """Whether ``tape`` records every call without matching it first (its request need not
    be whole before the call starts)."""
    return tape.is_recording and tape.mode != "new_episodes"


def not_a_transport_failure(exc: BaseException) -> Failure | None:
    """A gRPC call ends with a status, written down as trailers by the adapter itself."""
    return None
