"""What adapters see of an active cassette or run (the ``Tape``), and the ``Recording`` an
adapter feeds while a live exchange runs.

A cassette and a production run are different things to their users (one replays, the other
never does), but adapters must not know which one serves them: both answer ``begin`` with an
interaction to replay or a recording to feed, and take finished recordings back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from .errors import UnmatchedInteractionError
from .matching.replay_queue import Precedents
from .models import Failure, FailureKind, Frame, Headers, Interaction, Request, Response
from .options import Mode


class Tape(Protocol):
    """The members adapters, recordings and the network guard use."""

    @property
    def path(self) -> Path: ...

    @property
    def mode(self) -> Mode: ...

    @property
    def is_active(self) -> bool: ...

    @property
    def is_recording(self) -> bool:
        """Whether a request may be recorded from the network (a miss is otherwise an error,
        or a live request to an allowed host that is not kept)."""
        ...

    @property
    def realtime(self) -> bool: ...

    @property
    def fast_retries(self) -> bool: ...

    @property
    def fills_keys(self) -> bool:
        """Whether, while it replays, code that reads an unset provider key variable gets a
        placeholder (``sdk_keys``)."""
        ...

    @property
    def block_network(self) -> bool: ...

    @property
    def allowed_hosts(self) -> tuple[str, ...]: ...

    @property
    def ignore_json_fields(self) -> tuple[str, ...]:
        """JSON paths left out when requests and client WebSocket frames are compared."""
        ...

    @property
    def interactions(self) -> Sequence[Interaction]: ...

    def missed(self, error: UnmatchedInteractionError) -> None:
        """Keeps a miss found outside ``begin`` (a WebSocket frame), which the code under
        test may swallow."""
        ...

    def begin(self, request: Request, boundary: str = "http") -> Interaction | Recording:
        """Replay or record ``request``: the interaction to replay, or a Recording to feed
        while the real exchange runs. Raises UnmatchedInteractionError when replay is the
        only option and nothing matches."""
        ...

    def candidates(self, request: Request, boundary: str = "http") -> list[Interaction] | None:
        """For ``request`` whose body is still being sent (a streamed gRPC request, matched
        message by message): the recorded interactions ``begin`` may serve it from once the
        body is whole, those matching it in every field but the body, in the order ``begin``
        takes them. None when ``begin`` may answer it otherwise (record it, inject a fault,
        run it live): the body must then be whole first."""
        ...

    def precedents(self, interaction: Interaction) -> Precedents | None:
        """The requests recorded as starting while the response of ``interaction`` (just
        served by ``begin``) was under way; None when there were none."""
        ...

    def response_headers(self, headers: Headers) -> Headers:
        """Response headers as they may be kept (secrets redacted)."""
        ...

    def client_frame(self, payload: bytes) -> bytes:
        """A client WebSocket frame's payload as it may be kept and matched (secrets
        redacted), as ``begin`` treats a request body."""
        ...

    def responded(self, recording: Recording) -> None:
        """The recording's response head (or its failure) arrived: it joins the tape now, so
        recorded order is the order responses started."""
        ...

    def sealed(self, recording: Recording) -> None:
        """The recording is sealed: its body is whole (or cut, and marked so)."""
        ...


class Recording:
    """One live exchange being written down while the caller reads it.

    The body fills in chunk by chunk and is sealed by ``finish``; ``fail`` records a transport
    error instead of a response, or one that cut the body short.
    """

    __slots__ = ("_chunks", "_parts", "_t0", "_tape", "derived", "finished", "interaction")

    def __init__(
        self, tape: Tape, request: Request, boundary: str = "http", derived: bool = False
    ) -> None:
        self._tape: Tape | None = tape
        self._parts: list[bytes] = []
        # The response's chunk list while the body streams; a tuple once sealed.
        self._chunks: list[tuple[int, float]] = []
        self._t0 = time.perf_counter()
        self.finished = False
        self.derived = derived
        self.interaction = Interaction(request, None, None, boundary, time.time())

    def respond(self, status: int, reason: str, http_version: str, headers: Headers) -> None:
        tape = self._tape
        assert tape is not None
        self.interaction.ttfb = time.perf_counter() - self._t0
        self.interaction.response = Response(
            status, reason, http_version, tape.response_headers(headers), chunks=self._chunks
        )
        tape.responded(self)

    def chunk(self, data: bytes) -> None:
        if data and not self.finished:
            self._parts.append(data)
            self._chunks.append((len(data), time.perf_counter() - self._t0))

    def sent(self, data: bytes) -> None:
        """A piece of the request body the client sent while the exchange ran (a streamed
        gRPC request's message, already redacted), kept with its offset."""
        if data:
            request = self.interaction.request
            request.body += data
            request.chunks = [*request.chunks, (len(data), time.perf_counter() - self._t0)]

    def trail(self, trailers: Headers) -> None:
        """The trailers that followed the body (gRPC's status and trailing metadata), kept
        with secrets redacted as headers are."""
        response = self.interaction.response
        tape = self._tape
        if response is not None and tape is not None and not self.finished:
            response.trailers = list(tape.response_headers(trailers))

    def frame(self, frame: Frame) -> bool:
        """Appends a WebSocket frame as it passes (its offset set here); False when it was
        not kept, the session being sealed or over its tape's limits."""
        frames = self.interaction.frames
        if self.finished or frames is None:
            return False
        frame.offset = time.perf_counter() - self._t0
        frames.append(frame)
        return True

    def finish(self, truncated: bool = False) -> None:
        if self.finished:
            return
        self.finished = True
        self.interaction.duration = time.perf_counter() - self._t0
        response = self.interaction.response
        if response is not None:
            response.body = b"".join(self._parts)
            # Immutable from here on: the garbage collector stops walking it after one look.
            response.chunks = tuple(self._chunks)
            response.truncated = truncated and not _framed_whole(self.interaction)
            self._parts = []
        tape = self._tape
        # A client may keep a read response in a reference cycle until the garbage collector
        # runs (httpx does); letting go of the tape here keeps it and its recordings from
        # living on through such cycles, making every collection until then walk them.
        self._tape = None
        if tape is not None:
            tape.sealed(self)

    def fail(self, failure: Failure) -> None:
        """A transport error: instead of a response, or cutting a body short."""
        if self.finished:
            return
        self.interaction.error = failure
        if self.interaction.response is None:
            self.interaction.ttfb = None
            assert self._tape is not None
            self._tape.responded(self)
        self.finish(truncated=self.interaction.response is not None)

    def fail_as(self, kind: FailureKind, type_name: str, message: str) -> None:
        self.fail(Failure(kind, type_name, message))


def _framed_whole(interaction: Interaction) -> bool:
    """Whether the response's own framing says its body is all there, though the client
    closed it without reading the end: every byte a Content-Length announced, or a response
    that has no body. Such a body is not left open on replay."""
    response = interaction.response
    assert response is not None
    if interaction.frames is not None:
        return False  # a WebSocket session: only its closing handshake ends it
    status = response.status
    if interaction.request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return True
    if response.header("transfer-encoding") is not None:
        return False
    length = response.header("content-length")
    return length is not None and length.strip().isdigit() and int(length) == len(response.body)
