"""``agenttape view``: a cassette as one self-contained HTML page — a waterfall of the
interactions, each one's request and response decoded for reading, and the replay kit.

The page is read offline and shared as a file, and the cassette it shows holds whatever a
server sent, so:

- nothing is loaded from anywhere: the style and the script are inline, allowed by their
  hashes in a Content-Security-Policy that allows nothing else;
- the cassette's content travels as data only: one ``application/json`` block in which ``<``,
  ``>``, ``&`` and the JavaScript line separators are escaped, read with ``JSON.parse`` and put
  on the page with ``textContent``, never parsed as HTML;
- what one body may put on the page is bounded (a compressed body is decoded only as far as
  the bound, so a decompression bomb costs the bound, not gigabytes), and a note says how much
  was left out.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import datetime as _dt
import hashlib
import html
import json
import os
import re
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .._core.encoding import encodings_of
from .._core.models import Headers, Interaction
from .._core.text import byte_size, counted, interrupted, iso, kept_because
from .._core.wire import grpc as grpc_wire
from .._version import __version__
from . import frames
from .export import exchange_json, jsonable
from .reading import (
    BODY_END_TEXT,
    Event,
    body_end,
    decode_within_budget,
    grpc_messages,
    is_sse,
    parse_json,
    parse_sse,
    sse_text,
    status_text,
    where,
)

DECODE_LIMIT = 4 * 1024 * 1024
"""Bytes one body is decoded to, at most, before it is formatted."""
SHOWN_LIMIT = 256 * 1024
"""Characters of one formatted body the page holds."""
EVENT_LIMIT = 2000
"""Server-sent events of one stream listed one by one."""
TICK_LIMIT = 400
"""Chunk arrivals marked on one bar of the waterfall."""
HEX_LIMIT = 4096
"""Bytes of a binary body shown as a hex dump."""
PAGE_BUDGET = 64 * 1024 * 1024
"""Characters of bodies one page holds in all; later bodies are left to ``agenttape show``."""

# Where a server-sent event ends: a blank line, with any of the three line endings.
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


class Budget:
    """What is left of the page's room for bodies, in characters."""

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self, size: int) -> bool:
        """True, and that much less room, when ``size`` more characters fit; once one body
        does not fit, no later one does (the page does not skip around)."""
        if size > self.left:
            self.left = 0
            return False
        self.left -= size
        return True


def _bounded(text: str, what: str) -> tuple[str, str]:
    """(text, note): the text cut to ``SHOWN_LIMIT`` characters, with a note saying how much
    was cut."""
    if len(text) <= SHOWN_LIMIT:
        return text, ""
    cut = len(text) - SHOWN_LIMIT
    return (
        text[:SHOWN_LIMIT],
        f"{what} is {len(text):,} characters; the first {SHOWN_LIMIT:,} are shown, "
        f"{cut:,} cut ('agenttape show -i N' prints it all)",
    )


