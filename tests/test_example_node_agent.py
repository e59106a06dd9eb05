"""The Node agent example (the official openai npm SDK, one tool call, a streamed answer):
replayed offline from its shipped cassette by ``agenttape run``, recorded afresh from the
local stand-in, and one cassette format with Python both ways."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
from llm_standin import StandIn

import agenttape
from tests.cli_support import cli, run_captured
from tests.proxy_support import needs_node, node_env

ROOT = Path(__file__).resolve().parent.parent
AGENT = ROOT / "examples" / "node_agent" / "agent.mjs"
SHIPPED = ROOT / "cassettes" / "agent.msgpack"
EXPECTED = (
    'tool lookup_order(A-1042) -> {"status":"shipped","carrier":"DHL","eta":"2026-11-27"}\n'
    "answer: Here is what I found: status shipped, carrier DHL, eta 2026-11-27.\n"
    "(11 streamed pieces)\n"
)

# The same agent in Python, sending the same requests: JSON bodies match canonically.
ORDERS = {
    "A-1042": {"status": "shipped", "carrier": "DHL", "eta": "2026-11-27"},
    "A-1043": {"status": "processing", "carrier": None, "eta": None},
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "The status of a customer order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "enum": list(ORDERS)}},
                "required": ["order_id"],
            },
        },
    }
]


def python_agent(client: openai.OpenAI) -> str:
    messages: list[Any] = [
        {"role": "system", "content": "You answer questions about orders. Use the tools."},
        {"role": "user", "content": "Where is my order A-1042?"},
    ]
    options: dict[str, Any] = {"model": "gpt-4o-mini", "temperature": 0, "seed": 7}
    first = client.chat.completions.create(messages=messages, tools=TOOLS, **options)
    choice = first.choices[0].message
    messages.append(choice.to_dict())
    for call in choice.tool_calls or []:
        order = json.loads(call.function.arguments)["order_id"]  # type: ignore[union-attr]
        result = json.dumps(ORDERS[order], separators=(",", ":"))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    stream = client.chat.completions.create(messages=messages, stream=True, **options)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def offline_env(modules: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    environment.pop("OPENAI_BASE_URL", None)
    return {**environment, **node_env(modules)}


def run_clean(
    *args: str | Path, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return run_captured(
        [sys.executable, "-m", "agenttape", *map(str, args)], env=env, cwd=cwd, timeout=120
    )


@needs_node
def test_node_agent_replays_offline_from_its_shipped_cassette(node_modules: Path) -> None:
    before = SHIPPED.read_bytes()
    result = run_clean(
        "run",
        "--",
        "node",
        "examples/node_agent/agent.mjs",
        env=offline_env(node_modules),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED
    assert SHIPPED.read_bytes() == before


@needs_node
def test_node_agent_records_from_the_standin_then_replays(
    node_modules: Path, tmp_path: Path
) -> None:
    cassette = tmp_path / "agent.msgpack"
    environment = offline_env(node_modules)
    record = ROOT / "examples" / "node_agent" / "record.py"
    recorded = run_captured(
        [sys.executable, str(record), "--cassette", str(cassette)], env=environment, timeout=120
    )
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == EXPECTED
    assert "recorded 2 interactions through the proxy" in recorded.stderr
    tape = agenttape.load(cassette)
    assert [i.request.url for i in tape.interactions] == [
        "https://api.openai.com/v1/chat/completions"
    ] * 2
    assert tape.interactions[0].request.header("authorization") == "<redacted>"
    streamed = tape.interactions[1].response
    assert streamed is not None and len(streamed.chunks) > 10  # one piece per event, as sent
    replayed = run_clean(
        "run", "--cassette", cassette, "--", "node", AGENT, env=environment, cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout


def test_a_node_recorded_cassette_replays_in_python(tmp_path: Path) -> None:
    """The shipped cassette, recorded from Node through the proxy, replayed in-process to the
    Python openai SDK at its default base URL."""
    cassette = tmp_path / "agent.msgpack"
    shutil.copy(SHIPPED, cassette)
    with agenttape.use_cassette(cassette) as tape:
        answer = python_agent(openai.OpenAI())
        assert tape.all_played
    assert answer == "Here is what I found: status shipped, carrier DHL, eta 2026-11-27."


@needs_node
def test_a_python_recorded_cassette_replays_to_node(node_modules: Path, tmp_path: Path) -> None:
    cassette = tmp_path / "python.msgpack"
    with StandIn(chunk_delay=0.01) as standin:
        base = f"{standin.url}/v1"
        with agenttape.use_cassette(cassette, mode="all"):
            answer = python_agent(openai.OpenAI(base_url=base, api_key="sk-standin-placeholder"))
    environment = {**offline_env(node_modules), "OPENAI_BASE_URL": base}
    result = run_clean(
        "run", "--cassette", cassette, "--", "node", AGENT, env=environment, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED
    assert answer in result.stdout


def test_the_node_example_needs_no_option_to_replay() -> None:
    """``agenttape run -- node examples/node_agent/agent.mjs`` finds the shipped cassette."""
    from agenttape._tools.run_command import default_cassette

    assert default_cassette(["node", "examples/node_agent/agent.mjs"]) == Path(
        "cassettes/agent.msgpack"
    )
    assert cli("show", SHIPPED).returncode == 0
