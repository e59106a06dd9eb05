"""Faults from the command line: ``agenttape run --fault`` (Python processes and, through the
proxy, Node with the official openai npm package) and ``agenttape proxy --fault`` seen by
curl, all on the shipped cassette the Node agent recorded against api.openai.com."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

import agenttape
from tests.cli_support import assert_one_line_error, cli, run_captured
from tests.proxy_support import (
    ProxyProcess,
    agenttape_ca,
    curl,
    needs_curl,
    needs_node,
    node_env,
)
from tests.servers import WebSocketServer
from tests.websocket_support import UPDATE

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "cassettes" / "agent.msgpack"
AGENT = ROOT / "examples" / "node_agent" / "agent.mjs"
CHAT = "POST api.openai.com/v1/chat/completions"
EXPECTED = (
    'tool lookup_order(A-1042) -> {"status":"shipped","carrier":"DHL","eta":"2026-11-27"}\n'
    "answer: Here is what I found: status shipped, carrier DHL, eta 2026-11-27.\n"
    "(11 streamed pieces)\n"
)

# The Node agent's first request (its body in argv[1]), made by the Python SDK, retries off.
FIRST_CALL = """
import json, sys, openai
client = openai.OpenAI(max_retries=0)
try:
    client.chat.completions.create(**json.loads(open(sys.argv[1]).read()))
    print("answered")
except openai.APIStatusError as e:
    print(json.dumps([type(e).__name__, e.status_code, e.code, e.response.headers.get("retry-after")]))
