"""``agenttape faults CASSETTE``: the kinds that apply to each interaction, and proposals that
land on the interaction they name."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from llm_standin import StandIn

import agenttape
from agenttape._core.faults import HTTP_KINDS, FaultPlan, fault_from_json
from agenttape._core.faults.sessions import kinds_for
from agenttape._core.faults.spec import parse_fault
from agenttape._core.files import read
from tests.cli_support import assert_one_line_error, cli
from tests.servers import Server, json_reply

SHIPPED = Path(__file__).resolve().parent.parent / "cassettes"


def faults_json(path: Path) -> dict[str, Any]:
    result = cli("faults", path, "--json")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def fired_at(path: Path, proposal: dict[str, Any]) -> list[int]:
    """The interactions the proposed fault fires on when the cassette's requests are made
    again in recorded order, each offered the kinds a cassette offers it."""
    _, interactions = read(path)
    plan = FaultPlan([fault_from_json(proposal["fault"])])
    return [
        i
        for i, interaction in enumerate(interactions)
        if plan.pick(
            interaction.request, i, kinds=kinds_for(interaction.request, interaction) or HTTP_KINDS
        )
        is not None
    ]


def test_each_interaction_lists_the_kinds_its_kind_of_answer_takes(session: Path) -> None:
    rows = faults_json(session)["interactions"]
    chat, stream, tool, down = rows
    assert chat["answer"] == "json"
    assert {"rate_limit", "overloaded", "malformed", "timeout"} <= set(chat["kinds"])
    assert "cut_stream" not in chat["kinds"]
    assert stream["answer"].startswith("stream, ")
    assert {"cut_stream", "overloaded"} <= set(stream["kinds"])
    assert "overloaded" not in tool["kinds"]  # not an LLM API
    assert {"rate_limit", "refused", "malformed"} <= set(tool["kinds"])
    assert down["answer"] == "failed (connect_error)"


def test_each_proposal_fires_on_the_interaction_it_names_and_no_other(session: Path) -> None:
    proposals = faults_json(session)["proposals"]
    titles = [p["title"] for p in proposals]
    assert titles[:2] == ["first call rate-limited", "longest stream cut mid-answer"]
    assert [p["interaction"] for p in proposals[:2]] == [0, 1]
    tools = [p for p in proposals if p["title"].startswith("tool host ")]
    assert [p["interaction"] for p in tools] == [2, 3]  # two tool servers, one already down
    for proposal in proposals:
        assert fired_at(session, proposal)[:1] == [proposal["interaction"]], proposal
        flag, text = shlex.split(proposal["cli"])
        assert flag == "--fault"
        assert parse_fault(text) == fault_from_json(proposal["fault"])
    rate_limit, cut = proposals[0]["fault"], proposals[1]["fault"]
    assert fired_at(session, proposals[0]) == [0]  # the first call only, not every chat call
    assert rate_limit["retry_after"] == 30
    _, interactions = read(session)
    assert cut["after_chunks"] == len(interactions[1].response.chunks) // 2 > 0


def test_no_tool_host_down_is_proposed_for_a_host_the_llm_calls_share(
    tmp_path: Path, standin: StandIn, serve: Callable[..., Server]
) -> None:
    """A local stand-in answering the chat calls and a tool path on one host: refusing that
    host would take the LLM down too, so only the tool server of its own is proposed."""
    import openai

    tool = serve(lambda seen: json_reply({"rows": 1}))
    path = tmp_path / "shared.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        client = openai.OpenAI(base_url=f"{standin.url}/v1", api_key="sk-test-0123456789abcdef")
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "look it up"}]
        )
        httpx.post(f"{standin.url}/tools/search", json={"q": "order"})
        httpx.get(f"{tool.url}/rows")
    shared = standin.url.removeprefix("http://")
    document = faults_json(path)
    tools = [p for p in document["proposals"] if p["title"].startswith("tool host ")]
    assert [p["title"] for p in tools] == [f"tool host {tool.url.removeprefix('http://')} down"]
    assert [p["interaction"] for p in tools] == [2]
    assert list(document["shared_hosts"]) == [shared]
    text = cli("faults", path).stdout
    assert f"no tool host down proposed for {shared}: it serves the LLM calls too" in text
    assert f"refused:on={shared}" not in text.replace("'", "")


def test_the_text_table_holds_ready_to_paste_lines() -> None:
    result = cli("faults", SHIPPED / "agent.msgpack")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{SHIPPED / 'agent.msgpack'}: 2 interactions"
    assert lines[2].split()[:4] == ["0", "POST", "api.openai.com/v1/chat/completions", "json"]
    assert (
        "    --fault 'POST api.openai.com/v1/chat/completions#2=cut_stream:after_chunks=7'" in lines
    )
    assert (
        "    agenttape.fault('rate_limit', on='POST api.openai.com/v1/chat/completions', "
        "nth=1, retry_after=30)" in lines
    )


def test_a_websocket_session_is_proposed_a_close_mid_session() -> None:
    path = SHIPPED / "realtime.msgpack"
    document = faults_json(path)
    assert document["interactions"][0]["kinds"] == ["close", "refused", "reset", "timeout"]
    (proposal,) = document["proposals"]
    assert proposal["fault"]["kind"] == "close"
    assert proposal["fault"]["code"] == 1011
    _, interactions = read(path)
    frames = interactions[0].frames or []
    served = sum(1 for frame in frames if frame.direction == "server")
    assert proposal["fault"]["after_frames"] == served // 2
    assert fired_at(path, proposal) == [0]


def test_a_cassette_that_cannot_be_read_is_one_line_exit_2(tmp_path: Path) -> None:
    assert_one_line_error(cli("faults", tmp_path / "missing.msgpack"), "missing.msgpack")
    broken = tmp_path / "broken.msgpack"
    broken.write_bytes(b"not a cassette")
    assert_one_line_error(cli("faults", broken), "broken.msgpack")
