"""``agenttape view``: one self-contained HTML page of a recorded cassette, read offline, safe
with hostile content, bounded with huge bodies, and laid out by a real browser."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tracemalloc
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from llm_standin import StandIn

import agenttape
from agenttape._tools.view import DECODE_LIMIT, SHOWN_LIMIT, body_view, build_page, embed_json
from tests.cli_support import GZIP_DOCUMENT, assert_one_line_error, cli
from tests.servers import HALF_JSON, RATE_LIMIT_HEADERS, Reply, Server, gzip_reply, refused_port

HOSTILE = "</script><img src=x onerror=alert(1)>"
CHROMIUM = Path("/usr/bin/chromium")
KINDS = [
    "json",  # OpenAI chat
    "sse",  # OpenAI stream, closed by the SDK after [DONE]
    "sse",  # Anthropic stream
    "json",  # gzip tool
    "text",  # 429 with half a JSON document
    None,  # connection refused
    "json",  # boundary
    "json",  # boundary that raised
    "text",  # hostile
    "sse",  # stream closed early
    "text",  # body cut by the transport
]


@agenttape.boundary("lookup_order")
def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped"}


@agenttape.boundary("cancel_order")
def cancel_order(order_id: str) -> None:
    raise PermissionError(f"order {order_id} has shipped")


def record_everything(path: Path, standin: StandIn, serve: Callable[..., Server]) -> None:
    """An agent run with one of everything the page marks: LLM calls (JSON and streamed),
    a gzip body, a 429 with half a body, a refused connection, function boundaries (one
    raising), hostile text in headers and body, a stream closed early and a body cut short."""
    tool = serve(lambda seen: gzip_reply(json.dumps(GZIP_DOCUMENT).encode()))
    limited = serve(lambda seen: Reply(status=429, headers=RATE_LIMIT_HEADERS, chunks=[HALF_JSON]))
    hostile = serve(
        lambda seen: Reply(
            headers=[("Content-Type", "text/html"), ("X-Note", HOSTILE)],
            chunks=[f"<p>{HOSTILE}</p> & \u2028 done".encode()],
        )
    )
    held = serve(
        lambda seen: Reply(
            headers=[("Content-Type", "text/event-stream")],
            chunks=[b"data: 1\n\n", b"data: 2\n\n"],
            chunked=True,
            delay=1,
        )
    )
    cut = serve(lambda seen: Reply(chunks=[b'{"half'], length=100))
    base = standin.url
    with agenttape.use_cassette(path, mode="all"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test-0123456789abcdef")
        client.chat.completions.create(
            model="gpt-4o-mini",
            temperature=0.2,
            seed=7,
            messages=[{"role": "user", "content": "where is my order A-1"}],
        )
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert list(stream)
        claude = anthropic.Anthropic(base_url=base, api_key="sk-ant-test-0123456789abcdefghij")
        with claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "hello"}],
        ) as events:
            events.until_done()
        httpx.get(f"{tool.url}/orders/A-1")
        assert httpx.get(f"{limited.url}/v1/prices").status_code == 429
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{refused_port()}/down")
        lookup_order("A-1")
        with pytest.raises(PermissionError):
            cancel_order("A-1")
        httpx.get(f"{hostile.url}/page", headers={"X-Ask": HOSTILE})
        with httpx.stream("GET", f"{held.url}/events") as response:
            next(response.iter_raw())
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(f"{cut.url}/half")
    for server in (tool, limited, hostile, held, cut):
        server.stop()


@pytest.fixture
def everything(tmp_path: Path, standin: StandIn, serve: Callable[..., Server]) -> Path:
    path = tmp_path / "everything.msgpack"
    record_everything(path, standin, serve)
    return path


def page_of(path: Path, tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "page.html"
    result = cli("view", path, "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {out} (")
    return out, out.read_text(encoding="utf-8")


def embedded(page: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="cassette-data">(.*?)</script>', page, re.S
    )
    assert match
    document: dict[str, Any] = json.loads(match.group(1))
    return document


def outside_data(page: str) -> str:
    """The page's own markup, style and script: everything but the cassette's data."""
    return re.sub(r'(id="cassette-data">).*?(</script>)', r"\1\2", page, flags=re.S)


# -- the page -----------------------------------------------------------------------------


def test_the_page_shows_every_interaction_decoded(everything: Path, tmp_path: Path) -> None:
    _, page = page_of(everything, tmp_path)
    data = embedded(page)
    items = data["interactions"]
    cassette = agenttape.load(everything)
    assert len(items) == len(cassette.interactions) == len(KINDS)
    assert [i["response"]["body"]["kind"] if i["response"] else None for i in items] == KINDS
    assert [i["class"] for i in items] == [
        "ok",
        "ok",
        "ok",
        "ok",
        "rate",
        "error",
        "boundary",
        "raised",
        "ok",
        "ok",
        "ok",
    ]
    assert [i["end"] for i in items] == [
        "complete",
        "closed_after_end",
        "complete",
        "complete",
        "complete",
        None,
        "complete",
        "complete",
        "complete",
        "closed_early",
        "cut",
    ]
    assert [i["status"] for i in items][4:] == [
        "429",
        "connect_error",
        "200",
        "500",
        "200",
        "200, closed early",
        "200, cut",
    ]
    chat, openai_stream, claude, tool = items[:4]
    assert chat["llm"]["model"] == "gpt-4o-mini" and chat["llm"]["temperature"] == 0.2
    assert chat["model"] == "gpt-4o-mini" and claude["llm"]["stream"] is True
    assert '"model": "gpt-4o-mini"' in chat["request"]["body"]["text"]  # pretty JSON
    # A stream: its events with the moment each arrived, read from the chunk list.
    events = claude["response"]["body"]["events"]
    assert events[0]["event"] == "message_start" and events[-1]["event"] == "message_stop"
    chunks = cassette.interactions[2].response.chunks  # type: ignore[union-attr]
    assert {event["at"] for event in events} <= {offset for _size, offset in chunks}
    assert events[-1]["at"] == chunks[-1][1] and events[0]["at"] <= events[-1]["at"]
    assert claude["response"]["body"]["text"]  # the text the stream spelled out
    assert openai_stream["response"]["body"]["events"][-1]["data"] == "[DONE]"
    # gzip undone, JSON pretty; the 429 keeps its half body as text.
    body = tool["response"]["body"]
    assert body["encoding"] == "gzip" and body["decoded_size"] > 0
    assert json.loads(body["text"]) == GZIP_DOCUMENT and "\n  " in body["text"]
    assert items[4]["response"]["body"]["text"] == HALF_JSON.decode()
    assert ["retry-after", "7"] in items[4]["response"]["headers"]
    assert items[5]["error"]["type"] == "ConnectError" and items[5]["response"] is None
    assert items[6]["boundary"] == "tool:lookup_order" and items[7]["error"]["kind"] == "raised"
    # Timing: every interaction on the waterfall, in the order it started.
    offsets = [i["offset"] for i in items]
    assert offsets[0] == 0 and offsets == sorted(offsets)
    assert all(i["duration"] is not None and i["duration"] >= 0 for i in items)
    assert len(items[2]["ticks"]) == len(chunks)
    # The replay kit.
    kit = dict(data["kit"])
    header = cassette.metadata
    assert kit["run id"] == header["run_id"] and kit["agenttape"] == agenttape.__version__
    assert kit["python"].startswith(header["python"]) and kit["platform"] == header["platform"]
    assert "httpx " in kit["libraries"] and kit["recorded"].endswith("Z")


def test_the_page_loads_nothing_from_anywhere(everything: Path, tmp_path: Path) -> None:
    _, page = page_of(everything, tmp_path)
    own = outside_data(page)
    assert not re.search(r"https?://", own), "the page names a URL outside its data"
    assert not re.search(r"\b(src|href|srcset|action|poster|formaction)\s*=", own, re.I)
    assert "url(" not in own and "@import" not in own and "<link" not in own
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy
    directives = dict(part.strip().split(" ", 1) for part in policy.group(1).split(";"))
    assert directives["default-src"] == "'none'"
    assert "unsafe" not in policy.group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    assert style and script

    def digest(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    assert directives["style-src"] == digest(style.group(1))
    assert directives["script-src"] == digest(script.group(1))
    assert "innerHTML" not in script.group(1) and "insertAdjacentHTML" not in script.group(1)
    assert "document.write" not in script.group(1) and "eval(" not in script.group(1)


def test_hostile_content_stays_text(everything: Path, tmp_path: Path) -> None:
    _, page = page_of(everything, tmp_path)
    assert "<img" not in page and "onerror=alert" in page  # there, but never as markup
    assert page.count("</script>") == 2  # the data block's own end and the script's
    data = page.split('id="cassette-data">')[1].split("</script>")[0]
    assert not set(data) & {"<", ">", "&", "\u2028", "\u2029"}
    hostile = embedded(page)["interactions"][8]
    assert ["X-Ask", HOSTILE] in hostile["request"]["headers"]
    assert ["X-Note", HOSTILE] in hostile["response"]["headers"]
    assert hostile["response"]["body"]["text"] == f"<p>{HOSTILE}</p> & \u2028 done"
    assert "<title>everything.msgpack" in page
    sneaky = build_page({}, [], "<b>x</b>.msgpack")
    assert "<b>" not in sneaky and "&lt;b&gt;x&lt;/b&gt;.msgpack" in sneaky


def test_embedded_json_escapes_what_html_and_javascript_would_read() -> None:
    document = {"a": "</script><!-- & \u2028\u2029 >", "lone": "\ud800"}
    text = embed_json(document)
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029", "\ud800"}
    assert json.loads(text) == document
    text.encode("utf-8")  # no lone surrogate left to fail on


# -- bounds --------------------------------------------------------------------------------


def test_huge_and_bomb_bodies_are_cut_with_a_note(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    unit = b"all work and no play makes a dull agent "
    bomb = gzip.compress(unit * (64 * 1024 * 1024 // len(unit)), compresslevel=9)  # 64 MiB
    large = json.dumps({"rows": [{"n": n, "text": "x" * 40} for n in range(40_000)]}).encode()
    server = serve(
        lambda seen: (
            Reply(
                headers=[("Content-Type", "application/json"), ("Content-Encoding", "gzip")],
                chunks=[bomb],
            )
            if seen.path == "/bomb"
            else Reply(headers=[("Content-Type", "application/json")], chunks=[large])
        )
    )
    path = tmp_path / "large.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        with httpx.stream("GET", f"{server.url}/bomb") as response:
            assert b"".join(response.iter_raw()) == bomb  # stored as sent, never inflated
        httpx.get(f"{server.url}/large")
    assert len(bomb) < 512 * 1024

    interactions = agenttape.load(path).interactions
    tracemalloc.start()
    try:
        build_page({}, interactions[:1], "bomb.msgpack")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * DECODE_LIMIT, peak  # the 64 MiB never existed

    _, page = page_of(path, tmp_path)
    assert len(page) < 3 * SHOWN_LIMIT + 100_000
    bomb_view, large_view = (i["response"]["body"] for i in embedded(page)["interactions"])
    assert bomb_view["kind"] == "text" and len(bomb_view["text"]) == SHOWN_LIMIT
    assert bomb_view["decoded_size"] == DECODE_LIMIT
    assert any("past the first 4 MiB" in note for note in bomb_view["notes"])
    assert large_view["kind"] == "json" and len(large_view["text"]) == SHOWN_LIMIT
    (note,) = large_view["notes"]
    formatted = len(json.dumps(json.loads(large), indent=2))
    assert f"{formatted:,} characters" in note and f"{formatted - SHOWN_LIMIT:,} cut" in note


def test_a_long_stream_lists_its_first_events_and_counts_the_rest() -> None:
    events = b"".join(b'data: {"n": %d}\n\n' % n for n in range(3000))
    headers = [("Content-Type", "text/event-stream")]
    view = body_view(headers, events, [(len(events), 0.25)])
    assert view["count"] == 3000 and len(view["events"]) == 2000
    assert view["events"][-1] == {"n": 1999, "at": 0.25, "data": '{"n": 1999}'}
    assert view["notes"] == ["1000 more events not listed (over 2,000)"]
    binary = body_view([("Content-Type", "application/octet-stream")], bytes(range(256)) * 40)
    assert binary["kind"] == "binary" and binary["text"].startswith("00000000  00 01 02")
    assert binary["notes"] == ["the first 4,096 of 10,240 bytes are shown"]


# -- the command -----------------------------------------------------------------------------


def browser_script(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A BROWSER that writes down the URL it was asked to open."""
    marker = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s" "$1" > "{marker}"\n')
    script.chmod(0o755)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    return {"BROWSER": str(script), "TMPDIR": str(temporary)}, marker


