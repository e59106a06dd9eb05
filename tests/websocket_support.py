"""The conversation every WebSocket test has with ``tests.servers.WebSocketServer``, and the
frames a cassette holds for it, whichever client library or the proxy carried it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import agenttape
from tests.servers import App, Server, json_reply

UPDATE = {"type": "session.update", "event_id": "evt_1", "session": {"voice": "alloy"}}
AUDIO = bytes(range(256)) * 300  # 76,800 bytes: a 64-bit length on the wire
ACK = {"type": "ack", "of": "session.update", "session": {"voice": "alloy"}}
REFUSAL = {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}


def conversation() -> list[tuple[str, str, bytes]]:
    """The frames both ways up to the closing handshake, which each client does its way."""
    return [
        ("server", "text", b'{"type": "session.created"}'),
        ("client", "text", json.dumps(UPDATE).encode()),
        ("server", "text", json.dumps(ACK).encode()),
        ("server", "text", b'{"type": "done"}'),
        ("client", "binary", AUDIO),
        ("server", "binary", AUDIO[::-1]),
    ]


def frames_of(path: Path) -> list[tuple[str, str, bytes]]:
    """The frames of the cassette's one session: (direction, opcode, payload)."""
    [interaction] = agenttape.load(path).interactions
    assert interaction.frames is not None
    return [(f.direction, f.opcode, f.payload) for f in interaction.frames]


def refusing_server(serve: Callable[[App], Server]) -> Server:
    """A server that refuses every WebSocket upgrade: 401 with a JSON error, as a provider
    answers a wrong key."""
    return serve(lambda seen: json_reply(REFUSAL, status=401))
