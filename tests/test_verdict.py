"""Re-recording with a verdict: the old cassette kept beside the new one, ``agenttape diff
--verdict`` judging each interaction, and a re-recording made while the service was down
never replacing a good cassette."""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from llm_standin import StandIn

import agenttape
from agenttape._core.errors import AgentTapeWarning
from agenttape._core.verdict import judge
from tests.cli_support import assert_one_line_error, cli
from tests.servers import Seen, Server, json_reply
from tests.test_pytest_plugin import INI, run

pytest_plugins = ["pytester"]


class Provider:
    """A stand-in chat API whose answers change from run to run: new ids, times, token
    counts and text every time, and a new shape once ``reshaped``."""

    def __init__(self) -> None:
        self.calls = 0
        self.reshaped = False

    def __call__(self, seen: Seen) -> Any:
        self.calls += 1
        document: dict[str, Any] = {
            "id": f"chatcmpl-{self.calls:08d}abcdef",
            "created": 1_700_000_000 + self.calls,
            "choices": [{"message": {"role": "assistant", "content": f"answer {self.calls}"}}],
            "usage": {"total_tokens": 10 + self.calls},
        }
        if self.reshaped:
            document["service_tier"] = "default"
            del document["usage"]
        return json_reply(document)


def record(path: Path, server: Server, body: dict[str, Any]) -> None:
    with agenttape.use_cassette(path, mode="all"):
        httpx.post(f"{server.url}/v1/chat/completions", json=body)
        httpx.get(f"{server.url}/v1/models")


FIRST = {
    "model": "m",
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "call_abc123456", "type": "function"}]},
    ],
}
"""A request as the code sent it when first recorded; its tool-call id is drawn per run."""


def again(**changes: Any) -> dict[str, Any]:
    """The same request, sent again: a new tool-call id, and ``changes``."""
    body: dict[str, Any] = {**FIRST, **changes}
    body["messages"] = [FIRST["messages"][0], {**FIRST["messages"][1], "tool_calls": [
        {"id": "call_xyz987654", "type": "function"}]}]  # fmt: skip
    return body


@pytest.fixture
def provider(serve: Callable[..., Server]) -> tuple[Provider, Server]:
    app = Provider()
    return app, serve(app)


def test_rerecording_keeps_the_previous_cassette(
    tmp_path: Path, provider: tuple[Provider, Server]
) -> None:
    _app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, FIRST)
    first = path.read_bytes()
    assert not (tmp_path / "chat.previous.msgpack").exists()
    record(path, server, again())
    assert (tmp_path / "chat.previous.msgpack").read_bytes() == first
    assert path.read_bytes() != first


def test_only_ids_times_counts_and_text_changed_is_benign(
    tmp_path: Path, provider: tuple[Provider, Server]
) -> None:
    _app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, FIRST)
    record(path, server, again(store=None, user=None))
    result = cli("diff", tmp_path / "chat.previous.msgpack", path, "--verdict", "--fail-on",
                 "request,response")  # fmt: skip
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[2].endswith("/v1/chat/completions: benign")
    assert lines[3] == (
        "    benign: 2 field(s) now sent as explicit null where the recording had none "
        "(request body.store, request body.user)"
    )
    assert lines[4] == (
        "    benign (ids, timestamps, token counts, model output text): "
        "request body.messages[1].tool_calls[0].id, response body.id, response body.created, "
        "response body.choices[0].message.content, response body.usage.total_tokens"
    )
    assert lines[-1] == "verdicts: 2 benign"
    same = cli("diff", path, path, "--verdict")
    assert same.stdout.splitlines()[-1] == "verdicts: 2 identical"


def test_a_changed_request_is_named_field_by_field_and_fails_ci(
    tmp_path: Path, provider: tuple[Provider, Server]
) -> None:
    _app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, {**FIRST, "temperature": 0.2, "stop": ["x"]})
    record(path, server, again(model="m2", temperature="0.2", tools=[]))
    previous = tmp_path / "chat.previous.msgpack"
    result = cli("diff", previous, path, "--verdict", "--fail-on", "request")
    assert result.returncode == 1
    out = result.stdout
    assert "/v1/chat/completions: request changed\n" in out
    assert "    request changed: request body.model: 'm', now 'm2'\n" in out
    assert "    request changed: request body.temperature: type number, now string" in out
    assert "    request changed: request body.tools: added ([])\n" in out
    assert "    request changed: request body.stop: removed (was 'x')\n" in out
    assert "verdicts: 1 benign, 1 request changed\nfailing on: request changed" in out
    assert cli("diff", previous, path, "--verdict", "--fail-on", "response").returncode == 0
    assert cli("diff", previous, path, "--verdict").returncode == 0


