"""The official MCP SDK's streamable-HTTP client against its own server, in both protocol eras:
recorded live, then replayed with the server stopped."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import MCPApp, loaded

pytest.importorskip("mcp")
# mcp imports jsonschema when it first checks a tool's result, reading its schema files:
# imported here, before any loop runs.
pytest.importorskip("jsonschema")
pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")

RECONNECT_DELAY = 1.0  # the MCP client's wait before it reopens an event stream that ended
LEGACY = "legacy"  # the 2025-11-25 handshake: initialize, a session id, a GET event stream
MODERN = "2026-07-28"  # one self-contained POST per request, no session
ERAS = [LEGACY, MODERN, "auto"]  # auto: a server/discover probe, then the newest era both speak
WAIT = 10.0  # the longest any step may take before the test fails instead of hanging
ADDS = 4


@dataclass
class Sent:
    """A request as the client handed it to its HTTP library."""

    method: str
    body: bytes
    session_id: str | None
    last_event_id: str | None

    @property
    def rpc(self) -> dict[str, Any]:
        return json.loads(self.body) if self.body else {}


@dataclass
class Run:
    """What one session sent and what it got back."""

    sent: list[Sent] = field(default_factory=list)
    notifications: list[str] = field(default_factory=list)
    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)
    logs: list[Any] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    def outcome(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "notifications": self.notifications,
            "progress": self.progress,
            "logs": self.logs,
        }

    def add_order(self) -> list[int]:
        """The JSON-RPC ids of the ``add`` calls, in the order they reached the wire."""
        return [
            s.rpc["id"]
            for s in self.sent
            if s.rpc.get("method") == "tools/call" and s.rpc["params"]["name"] == "add"
        ]

    def count(self, method: str) -> int:
        return self.notifications.count(method)


def http_client(run: Run, stagger: bool) -> Any:
    """The SDK's own HTTP client, noting every request. ``stagger`` holds the concurrent
    ``add`` calls back the longer the earlier they were made, so they reach the wire in
    reverse order."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def hold_back(request: Any) -> None:
        message = json.loads(request.content) if request.content else {}
        params = message.get("params") or {}
        if stagger and message.get("method") == "tools/call" and params.get("name") == "add":
            await asyncio.sleep(0.05 * (ADDS - params["arguments"]["a"]))

    async def note(request: Any) -> None:
        run.sent.append(
            Sent(
                request.method,
                request.content,
                request.headers.get("mcp-session-id"),
                request.headers.get("last-event-id"),
            )
        )

    http = create_mcp_http_client()
    http.event_hooks["request"].extend([hold_back, note])
    return http


async def until(condition: Callable[[], bool]) -> None:
    """Returns once ``condition`` holds; fails the test after ``WAIT`` seconds."""

    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), WAIT)


async def session(url: str, era: str, *, stagger: bool = False) -> Run:
    """``mcp_run`` that fails the test instead of hanging."""
    return await asyncio.wait_for(mcp_run(url, era, stagger), 60)


