"""The faults that are not HTTP answers (SPEC §18): a WebSocket session the server closes with
a code after N messages (``close``), and a gRPC call that ends with a status
(``grpc_status``). Each becomes an interaction the adapters replay as they replay a recorded
one, so the client library raises what it raises live: ``websockets``' ``ConnectionClosed``
with that code, grpcio's ``RpcError`` with that ``code()``."""

from __future__ import annotations

import time
from dataclasses import replace

from ..models import Interaction, Request
from ..wire import grpc as grpc_wire
from ..wire.websocket import closed_early
from . import LIVE_KINDS, Fault, FaultKind

KINDS: frozenset[FaultKind] = frozenset(("close", "grpc_status"))
"""The kinds built here; the others are HTTP answers."""

CLOSE_CODE = 1011
"""``close`` without ``code=``: 1011, the server met an unexpected condition."""


def close_code(value: object) -> int:
    """A WebSocket close code a server may send (1000 to 4999, not the reserved 1005, 1006,
    1015). Raises ValueError for anything else."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 1000 <= value <= 4999
        and value not in (1004, 1005, 1006, 1015)
    ):
        return value
    raise ValueError(
        f"code={value!r} is not a close code a server sends: 1000 to 4999 (1011: an "
        "unexpected condition, 1001: going away, 1013: try again later)"
    )


def check(item: Fault) -> None:
    """Raises ValueError for a ``close`` or ``grpc_status`` fault whose code cannot be sent,
    so the mistake shows where the fault is written, not at the request."""
    if item.kind == "close":
        close_code(item.option("code", CLOSE_CODE))
    elif item.kind == "grpc_status":
        grpc_wire.status_number(item.option("code"))


def kinds_for(request: Request, recorded: Interaction | None) -> frozenset[FaultKind] | None:
    """The kinds that apply to a gRPC call (a status only: an HTTP answer is no gRPC
    failure), or to a recorded WebSocket session (a close besides what answers the upgrade);
    None for any other request, which takes the HTTP kinds."""
    if grpc_wire.is_grpc(request):
        return GRPC_KINDS
    if recorded is not None and recorded.frames is not None:
        return SESSION_KINDS
    return None


GRPC_KINDS: frozenset[FaultKind] = frozenset(("grpc_status",))
SESSION_KINDS: frozenset[FaultKind] = LIVE_KINDS | {"close"}


def injected(
    item: Fault, request: Request, recorded: Interaction | None, realtime: bool
) -> Interaction:
    """The interaction ``item`` (a kind of ``KINDS``, chosen by ``kinds_for``) answers
    ``request`` with, marked injected. Its timings are the recorded ones with ``realtime``,
    else none."""
    description = item.describe()
    if item.kind == "close":
        assert recorded is not None and recorded.frames is not None
        code = close_code(item.option("code", CLOSE_CODE))
        after = int(item.option("after_frames", 0))
        made = closed_early(recorded, after, code, "", description)
        if not realtime:
            made.frames = [replace(frame, offset=0.0) for frame in made.frames or []]
            made.ttfb, made.duration = 0.0, 0.0
        return made
    number = grpc_wire.status_number(item.option("code"))
    details = f"{grpc_wire.status_name(number)} (injected by agenttape)"
    return Interaction(
        request,
        grpc_wire.status_response(number, details),
        boundary=recorded.boundary if recorded is not None else "http",
        started_at=recorded.started_at if recorded is not None else time.time(),
        ttfb=0.0,
        duration=0.0,
        injected=description,
    )
