"""``block_network`` for a test with no cassette: every request through an adapter, and
every connection past them, is refused unless its host is allowed."""

from __future__ import annotations

from contextvars import Token
from pathlib import Path

from .._adapters.network_guard import allowed
from .._core import runtime
from .._core.errors import NetworkBlockedError, UnmatchedInteractionError
from .._core.matching.replay_queue import Precedents
from .._core.models import Headers, Interaction, Request
from .._core.options import Mode
from .._core.tape import Recording, Tape
from .._core.urls import parse_url


class NetworkBlock(runtime.Block):
    """A ``Tape`` that replays nothing and records nothing: an allowed host is reached
    live, any other raises ``NetworkBlockedError``. ``path`` is the test file, for the
    error's words."""

    mode: Mode = "none"
    is_recording = False
    ignore_json_fields: tuple[str, ...] = ()
    realtime = False
    fast_retries = False
    fills_keys = False
    block_network = True

    def __init__(self, path: Path, allowed_hosts: tuple[str, ...]) -> None:
        self.path = path
        self.allowed_hosts = allowed_hosts
        self.is_active = False
        self._token: Token[Tape | None] | None = None

    def _open(self) -> None:
        self.is_active = True
        self._token = runtime.activate(self)

    def _close(self, exc: BaseException | None) -> None:
        self._deactivate()

    @property
    def interactions(self) -> list[Interaction]:
        return []

    def begin(self, request: Request, boundary: str = "http") -> Interaction | Recording:
        url = parse_url(request.url)
        if not allowed(url.host, self.allowed_hosts):
            raise NetworkBlockedError(
                f"Network is disabled for host {url.host!r}: {self.path.name} blocks the "
                "network (block_network); allow it with allowed_hosts",
                host=url.host,
                port=url.port,
                cassette_path=str(self.path),
            )
        return Recording(self, request, boundary)

    def candidates(self, request: Request, boundary: str = "http") -> list[Interaction] | None:
        """Nothing is replayed: every request runs live."""
        return None

    def precedents(self, interaction: Interaction) -> Precedents | None:
        return None

    def response_headers(self, headers: Headers) -> Headers:
        return headers

    def client_frame(self, payload: bytes) -> bytes:
        return payload

    def missed(self, error: UnmatchedInteractionError) -> None:
        """Nothing is replayed, so nothing misses."""

    def responded(self, recording: Recording) -> None:
        """Nothing is kept: the request ran live."""

    def sealed(self, recording: Recording) -> None:
        """Nothing is kept: the request ran live."""