def test_a_new_answer_shape_is_named(tmp_path: Path, provider: tuple[Provider, Server]) -> None:
    app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, FIRST)
    app.reshaped = True
    record(path, server, again())
    result = cli("diff", tmp_path / "chat.previous.msgpack", path, "--verdict", "--fail-on",
                 "request,response")  # fmt: skip
    assert result.returncode == 1
    out = result.stdout
    assert "/v1/chat/completions: response shape changed\n" in out
    assert "    response shape changed: response body.usage: missing\n" in out
    assert "    response shape changed: response body.service_tier: new\n" in out
    assert "usage.total_tokens: missing" not in out  # the field is named once


def test_another_status_and_a_missing_call_are_judged() -> None:
    from agenttape._core.models import Failure, Interaction, Request, Response

    def call(status: int | None, path: str = "/a") -> Interaction:
        request = Request("GET", f"https://api.test{path}")
        if status is None:
            return Interaction(request, error=Failure("connect_error", "ConnectError"))
        return Interaction(request, Response(status))

    verdicts = judge([call(200), call(200), call(200)], [call(429), call(None)])
    assert [v.kind for v in verdicts] == [
        "response shape changed",
        "response shape changed",
        "request changed",
    ]
    assert verdicts[0].lines() == ["response shape changed: status: 200, now 429"]
    assert verdicts[1].lines() == [
        "response shape changed: answer: status 200, now no answer: connect_error"
    ]
    assert verdicts[2].lines() == ["request changed: interaction: gone: no longer made"]


def test_fail_on_takes_the_class_words(tmp_path: Path, provider: tuple[Provider, Server]) -> None:
    _app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, FIRST)
    assert_one_line_error(cli("diff", path, path, "--fail-on", "requests"), "--fail-on")


def test_a_rerecording_while_the_service_is_down_keeps_the_old_cassette(
    tmp_path: Path, provider: tuple[Provider, Server]
) -> None:
    _app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, FIRST)
    good = path.read_bytes()
    server.stop()
    with (
        pytest.warns(AgentTapeWarning, match="kept the old cassette") as caught,
        agenttape.use_cassette(path, mode="all"),
        pytest.raises(httpx.ConnectError),
    ):
        httpx.post(f"{server.url}/v1/chat/completions", json=FIRST)
    assert path.read_bytes() == good
    new = tmp_path / "chat.new.msgpack"
    assert [i.error.kind for i in agenttape.load(new).interactions if i.error] == ["connect_error"]
    message = str(caught[0].message)
    assert "1 request failed without an answer (#0)" in message
    assert f"agenttape diff {path} {new} --verdict" in message
    assert "answer: status 200, now no answer: connect_error" in message
    assert not (tmp_path / "chat.previous.msgpack").exists()


SUITE = """
    import os
    import httpx
    import pytest

    @pytest.mark.agenttape
    def test_chat():
        try:
            httpx.post(os.environ["API"] + "/v1/chat/completions", json={"q": 1})
        except httpx.ConnectError:
            pass  # the code under test retries later, say
"""


def test_pytest_record_while_down_keeps_the_old_cassette_and_says_so(
    pytester: pytest.Pytester, provider: tuple[Provider, Server]
) -> None:
    _app, server = provider
    pytester.makepyfile(test_suite=textwrap.dedent(SUITE))
    pytester.makeini(INI)
    run(pytester, server, "--agenttape-record").assert_outcomes(passed=1)
    cassette = pytester.path / "cassettes" / "test_suite" / "test_chat.msgpack"
    good = cassette.read_bytes()
    server.stop()
    result = run(pytester, server, "--agenttape-record")
    result.assert_outcomes(passed=1, warnings=1)
    assert cassette.read_bytes() == good
    assert cassette.with_name("test_chat.new.msgpack").exists()
    out = result.stdout.str()
    assert "re-recording " in out and "kept the old cassette" in out
    assert out.index("warnings summary") > out.index("test_suite.py .")