def test_without_output_the_page_opens_in_the_browser(tmp_path: Path) -> None:
    env, marker = browser_script(tmp_path)
    demo = Path(__file__).parent.parent / "cassettes" / "support_bot.msgpack"
    result = cli("view", demo, env=env)
    assert result.returncode == 0, result.stderr
    (written,) = (tmp_path / "tmp").glob("agenttape-view-support_bot-*.html")
    assert result.stdout == f"wrote {written} (2 interactions, {written.stat().st_size:,} bytes)\n"
    assert marker.read_text() == written.as_uri()
    assert "support_bot.msgpack" in written.read_text()
    assert written.stat().st_mode & 0o077 == 0  # a cassette's content, for its reader only


def test_with_output_the_page_is_written_and_no_browser_opens(tmp_path: Path) -> None:
    env, marker = browser_script(tmp_path)
    demo = Path(__file__).parent.parent / "cassettes" / "support_bot.msgpack"
    out = tmp_path / "site" / "run.html"
    out.parent.mkdir()
    out.write_text("old")
    result = cli("view", demo, "--output", out, env=env)
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert not marker.exists() and not list((tmp_path / "tmp").iterdir())
    assert [p.name for p in out.parent.iterdir()] == ["run.html"]  # no temporary left


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    demo = Path(__file__).parent.parent / "cassettes" / "support_bot.msgpack"
    missing = tmp_path / "missing.msgpack"
    har = tmp_path / "trace.har"
    har.write_text('{"log": {"version": "1.2", "entries": []}}')
    copy = tmp_path / "copy.msgpack"
    shutil.copy(demo, copy)
    for args, words in (
        (("view",), ("CASSETTE",)),
        (("view", missing), (str(missing), "does not exist")),
        (("view", har), (str(har), "not an agenttape cassette")),
        (("view", demo, "--open-in", "firefox"), ("unrecognized arguments",)),
        (("view", demo, "-o"), ("expected one argument",)),
        (("view", copy, "-o", copy), ("is the cassette itself",)),
        (("view", demo, "-o", tmp_path / "nowhere" / "x.html"), ("No such file or directory",)),
    ):
        result = cli(*args)
        assert_one_line_error(result, *words)
        assert result.stderr.startswith("agenttape view: error: "), result.stderr
    assert copy.read_bytes() == demo.read_bytes()
    help_text = cli("view", "--help")
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: agenttape view")


