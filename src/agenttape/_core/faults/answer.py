"""The one way a fault answers a request, for every kind: an HTTP failure or changed
response (``inject``), or a WebSocket or gRPC session's (``sessions``). Loaded only by a
cassette given faults."""

from __future__ import annotations

from dataclasses import dataclass

from ..models import Interaction, Request
from . import HTTP_KINDS, LIVE_KINDS, RESPONSE_KINDS, FaultPlan, inject, sessions


@dataclass(frozen=True, slots=True)
class Answer:
    """What a fault answered a request with: ``interaction``, marked ``injected``.
    ``serves_recorded``: it is the recorded interaction changed (a cut stream, a malformed or
    slow body, a closed session), which it uses up; any other answers in its place and leaves
    it for the client's retry."""

    interaction: Interaction
    serves_recorded: bool


def answer(
    plan: FaultPlan,
    request: Request,
    recorded: Interaction | None,
    index: int | None,
    realtime: bool,
) -> Answer | None:
    """What a fault of ``plan`` answers ``request`` with: in place of ``recorded``, the
    interaction (number ``index`` of the cassette) that would replay it, or, with
    ``recorded`` None, in place of the network (``index``: the number the answer gets) or of
    a request the cassette never held. None when no fault fires (``FaultPlan.pick``)."""
    changeable = recorded is not None and recorded.response is not None and recorded.frames is None
    kinds = sessions.kinds_for(request, recorded) or (HTTP_KINDS if changeable else LIVE_KINDS)
    chosen = plan.pick(request, index, kinds=kinds)
    if chosen is None:
        return None
    if chosen.kind in sessions.KINDS:
        made = sessions.injected(chosen, request, recorded, realtime)
    else:
        made = inject(chosen, request, recorded, realtime)
    return Answer(made, chosen.kind in RESPONSE_KINDS or chosen.kind == "close")