def _utf8(data: bytes, cut: bool) -> str | None:
    """``data`` as UTF-8 text, or None when it is not; a body cut mid-character still reads
    as text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (cut and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"):
            return None
        text = data[: exc.start].decode("utf-8")
    return None if "\x00" in text else text  # NUL bytes: a binary format, shown as hex


def _hex_dump(data: bytes) -> str:
    """The first bytes of a binary body as offset, hex and printable characters."""
    lines = []
    for start in range(0, min(len(data), HEX_LIMIT), 16):
        row = data[start : start + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{start:08x}  {row.hex(' '):<47}  {printable}")
    return "\n".join(lines)


def _arrivals(chunks: Sequence[tuple[int, float]]) -> tuple[list[int], list[float]]:
    """(end positions, offsets): chunk ``i`` holds body bytes up to ``ends[i]``."""
    ends, offsets, position = [], [], 0
    for size, offset in chunks:
        position += size
        ends.append(position)
        offsets.append(offset)
    return ends, offsets


def _events(
    data: bytes, chunks: Sequence[tuple[int, float]] | None
) -> tuple[list[dict[str, Any]], list[Event]]:
    """The server-sent events of a stream as the page lists them (at most ``EVENT_LIMIT``),
    each with the moment, in seconds since the request started, that the chunk completing it
    arrived (when ``chunks`` can tell); and every event as ``parse_sse`` reads it."""
    ends, offsets = _arrivals(chunks) if chunks else ([], [])

    def arrived(position: int) -> float | None:
        if not ends:
            return None
        return offsets[min(bisect.bisect_right(ends, position), len(offsets) - 1)]

    items: list[dict[str, Any]] = []
    parsed: list[Event] = []

    def add(block: bytes, last_byte: int, dispatched: bool) -> None:
        for event in parse_sse(block):
            parsed.append(event)
            if len(items) >= EVENT_LIMIT:
                continue
            shown = event.data if isinstance(event.data, str) else json.dumps(event.data)
            item: dict[str, Any] = {"n": len(items), "at": arrived(last_byte), "data": shown}
            if event.event is not None:
                item["event"] = event.event
            if event.id is not None:
                item["id"] = event.id
            if event.extra:
                item["extra"] = event.extra
            if not dispatched:
                item["undispatched"] = True
            items.append(item)

    start = previous = 0
    for match in _LINE_END.finditer(data):
        if match.start() == previous:  # an empty line: the event so far is dispatched
            add(data[start : match.start()], match.end() - 1, True)
            start = match.end()
        previous = match.end()
    if data[start:].strip():
        add(data[start:], len(data) - 1, False)  # no blank line after it: never dispatched
    return items, parsed


def body_view(
    headers: Headers,
    body: bytes,
    chunks: Sequence[tuple[int, float]] | None = None,
    *,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """One body as the page shows it: ``kind`` (``empty``, ``json``, ``sse``, ``text``,
    ``binary``), the formatted ``text`` (for a stream, the text it spelled out) and the
    ``events``, and ``notes`` on decoding and on what was cut. Bounded: see ``DECODE_LIMIT``,
    ``SHOWN_LIMIT``, ``EVENT_LIMIT``."""
    encodings = encodings_of(headers)
    view: dict[str, Any] = {"size": len(body), "encoding": ", ".join(encodings)}
    notes: list[str] = []
    decoded = decode_within_budget(headers, body, limit=DECODE_LIMIT)
    data = decoded.data
    if decoded.note:
        notes.append(decoded.note)
    if encodings and data is not body:
        view["decoded_size"] = len(data)
    if decoded.cut:
        notes.append(
            f"what decodes past the first {byte_size(DECODE_LIMIT)} (of a body stored as "
            f"{byte_size(len(body))}) is not shown"
        )
    if not data:
        view.update(kind="empty", text="", notes=notes)
        return view
    events: list[dict[str, Any]] = []
    messages = grpc_messages(headers, data) if not decoded.cut else None
    if messages is not None:
        view.update(kind="grpc", count=len(messages))
        text, note = _bounded(_grpc_text(messages), "the messages")
    elif is_sse(headers):
        # Arrival moments are positions in the stored bytes: only an unencoded stream has them.
        events, parsed = _listed_events(data, chunks if not encodings else None, notes)
        view.update(kind="sse", count=len(parsed))
        text, note = _bounded(sse_text(parsed), "the stream's text")
    else:
        view["kind"], text = _plain_text(data, decoded.cut, notes)
        text, note = _bounded(text, "the formatted body")
    if note:
        notes.append(note)
    if budget is not None and not budget.take(len(text) + sum(len(e["data"]) for e in events)):
        text, events = "", []
        notes.append("not embedded: the page holds enough already ('agenttape show -i N')")
    view.update(text=text, notes=notes)
    if view["kind"] == "sse":
        view["events"] = events
    return view


def _grpc_text(messages: list[dict[str, Any]]) -> str:
    """Each gRPC message numbered: its fields where known, else its bytes in hex."""
    return "\n".join(
        f"[{number}] {message['size']} bytes\n"
        + (
            json.dumps(message["fields"], indent=2, ensure_ascii=False)
            if "fields" in message
            else message["hex"]
        )
        for number, message in enumerate(messages)
    )


def _listed_events(
    data: bytes, chunks: Sequence[tuple[int, float]] | None, notes: list[str]
) -> tuple[list[dict[str, Any]], list[Event]]:
    """A stream's events as listed (within ``EVENT_LIMIT`` and ``SHOWN_LIMIT``, what is left
    out said in ``notes``), and every event parsed."""
    events, parsed = _events(data, chunks)
    if len(parsed) > len(events):
        notes.append(
            f"{counted(len(parsed) - len(events), 'more event')} not listed (over {EVENT_LIMIT:,})"
        )
    room = SHOWN_LIMIT
    for position, item in enumerate(events):
        room -= len(item["data"])
        if room < 0:
            notes.append(
                f"events {position} to {len(parsed) - 1} not listed: over "
                f"{SHOWN_LIMIT:,} characters of events"
            )
            return events[:position], parsed
    return events, parsed


def _plain_text(data: bytes, cut: bool, notes: list[str]) -> tuple[str, str]:
    """The kind (``json``, ``text``, ``binary``) and text of a body that is not a stream."""
    as_json, document = (False, None) if cut else parse_json(data)
    if as_json:
        return "json", json.dumps(document, indent=2, ensure_ascii=False)
    readable_text = _utf8(data, cut)
    if readable_text is not None:
        return "text", readable_text
    if len(data) > HEX_LIMIT:
        notes.append(f"the first {HEX_LIMIT:,} of {len(data):,} bytes are shown")
    return "binary", _hex_dump(data)


_CALLER_CODES = frozenset((3, 5, 6, 7, 9, 11, 12, 16))
"""gRPC codes that say the call was wrong (INVALID_ARGUMENT, NOT_FOUND, …), as 4xx do."""


def status_class(interaction: Interaction) -> str:
    """The colour of an interaction on the waterfall: ``ok``, ``redirect``, ``client``,
    ``rate`` (429), ``server``, ``error`` (a transport error, no response), ``boundary`` (a
    function boundary), ``raised`` (a function boundary that raised)."""
    response = interaction.response
    if interaction.boundary != "http":
        return "raised" if interaction.error is not None else "boundary"
    if response is None:
        return "error"
    call = grpc_wire.summary(interaction)
    if call is not None and call[1] != 0:  # a gRPC status: quota, caller, or server trouble
        return "rate" if call[1] == 8 else "client" if call[1] in _CALLER_CODES else "server"
    status = response.status
    if status == 429:
        return "rate"
    if status >= 500:
        return "server"
    if status >= 400:
        return "client"
    if status >= 300:
        return "redirect"
    return "ok"


def _ticks(chunks: Sequence[tuple[int, float]]) -> list[float]:
    """Chunk arrival moments for the bar, thinned evenly to ``TICK_LIMIT``."""
    offsets = [offset for _size, offset in chunks]
    if len(offsets) > TICK_LIMIT:
        step = len(offsets) / TICK_LIMIT
        offsets = [offsets[int(i * step)] for i in range(TICK_LIMIT)] + [offsets[-1]]
    return [round(offset, 6) for offset in offsets]


def _interaction(
    index: int, interaction: Interaction, origin: float | None, budget: Budget
) -> dict[str, Any]:
    request, response = interaction.request, interaction.response
    end = body_end(interaction)

    def body(headers: Headers, data: bytes) -> dict[str, Any]:
        # The response's body (the one whose headers list is the response's) has chunks.
        chunks = response.chunks if response is not None and headers is response.headers else None
        return body_view(headers, data, chunks, budget=budget)

    exchange = exchange_json(interaction, body)
    started = interaction.started_at if origin is not None and interaction.started_at else None
    out: dict[str, Any] = {
        "index": index,
        "boundary": interaction.boundary,
        "method": request.method,
        "url": request.url,
        "where": where(request),
        "status": status_text(interaction),
        "injected": interaction.injected,
        "class": status_class(interaction),
        "end": end,
        "end_text": BODY_END_TEXT.get(end or "", ""),
        "started": iso(interaction.started_at) if started is not None else None,
        "offset": started - origin if started is not None and origin is not None else None,
        "ttfb": interaction.ttfb,
        "duration": interaction.duration,
        "ticks": _ticks(response.chunks) if response is not None else [],
        **exchange,
    }
    llm = out.get("llm")
    out["model"] = (llm or {}).get("model") or ""
    if out["response"] is not None:
        del out["response"]["chunks"]  # the body's view and the ticks say it for the page
        out["response"]["chunk_count"] = len(response.chunks) if response is not None else 0
    out["websocket"] = _frames_view(interaction, budget)
    return out


def _frames_view(interaction: Interaction, budget: Budget) -> dict[str, Any] | None:
    """A WebSocket session's frames as lines for the page, as many as the page's budget
    holds."""
    if interaction.frames is None:
        return None
    summary, *lines = frames.lines(interaction)
    shown = []
    for line in lines:
        if not budget.take(len(line)):
            break
        shown.append(line.strip())
    left = len(lines) - len(shown)
    return {"summary": summary, "frames": shown, "left_out": left}


# The header fields ``_replay_kit`` shows by name; every other one follows as it is.
KNOWN_HEADER_FIELDS = frozenset(
    (
        "run",
        "interrupted",
        "created_at",
        "agenttape_version",
        "run_id",
        "python",
        "implementation",
        "platform",
        "git",
        "libraries",
        "tags",
    )
)


def _replay_kit(header: dict[str, Any]) -> list[list[str]]:
    """The cassette header as (name, value) rows, the well-known fields first."""
    rows: list[list[str]] = []
    created = header.get("created_at")
    _add_row(
        rows,
        "recorded",
        created.isoformat(timespec="seconds").replace("+00:00", "Z")
        if isinstance(created, _dt.datetime)
        else created,
    )
    _add_row(rows, "agenttape", header.get("agenttape_version"))
    _add_row(rows, "run id", header.get("run_id"))
    _environment_rows(rows, header)
    _run_rows(rows, header)
    for name, value in header.items():
        if name not in KNOWN_HEADER_FIELDS:
            _add_row(rows, str(name).replace("_", " "), value)
    return rows


def _add_row(rows: list[list[str]], name: str, value: Any) -> None:
    """A row, unless there is nothing to show; a value that is not text as JSON."""
    if value is None or value == "" or value == {}:
        return
    if not isinstance(value, str):
        value = json.dumps(jsonable(value), ensure_ascii=False, sort_keys=True)
    rows.append([name, value])


def _environment_rows(rows: list[list[str]], header: dict[str, Any]) -> None:
    """Where it was recorded: Python, platform, git commit, libraries."""
    python = header.get("python")
    implementation = header.get("implementation")
    _add_row(
        rows, "python", f"{python} ({implementation})" if python and implementation else python
    )
    _add_row(rows, "platform", header.get("platform"))
    git = header.get("git")
    if isinstance(git, dict) and git.get("commit"):
        _add_row(rows, "git", f"{git['commit']}{' (dirty)' if git.get('dirty') else ''}")
    else:
        _add_row(rows, "git", git)
    libraries = header.get("libraries")
    if isinstance(libraries, dict):
        listed = ", ".join(f"{name} {version}" for name, version in libraries.items())
        _add_row(rows, "libraries", listed)
    else:
        _add_row(rows, "libraries", libraries)


def _run_rows(rows: list[list[str]], header: dict[str, Any]) -> None:
    """What the run was: its tags, whether it was interrupted, why it was kept, how long."""
    tags = header.get("tags")
    if isinstance(tags, dict):
        for name, value in tags.items():
            _add_row(rows, f"tag {name}", value if isinstance(value, str) else jsonable(value))
    else:
        _add_row(rows, "tags", tags)
    _add_row(rows, "interrupted", interrupted(header))
    run = header.get("run")
    if isinstance(run, dict):
        _add_row(rows, "kept", kept_because(header))
        duration = run.get("duration")
        _add_row(rows, "duration", f"{duration:.3f} s" if isinstance(duration, float) else None)
    else:
        _add_row(rows, "run", run)


def page_data(header: dict[str, Any], interactions: list[Interaction], name: str) -> dict[str, Any]:
    """Everything the page shows, as plain JSON-able data."""
    budget = Budget(PAGE_BUDGET)
    starts = [i.started_at for i in interactions if i.started_at]
    origin = min(starts) if starts else None
    return {
        "name": name,
        "generator": f"agenttape {__version__}",
        "started": iso(origin) if origin is not None else None,
        "kit": _replay_kit(header),
        "interrupted": interrupted(header),
        "kept": kept_because(header),
        "interactions": [
            _interaction(index, interaction, origin, budget)
            for index, interaction in enumerate(interactions)
        ],
    }


def embed_json(document: Any) -> str:
    """JSON that is safe inside a ``<script>`` element of an HTML page: no ``<``, ``>`` or
    ``&`` (so no ``</script>``, no ``<!--``), no U+2028/U+2029, and no lone surrogate (written
    as its JSON escape); each stands in a JSON string, where a ``\\uXXXX`` escape means the
    same character."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    for character, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(character, escape)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def build_page(header: dict[str, Any], interactions: list[Interaction], name: str) -> str:
    """The whole page: style, data and script inline, allowed by a Content-Security-Policy
    that names their hashes and allows nothing else."""
    style, script = _asset("view.css"), _asset("view.js")
    if "</" in style or "</script" in script.lower():
        raise AssertionError("an inline asset closes its own element")
    policy = (
        f"default-src 'none'; script-src 'sha256-{_digest(script)}'; "
        f"style-src 'sha256-{_digest(style)}'; base-uri 'none'; form-action 'none'"
    )
    data = embed_json(page_data(header, interactions, name))
    title = html.escape(f"{name} — agenttape view", quote=True)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>{title}</title>\n"
        f"<style>{style}</style>\n</head>\n<body>\n"
        '<noscript><p class="noscript">This page lays out the cassette with a script; allow '
        "scripts for this file, or read it with 'agenttape show'.</p></noscript>\n"
        '<main id="app"></main>\n'
        f'<script type="application/json" id="cassette-data">{data}</script>\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )


def write_page(path: Path, page: str) -> None:
    """Temporary file, fsync, rename: a page being rewritten is never seen half-written."""
    directory = path.parent if str(path.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.fchmod(descriptor, 0o666 & ~mask)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(page)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
