"""WebSocket sessions: what the exchange seam (``begin``, ``serving``) hands a WebSocket
adapter, as it hands an HTTP adapter a ``Replay`` or a ``Live``.

A session is one interaction: the upgrade request and its response, then every frame both
ways in order and how it ended. The adapter begins the upgrade request and serves, inside
``serving``, the session the tape decided on (``session_of``):

- a ``SessionRecording``: it opens the real connection and reports what passes on it:
  ``opened`` with the response head, ``sent``/``received`` per frame (payload unmasked and
  inflated), ``closed`` with the closing handshake, ``failed`` with a transport error, and
  ``finish`` when the connection is gone;
- a ``SessionReplay``: it builds its library's connection without a socket: it feeds the
  library the ``handshake`` bytes and the server frames of ``opening()``, then hands each
  frame the client sends to ``sent``, which checks it against the recording and returns the
  server frames that followed it (``Step``); a step's ``end`` says how the session ends.

Which branch runs, the strict frame matcher, redaction of client frames, and when each
replayed frame is due (``due``) are decided here, once for every library.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ..errors import UnmatchedInteractionError
from ..exchange import Live, Replay
from ..matching.matcher import Matcher
from ..matching.replay_queue import RERECORD_HINT
from ..models import OPCODE_NUMBERS, Closed, Frame, Interaction, Opcode, Request
from ..playback import Schedule
from ..tape import Recording, Tape

if TYPE_CHECKING:
    from ..models import Direction, Failure, Headers, Response

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MATCHED: frozenset[str] = frozenset(("text", "binary", "continuation", "close"))
"""Client frames replay checks. Pings and pongs are keepalive traffic whose timing and
payloads differ from run to run: a client ping is answered, a client pong is let through."""


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server answers to ``Sec-WebSocket-Key`` (RFC 6455)."""
    digest = hashlib.sha1(key.encode("latin-1") + _GUID).digest()
    return base64.b64encode(digest).decode("ascii")


def encode_frame(frame: Frame) -> bytes:
    """``frame`` as a server puts it on the wire: unmasked, uncompressed (RSV1 clear, which
    permessage-deflate reads as a message sent as is)."""
    payload = frame.payload
    first = (0x80 if frame.fin else 0) | OPCODE_NUMBERS[frame.opcode]
    size = len(payload)
    if size < 126:
        head = bytes((first, size))
    elif size < 1 << 16:
        head = bytes((first, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first, 127)) + size.to_bytes(8, "big")
    return head + payload


def close_payload(code: int | None, reason: str = "") -> bytes:
    """A close frame's payload: the code in two bytes, then the reason in UTF-8."""
    if code is None:
        return b""
    return code.to_bytes(2, "big") + reason.encode("utf-8")


def parse_close(payload: bytes) -> tuple[int | None, str]:
    """(code, reason) of a close frame's payload; (None, "") for an empty one."""
    if len(payload) < 2:
        return None, ""
    return int.from_bytes(payload[:2], "big"), payload[2:].decode("utf-8", "replace")


@dataclass(slots=True)
class End:
    """How a replayed session ends once its last recorded frame is delivered.

    ``closed``: the server closes the connection after the closing handshake (or, with no
    handshake recorded, drops it). ``failed``: the recorded transport error, ``failure``,
    fires. ``held``: the recording stopped while the session was open; the connection stays
    open, sending nothing, until the client closes it or its own timeout fires.
    ``due`` is when it happens (seconds since the upgrade request, for ``due()``)."""

    kind: Literal["closed", "failed", "held"]
    failure: Failure | None
    closed: Closed | None
    due: float

    @property
    def action(self) -> Literal["close", "reset", "hold"]:
        """What the server's side of the connection does here, by one rule for every client
        adapter and the proxy: a recorded timeout, or a session still open, answers nothing
        until the client gives up (``hold``); the server's end of stream closes; any other
        recorded failure resets."""
        failure = self.failure
        if self.kind == "held" or (failure is not None and failure.is_timeout):
            return "hold"
        if failure is None or failure.type in END_OF_STREAM_TYPES:
            return "close"
        return "reset"