def test_a_recording_in_full_replaces_without_warning(
    tmp_path: Path, provider: tuple[Provider, Server]
) -> None:
    _app, server = provider
    path = tmp_path / "chat.msgpack"
    record(path, server, FIRST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        record(path, server, again())
    assert not (tmp_path / "chat.new.msgpack").exists()


def test_a_field_of_another_type_is_named_once() -> None:
    from agenttape._core.models import Interaction, Request, Response

    def answer(document: bytes) -> Interaction:
        headers = [("Content-Type", "application/json")]
        return Interaction(Request("POST", "https://api.test/v1/embeddings"),
                           Response(200, headers=headers, body=document))  # fmt: skip

    [verdict] = judge(
        [answer(b'{"data": [{"embedding": [0.1, 0.2]}]}')],
        [answer(b'{"data": [{"embedding": "AAAA"}], "model": "e"}')],
    )
    assert verdict.lines() == [
        "response shape changed: response body.data[*].embedding: type array, now string",
        "response shape changed: response body.model: new",
    ]


def test_a_websocket_session_is_judged_frame_by_frame() -> None:
    from agenttape._core.models import Closed, Frame, Interaction, Request, Response

    def session(sent: bytes, received: bytes) -> Interaction:
        return Interaction(
            Request("GET", "wss://api.test/v1/realtime"),
            Response(101),
            frames=[Frame("client", "text", sent, 0.1), Frame("server", "text", received, 0.2)],
            closed=Closed(1000, "", "client"),
        )

    [verdict] = judge(
        [session(b'{"type":"hello","voice":"alloy","id":"evt_abcdef123"}', b'{"n":1}')],
        [session(b'{"type":"hello","voice":"verse","id":"evt_zzzzzz999"}', b'{"n":"x","m":1}')],
    )
    assert verdict.kind == "request changed"
    assert verdict.lines() == [
        "request changed: client frames[0].voice: 'alloy', now 'verse'",
        "response shape changed: server frames[*].n: type number, now string",
        "response shape changed: server frames[*].m: new",
        "benign (ids): client frames[0].id",
    ]


def _agent_turn(path: Path, url: str, prompt: str, tool_result: str) -> None:
    """One agent turn recorded from the stand-in through the openai SDK: the model calls a
    tool, the code sends the tool's result back, the model answers."""
    import openai

    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}}]  # fmt: skip
    messages: list[Any] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": prompt},
    ]
    with agenttape.use_cassette(path, mode="all"):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        asked = client.chat.completions.create(model="m", messages=messages, tools=tools)
        message = asked.choices[0].message
        assert message.tool_calls
        messages += [
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": tool_result},
        ]
        client.chat.completions.create(model="m", messages=messages, tools=tools)


def test_a_changed_prompt_or_tool_result_is_a_request_change(
    tmp_path: Path, standin: StandIn
) -> None:
    """The user's message and a tool's result are what the code sends: a change of either is
    a request change; only the model's own output, sent back in an assistant message, is
    benign."""
    old, new = tmp_path / "old.msgpack", tmp_path / "new.msgpack"
    _agent_turn(old, standin.url, "Where is my order A-1?", '{"status": "shipped"}')
    _agent_turn(new, standin.url, "Where is my refund A-1?", '{"status": "lost"}')
    result = cli("diff", old, new, "--verdict", "--fail-on", "request,response")
    assert result.returncode == 1, result.stdout
    out = result.stdout
    assert (
        "    request changed: request body.messages[1].content: 'Where is my order A-1?', "
        "now 'Where is my refund A-1?'\n"
    ) in out
    assert (
        '    request changed: request body.messages[3].content: \'{"status": "shipped"}\', '
        'now \'{"status": "lost"}\'\n'
    ) in out
    [benign] = [line for line in out.splitlines() if "request body.messages[2]" in line]
    assert benign.startswith("    benign (ids, model output text): ")
    assert "request body.messages[2].tool_calls[0].function.arguments" in benign
    assert out.endswith("verdicts: 2 request changed\nfailing on: request changed "
                        "(--fail-on request,response)\n")  # fmt: skip