async def mcp_run(url: str, era: str, stagger: bool) -> Run:
    """One MCP session: list the tools, a call that reports progress and logs on its own
    response stream, and concurrent calls. In the handshake era the server also sends
    notifications on the session's GET event stream and ends that stream once (the client
    resumes it with last-event-id), and the session stays open past the client's reconnect
    delay before it closes (DELETE)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    run = Run()

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str):
            run.notifications.append(method)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        run.progress.append((progress, total, message))

    async def on_log(params: Any) -> None:
        run.logs.append(params.data)

    def texts(result: Any) -> list[str]:
        return [block.text for block in result.content]

    changed = "notifications/tools/list_changed"
    async with (
        http_client(run, stagger) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=era,  # type: ignore[arg-type]
            message_handler=on_message,
            logging_callback=on_log,
            log_level="info",
        ) as client,
    ):
        run.results["era"] = client.protocol_version
        run.results["tools"] = [tool.name for tool in (await client.list_tools()).tools]
        steps = await client.call_tool("steps", {"n": 3}, progress_callback=on_progress)
        run.results["steps"] = texts(steps)
        sums = await asyncio.gather(
            *(client.call_tool("add", {"a": a, "b": 10}) for a in range(ADDS))
        )
        run.results["sums"] = [texts(result) for result in sums]
        if client.protocol_version == LEGACY_VERSION:
            await client.call_tool("announce", {})
            await until(lambda: run.count(changed) == 1)
            await client.call_tool("drop_stream", {})
            await client.call_tool("announce", {})  # while the event stream is down
            await until(lambda: run.count(changed) == 2)
            await asyncio.sleep(RECONNECT_DELAY * 1.5)
    return run


async def listen_run(url: str) -> list[str]:
    """At 2026-07-28 the server's own notifications ride a ``subscriptions/listen`` stream
    the client opens: one tools-changed event, announced by a tool call."""
    from mcp import Client

    async def run() -> list[str]:
        async with (
            Client(url, mode=MODERN) as client,
            client.listen(tools_list_changed=True) as events,
        ):
            await client.call_tool("announce", {})
            return [type(await anext(events)).__name__]

    return await asyncio.wait_for(run(), 60)


LEGACY_VERSION = "2025-11-25"


def interactions(path: Path) -> list[agenttape.Interaction]:
    return agenttape.load(path).interactions


def recorded_requests(path: Path) -> list[tuple[str, bytes]]:
    return sorted((i.request.method, i.request.body) for i in interactions(path))


def sent_requests(run: Run) -> list[tuple[str, bytes]]:
    return sorted((s.method, s.body) for s in run.sent)


@pytest.mark.parametrize("era", ERAS)
async def test_session_records_then_replays_offline(era: str, cassette_path: Path) -> None:
    """Every request the session made is served from the cassette with the server stopped,
    whatever order the concurrent calls reach the wire in, and replay makes no request that
    was not recorded: no reconnect where the live client did not reconnect."""
    with MCPApp(resumable=True) as app:
        async with agenttape.use_cassette(cassette_path, mode="once"):
            live = await session(app.url, era)
    outcome = live.outcome()
    assert outcome["results"]["sums"] == [[str(a + 10)] for a in range(ADDS)]
    assert outcome["results"]["steps"] == ["3 steps"]
    assert outcome["progress"] == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    assert outcome["logs"] == ["did 3 steps"]
    if era == LEGACY:
        assert outcome["results"]["era"] == LEGACY_VERSION
        assert live.count("notifications/tools/list_changed") == 2
    else:
        assert outcome["results"]["era"] == MODERN
        assert {s.session_id for s in live.sent} == {None}
    assert (await asyncio.to_thread(recorded_requests, cassette_path)) == sent_requests(live)
    recorded = await asyncio.to_thread(cassette_path.read_bytes)

    async with agenttape.use_cassette(cassette_path, mode="none") as tape:
        replayed = await session(app.url, era, stagger=True)
    assert replayed.outcome() == outcome
    assert sent_requests(replayed) == (await asyncio.to_thread(recorded_requests, cassette_path))
    assert tape.all_played and tape.play_count == len(tape.interactions) == len(live.sent)
    assert tape.misses == []
    assert replayed.add_order() == sorted(replayed.add_order(), reverse=True)
    assert (await asyncio.to_thread(cassette_path.read_bytes)) == recorded


async def test_handshake_era_event_stream_resumes_with_last_event_id(cassette_path: Path) -> None:
    """The session's GET event stream: the server ends it, the client reopens it with the
    id of the last event it got, and the server sends what it missed meanwhile. Replayed,
    the client reopens it with the same header, and the resumed stream ends only when the
    session closes (DELETE), as live."""
    with MCPApp(resumable=True) as app:
        async with agenttape.use_cassette(cassette_path, mode="once"):
            live = await session(app.url, LEGACY)
    gets = [s for s in live.sent if s.method == "GET"]
    assert [s.last_event_id is None for s in gets] == [True, False]
    streams = [
        i
        for i in (await asyncio.to_thread(interactions, cassette_path))
        if i.request.method == "GET"
    ]
    assert len(streams) == 2
    first, resumed = (stream.response for stream in streams)
    assert first is not None and resumed is not None
    assert not first.truncated, "the server ended it"
    event_ids = re.findall(rb"^id: (\S+)", first.body, re.MULTILINE)
    assert event_ids and streams[1].request.header("last-event-id") == event_ids[-1].decode()
    assert b"notifications/tools/list_changed" in first.body
    assert b"notifications/tools/list_changed" in resumed.body, "sent while it was down"
    (delete,) = [
        i
        for i in (await asyncio.to_thread(interactions, cassette_path))
        if i.request.method == "DELETE"
    ]
    assert delete.started_at < streams[1].started_at + (streams[1].duration or 0)

    async with agenttape.use_cassette(cassette_path, mode="none") as tape:
        replayed = await session(app.url, LEGACY)
    assert [s.last_event_id for s in replayed.sent if s.method == "GET"] == [
        s.last_event_id for s in gets
    ]
    assert [s.method for s in replayed.sent][-1] == "DELETE"
    assert tape.all_played and tape.misses == []


async def test_session_id_differs_live_and_replay_hands_back_the_recorded_one(
    tmp_path: Path,
) -> None:
    """The server assigns a new session id on every live run. Replay hands back the one it
    recorded, and the requests that carry it match even when the header is matched on."""
    paths = [tmp_path / "first.msgpack", tmp_path / "second.msgpack"]
    with MCPApp(resumable=True) as app:
        for path in paths:
            async with agenttape.use_cassette(path, mode="once"):
                await session(app.url, LEGACY)
    assigned = []
    for path in paths:
        initialize = (await asyncio.to_thread(interactions, path))[0]
        assert initialize.response is not None
        assert json.loads(initialize.request.body)["method"] == "initialize"
        assigned.append(initialize.response.header("mcp-session-id"))
    assert None not in assigned and assigned[0] != assigned[1]

    match_on = ["method", "url", "body", "headers:mcp-session-id"]
    for path, session_id in zip(paths, assigned, strict=True):
        async with agenttape.use_cassette(path, mode="none", match_on=match_on) as tape:
            replayed = await session(app.url, LEGACY)
        assert tape.all_played and tape.misses == []
        assert {s.session_id for s in replayed.sent[1:]} == {session_id}


FRESH_PROCESS = """
import asyncio, json, sys
import agenttape
from tests.test_mcp import listen_run