END_OF_STREAM_TYPES = frozenset(("EOFError", "IncompleteReadError"))
"""Failures the clients report when the server ended the stream without a closing handshake:
replayed as that end, not as a reset."""


@dataclass(slots=True)
class Step:
    """What the server does next: ``frames`` to deliver in order, each when ``due`` says,
    then ``end`` when the recording ends after them."""

    frames: list[Frame] = field(default_factory=list)
    end: End | None = None


def closed_early(
    interaction: Interaction, after_frames: int, code: int, reason: str, injected: str
) -> Interaction:
    """A recorded session cut by an injected close (SPEC §18): the frames both ways up to the
    ``after_frames``-th message the server sent, then the server's close frame with ``code``
    and ``reason``, and the connection closed, as a server that gives up mid-session does.
    Replay lets the client answer the close however it does; a session with fewer messages is
    closed at its end."""
    frames = interaction.frames or []
    kept: list[Frame] = []
    served = 0
    for frame in frames:
        if served >= after_frames or frame.opcode == "close":
            break
        kept.append(frame)
        if frame.direction == "server" and frame.fin and frame.opcode in _MESSAGES:
            served += 1
    offset = kept[-1].offset if kept else (interaction.ttfb or 0.0)
    kept.append(Frame("server", "close", close_payload(code, reason), offset))
    return replace(
        interaction,
        frames=kept,
        closed=Closed(code, reason, "server"),
        error=None,
        duration=offset,
        injected=injected,
    )


_MESSAGES = frozenset(("text", "binary", "continuation"))
"""The server frames ``closed_early`` counts when they end a message (``fin``): messages, not
control frames or the fragments of one message."""


def session_of(tape: Tape, plan: Replay | Live) -> SessionReplay | SessionRecording:
    """The session ``begin`` decided for an upgrade request: the recorded one to replay, or
    the live one to record. The adapter serves it inside ``serving``, so a failure escaping
    the live one before the response is written down as the session's error, as for any
    exchange."""
    if isinstance(plan, Replay):
        return SessionReplay(tape, plan.interaction, plan.playback)
    return SessionRecording(tape, plan.recording)


class SessionRecording:
    """A live session being written down while it runs: frames are kept as they pass, so a
    session that ends badly (or never ends) loses nothing it carried."""

    __slots__ = ("_tape", "cut", "recording")

    def __init__(self, tape: Tape, recording: Recording) -> None:
        self._tape = tape
        self.recording = recording
        self.cut = False

    @property
    def interaction(self) -> Interaction:
        return self.recording.interaction

    @property
    def finished(self) -> bool:
        return self.recording.finished

    def opened(
        self,
        status: int,
        reason: str,
        headers: Headers,
        body: bytes = b"",
        http_version: str = "HTTP/1.1",
    ) -> None:
        """The response to the upgrade request arrived: ``101`` opens the session; any
        other status is an ordinary HTTP response (a refused upgrade) with its ``body``."""
        if self.recording.finished or self.interaction.response is not None:
            return
        self.recording.respond(status, reason, http_version, headers)
        if status == 101:
            self.interaction.frames = []
        elif body:
            self.recording.chunk(body)

    def sent(self, opcode: Opcode, payload: bytes, fin: bool = True) -> None:
        """A frame the client sent; its payload is stored redacted, as a request body is."""
        self._add(Frame("client", opcode, self._tape.client_frame(payload), 0.0, fin))

    def received(self, opcode: Opcode, payload: bytes, fin: bool = True) -> None:
        """A frame the server sent, byte for byte."""
        self._add(Frame("server", opcode, payload, 0.0, fin))

    def _add(self, frame: Frame) -> None:
        if not self.recording.frame(frame) and not self.recording.finished:
            self.cut = True  # over the tape's limits: this frame and the rest are not kept

    def closed(self, code: int | None, reason: str, by: Direction) -> None:
        """The closing handshake: the code and reason of the first close frame, and who
        sent it. The first call wins."""
        if self.interaction.closed is None and not self.recording.finished:
            self.interaction.closed = Closed(code, reason, by)

    def failed(self, failure: Failure) -> None:
        """A transport error ended the session (or stopped the upgrade)."""
        self.recording.fail(failure)

    def finish(self) -> None:
        """The connection is gone: seal the session. One that ended without a closing
        handshake, or lost frames to the limits, is marked cut."""
        interaction = self.interaction
        cut = self.cut or (interaction.frames is not None and interaction.closed is None)
        self.recording.finish(truncated=cut)


