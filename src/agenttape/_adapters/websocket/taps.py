"""What a WebSocket adapter reports each frame to, whichever library it taps: a
``FrameRecorder`` while recording, a ``FrameChecker`` while replaying. Both take frames as
(opcode, payload, fin), the payload unmasked and inflated."""

from __future__ import annotations

from collections.abc import Callable

from ..._core.errors import UnmatchedInteractionError
from ..._core.models import Direction, Failure, Opcode
from ..._core.wire.websocket import SessionRecording, SessionReplay, Step, parse_close


class FrameRecorder:
    """Writes down the frames of a live session. It ends with the closing handshake (a
    close frame each way), or when the connection is lost: with an error before any close
    frame as a failure, otherwise as it stands (cut when no handshake happened)."""

    def __init__(self, session: SessionRecording) -> None:
        self.session = session
        self._closes: set[Direction] = set()

    def sent(self, opcode: Opcode, payload: bytes, fin: bool = True) -> None:
        self.session.sent(opcode, payload, fin)
        if opcode == "close":
            self._closing(payload, "client")

    def received(self, opcode: Opcode, payload: bytes, fin: bool = True) -> None:
        self.session.received(opcode, payload, fin)
        if opcode == "close":
            self._closing(payload, "server")

    def _closing(self, payload: bytes, by: Direction) -> None:
        self.session.closed(*parse_close(payload), by)
        self._closes.add(by)
        if len(self._closes) == 2:
            self.session.finish()

    def ended(self, failure: Failure | None) -> None:
        """The connection is gone: ``failure`` says how when the server or the network
        ended it (``dropped``), None when the client let go. Before any close frame a
        failure is the session's ending; otherwise the session is sealed as it stands."""
        session = self.session
        if session.finished:
            return
        if failure is not None and session.interaction.closed is None:
            session.failed(failure)
        else:
            session.finish()


def dropped(exc: BaseException | None = None) -> Failure:
    """How a connection the client did not close ended: an error, or (None) the server's
    end of stream, which replays as one."""
    if exc is None:
        return Failure("read_error", "EOFError", "connection closed abnormally")
    return Failure("read_error", type(exc).__name__, str(exc) or "connection closed abnormally")


class FrameChecker:
    """Checks each frame the client sends against the recording (raising
    ``UnmatchedInteractionError`` on a difference) and hands what the server sent next to
    ``deliver``; frames received are the recording's own."""

    def __init__(self, replay: SessionReplay, deliver: Callable[[Step], None]) -> None:
        self._replay = replay
        self._deliver = deliver

    def sent(self, opcode: Opcode, payload: bytes, fin: bool = True) -> None:
        step = self._replay.sent(opcode, payload, fin)
        if step.frames or step.end is not None:
            self._deliver(step)

    def received(self, opcode: Opcode, payload: bytes, fin: bool = True) -> None:
        pass

    def ended(self, failure: Failure | None) -> None:
        pass


def failure_of(exc: BaseException) -> Failure | None:
    """Opening a WebSocket connection failed: the libraries raise what the socket raised."""
    if isinstance(exc, TimeoutError):
        return Failure("connect_timeout", type(exc).__name__, str(exc))
    if isinstance(exc, OSError):
        return Failure("connect_error", type(exc).__name__, str(exc))
    return None


def raise_if_never_opened(session: SessionReplay) -> None:
    """Raises what the socket raised when the connection was recorded failing to open;
    returns for a session whose upgrade was answered."""
    failure = session.interaction.error
    if session.response is None and failure is not None:
        raise connect_exception(failure)


def connect_exception(failure: Failure) -> BaseException:
    """What the socket raised when the connection was recorded failing to open."""
    if failure.kind == "connect_timeout":
        return TimeoutError(failure.message)
    if failure.type == "ConnectionRefusedError":
        return ConnectionRefusedError(failure.message)
    return OSError(failure.message)


class FrameTap:
    """What a tapped connection reports to: the shared ``FrameRecorder`` while recording
    (``recording`` then takes the upgrade's answer and the connection's end), the shared
    ``FrameChecker`` on replay."""

    __slots__ = ("frames", "recording")

    def __init__(
        self, frames: FrameRecorder | FrameChecker, recording: SessionRecording | None = None
    ) -> None:
        self.frames = frames
        self.recording = recording

    def check_sent(
        self, opcode: Opcode, payload: bytes, fin: bool, miss: type[UnmatchedInteractionError]
    ) -> None:
        """Reports a client frame; a replayed one that does not match raises as ``miss`` (a
        class that is also the library's own protocol error), to the caller as is."""
        try:
            self.frames.sent(opcode, payload, fin)
        except UnmatchedInteractionError as error:
            raise miss(
                str(error),
                request=error.request,
                candidates=error.candidates,
                cassette_path=error.cassette_path,
                mode=error.mode,
            ) from None
