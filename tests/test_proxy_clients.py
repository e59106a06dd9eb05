"""Real clients through the recording proxy, each answer kind live → recorded → server stopped →
replayed, compared exactly: curl, Node's fetch, the official openai npm package and requests,
against a TLS stand-in at an IP-literal address (``https://127.0.0.1:PORT``) signed by a test
CA. What each client prints — status line, headers, body bytes, or the error it raised — is
the same while recording and on replay."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import agenttape
from tests.cli_support import cli
from tests.proxy_support import (
    CURL,
    NODE,
    ProxyProcess,
    agenttape_ca,
    node_env,
)
from tests.servers import HALF_JSON, Reply, Seen, Server, gzip_reply, refused_port, sse_reply

NODE_PRELOAD = Path(agenttape.__file__).parent / "_bootstrap" / "node_proxy.cjs"
EVENTS = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]

KINDS: dict[str, Reply] = {
    "json": Reply(
        headers=[("Content-Type", "application/json"), ("X-Request-Id", "req_1")],
        chunks=[b'{"id": "chatcmpl-1", "object": "chat.completion", "ok": true}'],
    ),
    "gzip": gzip_reply(b'{"ok": true, "packed": "yes"}'),
    "sse": sse_reply(EVENTS, delay=0.02),
    "limited": Reply(
        status=429,
        reason="Too Many Requests (slow down)",
        headers=[("Content-Type", "application/json"), ("X-Odd-Case", "A"), ("x-odd-case", "b")],
        chunks=[HALF_JSON],
    ),
    "empty": Reply(status=204),
    "until-close": Reply(
        headers=[("Content-Type", "text/plain")],
        chunks=[b"read until the server closes"],
        framed=False,
    ),
    "cut": Reply(
        headers=[("Content-Type", "application/json")], chunks=[b'{"partial": '], length=100
    ),
    "refused": Reply(),  # the URL names a port nothing listens on
}


def app(seen: Seen) -> Reply:
    return KINDS[seen.path.strip("/").split("/")[-1]]


FETCH = r"""
const cases = JSON.parse(process.argv[2]);
const chain = (e) => { const out = []; for (let c = e; c; c = c.cause) out.push(c.code || c.name); return out; };
for (const [kind, url] of cases) {
  try {
    const r = await fetch(url, { headers: { 'accept-encoding': 'gzip' } });
    const body = Buffer.from(await r.arrayBuffer()).toString('latin1');
    console.log(JSON.stringify({ kind, status: r.status, statusText: r.statusText, headers: [...r.headers], body }));
  } catch (e) {
    console.log(JSON.stringify({ kind, error: chain(e), message: e.message }));
  }
}
"""

OPENAI_SDK = r"""
const OpenAI = require('openai').default || require('openai');
(async () => {
const cases = JSON.parse(process.argv[2]);
const chain = (e) => { const out = []; for (let c = e; c; c = c.cause) out.push(c.code || c.constructor.name); return out; };
for (const [kind, url] of cases) {
  const u = new URL(url);
  const client = new OpenAI({ baseURL: u.origin + '/v1', apiKey: 'sk-test-0123456789abcdef', maxRetries: 0, timeout: 10000 });
  try {
    const stream = kind === 'sse';
    const result = await client.post('/' + kind, { body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: kind }] }, stream });
    if (stream) {
      const events = [];
      for await (const event of result) events.push(event);
      console.log(JSON.stringify({ kind, events }));
    } else {
      console.log(JSON.stringify({ kind, result }));
    }
  } catch (e) {
    console.log(JSON.stringify({ kind, error: chain(e), status: e.status, message: e.message }));
  }
}
})();
"""

REQUESTS = r"""
import json, sys, requests
def chain(e):
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(type(e).__name__)
        inner = None
        if e.args and isinstance(e.args[0], BaseException):
            inner = e.args[0]
        elif isinstance(getattr(e, "reason", None), BaseException):
            inner = e.reason
        e = inner or e.__cause__ or e.__context__
    return out
for kind, url in json.loads(sys.argv[1]):
    try:
        r = requests.get(url, timeout=10)
        print(json.dumps({"kind": kind, "status": r.status_code, "reason": r.reason,
                          "headers": list(r.raw.headers.items()), "body": r.content.decode("latin-1")}))
    except Exception as e:
        print(json.dumps({"kind": kind, "error": chain(e)}))