class SessionReplay:
    """A recorded session served to a client strictly: each frame the client sends must be
    the next recorded client frame (JSON text compared canonically, ``ignore_json_fields``
    left out, anything else byte for byte); the server frames recorded after it follow."""

    __slots__ = ("_broken", "_frames", "_matcher", "_next", "_tape", "interaction", "schedule")

    def __init__(self, tape: Tape, interaction: Interaction, schedule: Schedule) -> None:
        self._tape = tape
        self.interaction = interaction
        self.schedule = schedule
        self._frames = interaction.frames or []
        self._next = 0
        self._broken = False
        self._matcher = Matcher(("body",), tape.ignore_json_fields)

    @property
    def response(self) -> Response | None:
        return self.interaction.response

    @property
    def is_session(self) -> bool:
        """False when the upgrade was refused (or failed): replay it as that answer."""
        return self.interaction.frames is not None

    def handshake(self, key: str | None) -> bytes:
        """The recorded response head (and body) as HTTP/1.1 bytes, with
        ``Sec-WebSocket-Accept`` computed for this client's ``key``, which is random."""
        response = self.interaction.response
        assert response is not None
        lines = [f"HTTP/1.1 {response.status} {response.reason}".rstrip()]
        for name, value in response.headers:
            if name.lower() == "sec-websocket-accept" and key is not None:
                value = accept_key(key)
            lines.append(f"{name}: {value}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if self.is_session else head + response.body

    def opening(self) -> Step:
        """The server frames sent before the client's first frame."""
        return self._step()

    def sent(self, opcode: Opcode, payload: bytes, fin: bool = True) -> Step:
        """The client sent a frame: check it against the recording, then what follows.

        Raises UnmatchedInteractionError naming the frame and the difference when it is not
        the next recorded client frame."""
        if opcode == "ping":
            return Step([Frame("server", "pong", payload, 0.0)])
        if opcode == "pong":
            return Step()
        payload = self._tape.client_frame(payload)  # as recorded: redacted, also in a miss
        position = self._next_client()
        if position is None and self._closed_by_fault():
            # The server closed: the client's answering close ends the session; frames it
            # sent before it saw the close are dropped, as by a server that closed.
            return Step([], self._end()) if opcode == "close" else Step()
        if opcode == "close" and (self._broken or (position is None and not self._closed())):
            # After a miss the client closes on its way out; a recording that stopped with
            # the session open lets the client end it now.
            code, reason = parse_close(payload)
            return Step(
                [Frame("server", "close", payload, 0.0)],
                End("closed", None, Closed(code, reason, "client"), 0.0),
            )
        if position is None:
            raise self._miss(len(self._frames), opcode, payload, None)
        expected = self._frames[position]
        if not self._same(expected, opcode, payload, fin):
            raise self._miss(position, opcode, payload, expected)
        self._next = position + 1
        return self._step()

    def due(self, offset: float) -> float:
        """Seconds from now until a frame (or end) recorded at ``offset`` is due: zero at
        once unless the tape replays in ``realtime``."""
        if not self.schedule.paced:
            return 0.0
        return max(self.schedule.delay(offset), 0.0)

    def wait(self, offset: float, timeout: float | None = None) -> bool:
        """For an adapter that hands the client frames itself: returns when a frame recorded
        at ``offset`` is due (True), or after ``timeout``, the client's own read timeout,
        when that comes first (False: raise the client's timeout error, as live)."""
        return self.schedule.wait(offset, timeout)

    async def wait_async(self, offset: float, timeout: float | None = None) -> bool:
        """``wait`` without blocking the event loop."""
        return await self.schedule.wait_async(offset, timeout)

    def hold(self, timeout: float | None) -> bool:
        """A ``held`` end: waits until the client closes (``release``, True) or ``timeout``
        runs out (False). Never ends by itself: the recording never saw an end."""
        return self.schedule.hold(timeout)

    async def hold_async(self, timeout: float | None) -> bool:
        """``hold`` without blocking the event loop."""
        return await self.schedule.hold_async(timeout)

    def release(self) -> None:
        """The client closed the connection: a ``hold`` under way returns."""
        self.schedule.release()

    # -- inside ----------------------------------------------------------------------

    def _next_client(self) -> int | None:
        frames = self._frames
        for position in range(self._next, len(frames)):
            frame = frames[position]
            if frame.direction == "client" and frame.opcode in _MATCHED:
                return position
        return None

    def _closed(self) -> bool:
        return self.interaction.closed is not None

    def _closed_by_fault(self) -> bool:
        closed = self.interaction.closed
        return (
            self.interaction.injected is not None and closed is not None and closed.by == "server"
        )

    def _step(self) -> Step:
        """Server frames from the cursor up to the next client frame replay checks; the end
        when none is left."""
        frames = self._frames
        out: list[Frame] = []
        position = self._next
        while position < len(frames):
            frame = frames[position]
            if frame.direction == "client":
                if frame.opcode in _MATCHED:
                    break
            elif frame.opcode != "pong":  # a pong answered a ping this replay never sends
                out.append(frame)
            position += 1
        self._next = position
        # A session an injected close ends waits for the client's answering close, as a live
        # server does: closing first would reset the client, losing what it had not read.
        ended = position >= len(frames) and not self._closed_by_fault()
        return Step(out, self._end() if ended else None)

    def _end(self) -> End:
        interaction = self.interaction
        last = self._frames[-1].offset if self._frames else (interaction.ttfb or 0.0)
        due = max(interaction.duration or last, last)
        if interaction.error is not None:
            return End("failed", interaction.error, None, due)
        response = interaction.response
        if interaction.closed is None and response is not None and response.truncated:
            return End("held", None, None, due)
        return End("closed", None, interaction.closed, due)

    def _same(self, expected: Frame, opcode: Opcode, payload: bytes, fin: bool) -> bool:
        if expected.opcode != opcode or expected.fin != fin:
            return False
        if expected.payload == payload:
            return True
        if opcode != "text":
            return False
        matcher = self._matcher
        return matcher.body_key(expected.payload, remember=True) == matcher.body_key(payload)

    def _miss(
        self, position: int, opcode: Opcode, payload: bytes, expected: Frame | None
    ) -> UnmatchedInteractionError:
        self._broken = True
        request = self.interaction.request
        if expected is None:
            ending = self.interaction.closed
            how = (
                f"after the closing handshake ({ending.by} sent close {ending.code})"
                if ending is not None
                else "after the recorded session ended"
            )
            differences = [f"frame {position}: not recorded, got {opcode} {_show(payload)} {how}"]
        else:
            differences = self._differences(position, expected, opcode, payload)
        mode = str(self._tape.mode)
        lines = [
            f"WebSocket frame {position} sent on {request.url} does not match the recording",
            *differences,
            f"cassette: {self._tape.path} (mode {mode!r})",
            RERECORD_HINT,
        ]
        error = UnmatchedInteractionError(
            "\n".join(lines),
            request=request,
            candidates=[],
            cassette_path=str(self._tape.path),
            mode=mode,
        )
        self._tape.missed(error)
        return error

    def _differences(
        self, position: int, expected: Frame, opcode: Opcode, payload: bytes
    ) -> list[str]:
        prefix = f"frame {position}"
        if expected.opcode != opcode:
            return [f"{prefix} opcode: expected {expected.opcode!r}, got {opcode!r}"]
        if expected.payload == payload:
            return [f"{prefix} fin: expected {expected.fin}, got {not expected.fin}"]
        if opcode == "text" and _is_json(expected.payload) and _is_json(payload):
            found = self._matcher.differences(
                Request("GET", "", body=expected.payload), Request("GET", "", body=payload)
            )
            return [f"{prefix} {line}" for line in found]
        return [f"{prefix} payload: expected {_show(expected.payload)}, got {_show(payload)}"]


def _is_json(payload: bytes) -> bool:
    try:
        json.loads(payload)
    except (ValueError, RecursionError):
        return False
    return True


def _show(payload: bytes, limit: int = 60) -> str:
    text = repr(payload[:limit]) + ("..." if len(payload) > limit else "")
    return f"{len(payload)} bytes {text}"
