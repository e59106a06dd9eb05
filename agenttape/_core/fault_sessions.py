"""The faults that are not HTTP answers (SPEC §18): a WebSocket session the server closes with
a code after N messages (``close``), and a gRPC call that ends with a status
(``grpc_status``). Each becomes an interaction the adapters replay as they replay a recorded
one, so the client library raises what it raises live: ``websockets``' ``ConnectionClosed``
with that code, grpcio's ``RpcError`` with that ``code()``."""

from __future__ import annotations

from . import grpc_wire
from .faults import Fault
from .models import Interaction, Request
from .websocket import closed_early

KINDS = ("close", "grpc_status")
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


def injected(item: Fault, request: Request, recorded: Interaction | None) -> Interaction | None:
    """The interaction ``item`` answers ``request`` with, marked injected; None when it does
    not apply: a ``close`` on a request that did not open a recorded session (a live one is
    not cut), or a kind that is an HTTP answer."""
    description = item.describe()
    if item.kind == "grpc_status":
        number = grpc_wire.status_number(item.option("code"))
        details = f"{grpc_wire.status_name(number)} (injected by agenttape)"
        return Interaction(
            request,
            grpc_wire.status_response(number, details),
            boundary=recorded.boundary if recorded is not None else "http",
            started_at=recorded.started_at if recorded is not None else 0.0,
            ttfb=0.0,
            duration=0.0,
            injected=description,
        )
    if item.kind == "close" and recorded is not None and recorded.frames is not None:
        code = close_code(item.option("code", CLOSE_CODE))
        return closed_early(recorded, int(item.option("after_frames", 0)), code, "", description)
    return None