"""


def _env(proxy: ProxyProcess, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "node_options")}
    ca = str(agenttape_ca())
    return {
        **env,
        "HTTPS_PROXY": proxy.url,
        "HTTP_PROXY": proxy.url,
        "NODE_OPTIONS": f"--require {NODE_PRELOAD}",
        "NODE_EXTRA_CA_CERTS": ca,
        "REQUESTS_CA_BUNDLE": ca,
        **extra,
    }


def _masked(text: str, proxy: ProxyProcess) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x…", text.replace(str(proxy.port), "PROXY"))


def run_client(
    client: str, cases: list[tuple[str, str]], proxy: ProxyProcess, tmp: Path, modules: Path | None
) -> dict[str, str]:
    """What the client saw for each kind, as text to compare."""
    if client == "curl":
        seen = {}
        for kind, url in cases:
            result = subprocess.run(
                [
                    CURL or "curl",
                    "-sS",
                    "-i",
                    "--raw",
                    "-x",
                    proxy.url,
                    "--cacert",
                    str(agenttape_ca()),
                    url,
                ],
                capture_output=True,
                timeout=30,
                env=_env(proxy, {}),
                check=False,
            )
            seen[kind] = _masked(
                f"exit {result.returncode}\n{result.stdout.decode('latin-1')}\n"
                f"{result.stderr.decode('latin-1')}",
                proxy,
            )
        return seen
    if client == "requests":
        command = [sys.executable, "-c", REQUESTS, json.dumps(cases)]
        extra: dict[str, str] = {}
    else:
        program = tmp / (f"{client}.mjs" if client == "fetch" else f"{client}.cjs")
        program.write_text(FETCH if client == "fetch" else OPENAI_SDK)
        command = [NODE or "node", str(program), json.dumps(cases)]
        extra = node_env(modules) if modules is not None else {}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=_env(proxy, extra), check=False
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {line["kind"]: _masked(json.dumps(line, sort_keys=True), proxy) for line in lines}


@pytest.mark.parametrize("client", ["curl", "fetch", "openai", "requests"])
def test_each_client_sees_the_same_answers_live_and_replayed(
    client: str,
    serve_tls: Callable[..., Server],
    start_proxy: Callable[..., ProxyProcess],
    upstream_ca: tuple[object, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if client == "curl" and CURL is None:
        pytest.skip("curl is not installed on this machine")
    if client in ("fetch", "openai") and NODE is None:
        pytest.skip("Node.js is not installed on this machine")
    modules = request.getfixturevalue("node_modules") if client == "openai" else None
    server = serve_tls(app)
    assert server.url.startswith("https://127.0.0.1:")  # an IP-literal host
    refused = f"https://127.0.0.1:{refused_port()}"
    cases = [(kind, f"{refused if kind == 'refused' else server.url}/v1/{kind}") for kind in KINDS]
    cassette = tmp_path / "tape.msgpack"
    env = {"SSL_CERT_FILE": str(upstream_ca[1])}
    recording = start_proxy("--cassette", cassette, "--mode", "all", env=env)
    live = run_client(client, cases, recording, tmp_path, modules)
    assert recording.stop() == 0, recording.stderr
    assert "TLS handshake" not in recording.stderr, recording.stderr
    server.stop()
    replaying = start_proxy("--cassette", cassette)
    replayed = run_client(client, cases, replaying, tmp_path, modules)
    replaying.stop()
    assert set(live) == set(KINDS), live
    differing = {
        kind: (live[kind], replayed.get(kind)) for kind in KINDS if replayed.get(kind) != live[kind]
    }
    assert not differing, json.dumps(differing, indent=1)
    assert "chatcmpl-1" in live["json"] and "error" not in live["json"]
    assert "error" in live["refused"] or "exit 0" not in live["refused"]
    if os.environ.get("AGENTTAPE_TEST_MATRIX"):  # what each client saw, for reading
        with open(os.environ["AGENTTAPE_TEST_MATRIX"], "a") as out:
            out.write(json.dumps({"client": client, "live": live, "replayed": replayed}) + "\n")
    assert replaying.returncode == 0, replaying.stderr
    if client == "curl":  # the protocol the stand-in spoke, head and chunk framing included
        assert (
            "HTTP/1.1 429 Too Many Requests (slow down)\r\nContent-Type: application/json\r\n"
            "X-Odd-Case: A\r\nx-odd-case: b\r\n" in live["limited"]
        )
        assert '\r\n\r\n10\r\ndata: {"n": 1}\n\n\r\n' in live["sse"]


@pytest.mark.skipif(CURL is None, reason="curl is not installed on this machine")
def test_run_fails_naming_the_cause_when_handshakes_with_the_proxy_failed_while_recording(
    serve_tls: Callable[..., Server], upstream_ca: tuple[object, Path], tmp_path: Path
) -> None:
    """A command that swallows its client's TLS failure (``|| true``) still fails the run
    while recording: nothing it sent over that connection was recorded."""
    server = serve_tls(app)
    script = f"curl -sS --cacert {upstream_ca[1]} {server.url}/v1/json || true"
    result = cli(
        "run",
        "--cassette",
        tmp_path / "tape.msgpack",
        "--mode",
        "all",
        "--",
        "sh",
        "-c",
        script,
        env={"SSL_CERT_FILE": str(upstream_ca[1])},
    )
    assert result.returncode == 1, result.stderr
    assert "TLS handshake with the proxy failed, for 127.0.0.1" in result.stderr
    assert "nothing was recorded: the command's TLS handshakes with the proxy failed" in (
        result.stderr
    )
    assert "does not trust the agenttape CA, or checked the certificate against another name" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
