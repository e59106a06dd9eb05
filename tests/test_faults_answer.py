"""The one way a fault answers a request: in place of the recorded interaction, or of the
network."""

from __future__ import annotations

import agenttape
from agenttape._core.faults import FaultPlan
from agenttape._core.faults.answer import answer
from agenttape._core.models import Interaction, Request, Response

CHAT = "https://api.openai.com/v1/chat/completions"
STREAM = b"data: {}\n\ndata: {}\n\ndata: [DONE]\n\n"


def recorded_stream() -> Interaction:
    return Interaction(
        Request("POST", CHAT, [], b"{}"),
        Response(200, headers=[("content-type", "text/event-stream")], body=STREAM),
    )


def test_a_fault_in_the_recorded_ones_place_leaves_it_for_the_retry() -> None:
    plan = FaultPlan([agenttape.fault("rate_limit")])
    answered = answer(plan, Request("POST", CHAT, [], b"{}"), recorded_stream(), 0, False)
    assert answered is not None
    assert not answered.serves_recorded
    assert answered.interaction.response is not None
    assert answered.interaction.response.status == 429
    assert answered.interaction.injected is not None


def test_a_fault_that_changes_the_recorded_one_serves_it() -> None:
    plan = FaultPlan([agenttape.fault("cut_stream")])
    answered = answer(plan, Request("POST", CHAT, [], b"{}"), recorded_stream(), 0, False)
    assert answered is not None
    assert answered.serves_recorded
    assert answered.interaction.injected is not None


def test_without_a_recorded_one_a_fault_that_needs_it_never_fires() -> None:
    plan = FaultPlan([agenttape.fault("cut_stream")])
    assert answer(plan, Request("POST", CHAT, [], b"{}"), None, 3, False) is None
    assert plan.unfired() == list(plan.faults)