async def main():
    async with agenttape.use_cassette(sys.argv[2], mode=sys.argv[3]) as tape:
        events = await listen_run(sys.argv[1])
    print(json.dumps({"events": events, "played": tape.play_count, "misses": len(tape.misses)}))

asyncio.run(main())
"""


def in_a_new_process(url: str, path: Path, mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, url, str(path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_listen_stream_records_then_replays_in_a_new_process(cassette_path: Path) -> None:
    """The 2026-07-28 ``subscriptions/listen`` stream: its acknowledgement, then the event a
    tool call announced, replayed in that order with the server stopped. The client numbers
    its listen requests across the process (listen-1, listen-2, ...) and the server's
    acknowledgement names that id, so a recording replays in a process that opened as many
    listen streams before it did: here a new process each time."""
    with MCPApp() as app:
        live = in_a_new_process(app.url, cassette_path, "once")
    count = len(interactions(cassette_path))
    assert live == {"events": ["ToolsListChanged"], "played": count, "misses": 0}
    (listen,) = [
        i for i in interactions(cassette_path) if b"subscriptions/listen" in i.request.body
    ]
    assert listen.response is not None and listen.response.truncated, "the client closed it"
    body = listen.response.body
    assert b"notifications/subscriptions/acknowledged" in body
    assert body.index(b"acknowledged") < body.index(b"notifications/tools/list_changed")

    replayed = in_a_new_process(app.url, cassette_path, "none")
    assert replayed == live


async def mcp_session(url: str, methods: list[str]) -> list[str]:
    """A session with the official MCP client that stays open past its reconnect delay:
    two tool calls with a pause between them. ``methods`` collects every request it sends."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def seen(request: Any) -> None:
        methods.append(request.method)

    http = create_mcp_http_client()
    http.event_hooks["request"].append(seen)
    # Without the closing DELETE the server never ends the event stream: the client closes it.
    async with (
        http,
        streamable_http_client(url, http_client=http, terminate_on_close=False) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        first = await session.call_tool("add", {"a": 1, "b": 2})
        await asyncio.sleep(RECONNECT_DELAY * 1.5)
        second = await session.call_tool("add", {"a": 3, "b": 4})
    return [block.text for result in (first, second) for block in result.content]  # type: ignore[union-attr]


async def test_event_stream_the_client_left_open_stays_open_on_replay(
    cassette_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The MCP client holds a GET event stream open for the whole session. Left by the client
    at the end, it must stay open on replay: ended early, the client would reconnect after its
    delay with GETs that were never recorded (and swallow the misses)."""
    caplog.set_level(logging.INFO, logger="mcp.client.streamable_http")
    with MCPApp() as app:
        live_methods: list[str] = []
        async with agenttape.use_cassette(cassette_path, mode="once"):
            live = await mcp_session(app.url, live_methods)
    assert live == ["3", "7"]
    assert live_methods.count("GET") == 1
    (stream,) = [i for i in (await loaded(cassette_path)).interactions if i.request.method == "GET"]
    assert stream.error is None and stream.response is not None and stream.response.truncated
    recorded = await asyncio.to_thread(cassette_path.read_bytes)

    for mode in ("none", "new_episodes"):
        caplog.clear()
        methods: list[str] = []
        async with agenttape.use_cassette(cassette_path, mode=mode) as tape:  # type: ignore[arg-type]
            assert await mcp_session(app.url, methods) == live
            assert tape.all_played
        assert sorted(methods) == sorted(live_methods), mode
        assert not [r for r in caplog.records if "reconnect" in r.getMessage()], mode
        assert (await asyncio.to_thread(cassette_path.read_bytes)) == recorded, mode