"""


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    path = tmp_path / "agent.msgpack"
    shutil.copy(SHIPPED, path)
    return path


def offline() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    environment.pop("OPENAI_BASE_URL", None)
    environment.pop("AGENTTAPE_FAULTS", None)
    return environment


def agenttape_run(*args: str | Path, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    result = run_captured(
        [sys.executable, "-m", "agenttape", "run", *map(str, args)], env=env, cwd=cwd, timeout=120
    )
    return result.returncode, result.stdout, result.stderr


def test_run_gives_a_python_process_the_fault_in_the_providers_shape(
    cassette: Path, tmp_path: Path
) -> None:
    script = tmp_path / "first_call.py"
    script.write_text(FIRST_CALL)
    body = tmp_path / "body.json"
    body.write_bytes(agenttape.load(cassette).interactions[0].request.body)
    fault = f"{CHAT}#1=rate_limit:retry_after=30"
    status, out, err = agenttape_run(
        "--cassette",
        cassette,
        "--fault",
        fault,
        "--",
        "python",
        script,
        body,
        env=offline(),
        cwd=tmp_path,
    )
    assert status == 0, err
    assert json.loads(out) == ["RateLimitError", 429, "rate_limit_exceeded", "30"]
    # Without the fault the same call is answered from the cassette.
    status, out, err = agenttape_run(
        "--cassette", cassette, "--", "python", script, body, env=offline(), cwd=tmp_path
    )
    assert (status, out) == (0, "answered\n"), err


@needs_node
def test_run_gives_node_the_fault_through_the_proxy_and_its_sdk_retries_past_it(
    cassette: Path, node_modules: Path, tmp_path: Path
) -> None:
    environment = {**offline(), **node_env(node_modules)}
    fault = f"{CHAT}#1=rate_limit:retry_after=1"
    status, out, err = agenttape_run(
        "--cassette", cassette, "--fault", fault, "--", "node", AGENT, env=environment, cwd=tmp_path
    )
    assert status == 0, err
    assert out == EXPECTED  # the SDK waited the second and asked again: the recorded answer
    # On every call, the SDK's retries run out and it raises its own error.
    fault = f"{CHAT}=rate_limit:retry_after=0"
    status, out, err = agenttape_run(
        "--cassette", cassette, "--fault", fault, "--", "node", AGENT, env=environment, cwd=tmp_path
    )
    assert status != 0
    assert "RateLimitError" in err or "429" in err, err


@needs_curl
def test_proxy_gives_curl_the_openai_rate_limit(
    cassette: Path, start_proxy: type[ProxyProcess]
) -> None:
    recorded = agenttape.load(cassette).interactions[0]
    proxy = start_proxy("--cassette", cassette, "--fault", f"{CHAT}#1=rate_limit:retry_after=30")
    assert "injecting the fault rate_limit(retry_after=30) on " + CHAT in proxy.banner
    arguments = [
        "https://api.openai.com/v1/chat/completions",
        "-H",
        "content-type: application/json",
        "--data-binary",
        recorded.request.body.decode(),
    ]
    first = curl(*arguments, proxy=proxy.url, ca=agenttape_ca())
    second = curl(*arguments, proxy=proxy.url, ca=agenttape_ca())
    assert proxy.stop() == 0, proxy.stderr
    tunnel, _, answer = first.stdout.partition(b"\r\n\r\n")
    assert tunnel.startswith(b"HTTP/1.1 200 Connection established"), first
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0].split()[1] == "429", first
    headers = {
        name.lower(): value.strip() for name, _, value in (x.partition(":") for x in lines[1:])
    }
    assert headers["retry-after"] == "30"
    error = json.loads(body)["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["type"] and error["message"]
    # The fault answered in the recorded one's place: the retry gets the recorded answer.
    assert second.stdout.partition(b"\r\n\r\n")[2].split()[1] == b"200"
    assert recorded.response is not None
    assert second.stdout.endswith(recorded.response.body)


@pytest.mark.parametrize("command", ["run", "proxy"])
def test_a_fault_that_cannot_be_read_is_one_line_exit_2(command: str, tmp_path: Path) -> None:
    extra = ["--", "python", "-c", "pass"] if command == "run" else []
    result = cli(command, "--fault", "POST /v1/x=ratelimit", *extra, cwd=tmp_path)
    assert_one_line_error(result, f"agenttape {command}: error: --fault:", "'ratelimit'")
    result = cli(command, "--fault", "POST /v1/x#2=rate_limit:after_chunks=1", *extra, cwd=tmp_path)
    assert_one_line_error(result, "has no option 'after_chunks'")


@needs_node
def test_proxy_gives_grpc_js_the_injected_status_in_trailers(
    tmp_path: Path, start_proxy: type[ProxyProcess]
) -> None:
    pytest.importorskip("grpc")
    from tests.grpc_support import record_vector_calls
    from tests.test_proxy_grpc import grpc_js, run_node, written_proto

    modules, proto = grpc_js(), written_proto(tmp_path)
    cassette = tmp_path / "vectors.msgpack"
    target = record_vector_calls(cassette)
    fault = "*/vectors.v1.Vectors/Search#1=grpc_status:code=UNAVAILABLE"
    replaying = start_proxy("--cassette", cassette, "--fault", fault)
    replayed = run_node(modules, target, replaying, proto)
    assert replaying.stop() == 0, replaying.stderr
    assert replayed["search"] == {
        "code": 14,
        "details": "UNAVAILABLE (injected by agenttape)",
        "trailing": {},
    }
    assert replayed["exhausted"]["code"] == 8  # type: ignore[index]  # the recorded one
    assert [p["id"] for p in replayed["scroll"]["points"]] == ["k-0", "k-1", "k-2"]  # type: ignore[index]


def test_proxy_closes_a_replayed_websocket_session_with_the_code(
    tmp_path: Path, ws_server: WebSocketServer, start_proxy: type[ProxyProcess]
) -> None:
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    cassette = tmp_path / "session.msgpack"
    with agenttape.use_cassette(cassette, mode="all"), connect(ws_server.url) as ws:
        first = ws.recv()
        ws.send(json.dumps(UPDATE))
        ws.recv()
    ws_server.stop()
    proxy = start_proxy("--cassette", cassette, "--fault", "close:after_frames=1,code=1011")
    with (
        connect(ws_server.url, proxy=proxy.url, open_timeout=10) as ws,
        pytest.raises(ConnectionClosedError) as caught,
    ):
        got = [ws.recv(timeout=10)]
        ws.send(json.dumps(UPDATE))
        got.append(ws.recv(timeout=10))
    assert proxy.stop() == 0, proxy.stderr
    assert got == [first]
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 1011