def test_a_recording_cut_short_says_so_on_the_page(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    server = serve(lambda seen: Reply(chunks=[b"{}"]))
    path = tmp_path / "cut.msgpack"
    with pytest.raises(KeyboardInterrupt), agenttape.use_cassette(path, mode="once"):
        for i in range(5):
            httpx.get(f"{server.url}/step", params={"i": i})
            if i == 1:
                raise KeyboardInterrupt
    data = embedded(page_of(path, tmp_path)[1])
    assert data["interrupted"] == "interrupted by KeyboardInterrupt after 2 interactions"
    assert ["interrupted", data["interrupted"]] in data["kit"]
    whole = tmp_path / "whole.msgpack"
    with agenttape.use_cassette(whole, mode="once"):
        httpx.get(f"{server.url}/step")
    assert embedded(page_of(whole, tmp_path)[1])["interrupted"] is None
    if CHROMIUM.exists():
        page = page_of(path, tmp_path)[0]
        dom = chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
        assert 'class="alert cutshort">Recording cut short: interrupted by KeyboardInterrupt' in dom


# -- in a real browser -------------------------------------------------------------------------


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (Debian package 'chromium'); .ci/run installs it")
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [
            str(CHROMIUM),
            *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
            *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )


def test_chromium_lays_out_the_waterfall_and_opens_an_interaction(
    everything: Path, tmp_path: Path
) -> None:
    page, _ = page_of(everything, tmp_path)
    shown = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    dom = shown.stdout
    assert len(re.findall(r'class="bar c-', dom)) == len(KINDS)
    assert len(re.findall(r'class="grid row', dom)) == len(KINDS)
    assert 'class="bar c-rate' in dom and 'class="bar c-error hatched' in dom
    assert 'class="endmark cut"' in dom and 'class="endmark closed_early"' in dom
    assert "Content Security Policy" not in shown.stderr  # every inline block was allowed
    # A label near the axis's right edge ends at it, clear of the time column's header.
    ticks = re.findall(r'<span class="(tick[^"]*)" style="left: ([\d.]+)%;', dom)
    assert ticks and all(("last" in c) == (float(left) > 88) for c, left in ticks[1:]), ticks
    assert "Click an interaction" in dom and "<img" not in dom

    hostile = chromium(tmp_path, "--dump-dom", page.as_uri() + "#i=8").stdout
    hostile_detail = hostile.split('id="detail"', 1)[1]
    assert "<img" not in hostile and "onerror" in hostile_detail
    assert hostile_detail.count("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") == 3

    stream = chromium(tmp_path, "--dump-dom", page.as_uri() + "#i=2")
    detail = stream.stdout.split('id="detail"', 1)[1]
    assert "#2 POST" in detail and "message_start" in detail and "message_stop" in detail
    assert "<th>arrived</th>" in detail and re.search(r'<td class="at">\d+\.\d+ ms</td>', detail)
    assert "claude-sonnet-4-5" in detail
    gzipped = chromium(tmp_path, "--dump-dom", page.as_uri() + "#i=3").stdout
    tool_detail = gzipped.split('id="detail"', 1)[1]
    assert json.dumps(GZIP_DOCUMENT, indent=2) in tool_detail  # gzip undone, JSON pretty
    assert "gzip, " in tool_detail
    cut = chromium(tmp_path, "--dump-dom", page.as_uri() + "#i=-1").stdout
    assert "Response body cut short by a transport error" in cut


def png_colours(path: Path) -> int:
    """Distinct colours in an 8-bit RGB or RGBA PNG (the kind Chromium writes), read with the
    standard library."""
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, width = 8, b"", 0
    height = depth = colour = interlace = 0
    while position < len(blob):
        (length,) = struct.unpack(">I", blob[position : position + 4])
        kind = blob[position + 4 : position + 8]
        payload = blob[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", payload)
        elif kind == b"IDAT":
            idat += payload
        position += 12 + length
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 4 if colour == 6 else 3
    stride = width * channels
    raw = zlib.decompress(idat)
    previous = bytearray(stride)
    seen: set[bytes] = set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = previous[i]
                c = previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if row % 4 == 0:
            seen.update(bytes(line[i : i + 3]) for i in range(0, stride, channels * 2))
        previous = line
    return len(seen)


def test_chromium_screenshot_is_a_picture(everything: Path, tmp_path: Path) -> None:
    page, _ = page_of(everything, tmp_path)
    shot = tmp_path / "view.png"
    result = chromium(
        tmp_path, f"--screenshot={shot}", "--window-size=1280,800", page.as_uri() + "#i=2"
    )
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    assert png_colours(shot) > 200  # text, bars in each status colour, badges: not a blank page
