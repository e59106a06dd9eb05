"""``agenttape show``: a cassette as a table of its interactions, or one interaction in full
(headers, bodies decoded for reading), in the terminal or as JSON. The command line parses the
arguments; what is shown, and how, is here."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

from .._core.files import read
from .._core.models import Headers, Interaction
from .._core.text import counted, interrupted, kept_because
from .._core.wire import grpc as grpc_wire
from . import frames
from .export import exchange_json, jsonable
from .reading import (
    BODY_END_TEXT,
    LLM_FIELDS,
    body_end,
    llm_fields,
    model_of,
    readable_body,
    reading,
    status_text,
    where,
)


class OutOfRange(ValueError):
    """``-i N`` names no interaction of the cassette."""


def show(path: str, index: int | None, as_json: bool, out: TextIO) -> None:
    """Writes the table of ``path``'s interactions, or interaction ``index`` (negative counts
    from the end) in full; JSON with ``as_json``."""
    header, interactions = read(path)
    with reading(os.path.getsize(path)):
        _show(path, index, as_json, header, interactions, out)


def _show(
    path: str,
    index: int | None,
    as_json: bool,
    header: dict[str, Any],
    interactions: list[Interaction],
    out: TextIO,
) -> None:
    if index is not None:
        position = index + len(interactions) if index < 0 else index
        if not 0 <= position < len(interactions):
            raise OutOfRange(
                f"-i {index} is out of range; {path} holds "
                f"{counted(len(interactions), 'interaction')} (0 to {len(interactions) - 1})"
            )
        if as_json:
            json.dump(
                _detail_json(position, interactions[position]), out, indent=2, ensure_ascii=False
            )
            out.write("\n")
        else:
            out.write(detail(position, interactions[position]))
        return
    rows = [row(i, interaction) for i, interaction in enumerate(interactions)]
    if as_json:
        document = {"header": jsonable(header), "interactions": rows}
        json.dump(document, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return
    title = _describe_header(path, header, len(interactions))
    if _use_rich(out):
        render_rich(rows, title, out)
    else:
        out.write(title + "\n")
        render_plain(rows, out)
    for r in rows:
        if "injected" in r:
            out.write(f"#{r['n']} injected: {r['injected']}\n")


COLUMNS = ("n", "boundary", "method", "host+path", "status", "model", "bytes", "ms", "chunks")
NUMERIC = {"n", "bytes", "ms", "chunks"}


def row(index: int, interaction: Interaction) -> dict[str, Any]:
    """One line of the table; a WebSocket session counts its frames as its chunks."""
    response = interaction.response
    pieces = (
        len(interaction.frames)
        if interaction.frames is not None
        else len(response.chunks)
        if response is not None
        else 0
    )
    return {
        "n": index,
        "boundary": interaction.boundary,
        "method": interaction.request.method,
        "host+path": where(interaction.request),
        "status": status_text(interaction),
        "model": model_of(interaction),
        "bytes": len(response.body) if response is not None else 0,
        "ms": round(interaction.duration * 1000, 1) if interaction.duration is not None else None,
        "chunks": pieces,
        **({"injected": interaction.injected} if interaction.injected is not None else {}),
    }


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_plain(rows: list[dict[str, Any]], out: TextIO) -> None:
    cells = [[_shorten(_cell(r[c]), 60) for c in COLUMNS] for r in rows]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(COLUMNS)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if c in NUMERIC else v.ljust(w)
            for c, v, w in zip(COLUMNS, values, widths, strict=True)
        ).rstrip()

    out.write(line(COLUMNS) + "\n")
    for values in cells:
        out.write(line(values) + "\n")


def render_rich(rows: list[dict[str, Any]], title: str, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in COLUMNS:
        table.add_column(
            column,
            justify="right" if column in NUMERIC else "left",
            no_wrap=column != "host+path",  # a narrow terminal folds the path, not the numbers
        )
    for r in rows:
        table.add_row(*(_cell(r[c]) for c in COLUMNS))
    Console(file=out).print(table)


def _use_rich(out: TextIO) -> bool:
    if not out.isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _describe_header(path: str, header: dict[str, Any], count: int) -> str:
    created = header.get("created_at")
    when = created.strftime("%Y-%m-%d %H:%M:%S UTC") if isinstance(created, _dt.datetime) else "?"
    parts = [f"{path}: {counted(count, 'interaction')}, recorded {when}"]
    parts.append(f"by agenttape {header.get('agenttape_version', '?')}")
    if header.get("run_id"):
        parts.append(f"run {header['run_id']}")
    git = header.get("git")
    if isinstance(git, dict) and git.get("commit"):
        parts.append(f"git {str(git['commit'])[:10]}{' (dirty)' if git.get('dirty') else ''}")
    if header.get("tags"):
        parts.append("tags " + json.dumps(jsonable(header["tags"]), sort_keys=True))
    title = ", ".join(parts)
    kept = kept_because(header)
    if kept is not None:
        title += f"\n{kept[0].upper()}{kept[1:]}"
    cut = interrupted(header)
    if cut is not None:
        title += (
            f"\nRECORDING CUT SHORT: {cut}; what the code did after that was never recorded. "
            "Record it again to the end."
        )
    return title


def body_lines(
    label: str, headers: Headers, body: bytes, chunks: int | None, *, sort_keys: bool = False
) -> list[str]:
    """A body for reading, under ``label``: JSON pretty (keys sorted with ``sort_keys``, as
    ``textconv`` wants them for a stable text), SSE as numbered events, gRPC messages, text,
    or the first bytes of a binary body."""
    kind, value, note = readable_body(headers, body)
    facts = [f"{len(body)} bytes stored"]
    if chunks is not None:
        facts.append(counted(chunks, "chunk"))
    if note:
        facts.append(note)
    lines = [f"{label} ({kind}; {', '.join(facts)})"]
    if kind == "json":
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=sort_keys)
    elif kind == "sse":
        blocks = []
        for number, event in enumerate(value):
            data = event.pop("data")
            head = " ".join(f"{k}={v}" for k, v in event.items())
            shown = (
                json.dumps(data, ensure_ascii=False, sort_keys=sort_keys)
                if not isinstance(data, str)
                else data
            )
            blocks.append(f"[{number}] {head + ' ' if head else ''}{shown}")
        text = "\n".join(blocks)
    elif kind == "grpc":
        blocks = []
        for number, message in enumerate(value):
            shown = (
                json.dumps(message["fields"], indent=2, ensure_ascii=False, sort_keys=sort_keys)
                if "fields" in message
                else f"<binary> {message['hex']}"
            )
            blocks.append(f"[{number}] message, {message['size']} bytes\n{shown}")
        text = "\n".join(blocks)
    elif kind == "text":
        text = value
    elif kind == "binary":
        text = f"<binary> {value[:48].hex(' ')}{' …' if len(value) > 48 else ''}"
    else:
        return lines
    lines += [f"  {line}" for line in text.splitlines()]
    return lines


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def detail(index: int, interaction: Interaction) -> str:
    request, response, error = interaction.request, interaction.response, interaction.error
    started = (
        interaction.started.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
        if interaction.started_at
        else "-"
    )
    lines = [
        f"#{index} {request.method} {request.url}",
        f"boundary {interaction.boundary}, started {started}, first byte {_ms(interaction.ttfb)}, "
        f"total {_ms(interaction.duration)}",
    ]
    if interaction.injected is not None:
        lines.append(f"injected: {interaction.injected} (a fault's answer, not the network's)")
    fields = llm_fields(interaction)
    if fields:
        lines.append(
            "llm "
            + ", ".join(f"{k} {json.dumps(fields[k])}" for k in LLM_FIELDS if fields[k] is not None)
        )
    lines += ["", "Request headers"] + [f"  {k}: {v}" for k, v in request.headers]
    if request.body:
        lines += body_lines("Request body", request.headers, request.body, None)
    lines.append("")
    if response is not None:
        end = body_end(interaction)
        ending = f" (body {BODY_END_TEXT[end]})" if end is not None and end != "complete" else ""
        lines.append(
            f"Response {response.http_version} {response.status} {response.reason}{ending}"
        )
        lines += [f"  {k}: {v}" for k, v in response.headers]
        lines += body_lines("Response body", response.headers, response.body, len(response.chunks))
        if response.trailers:
            lines += ["Response trailers"] + [f"  {k}: {v}" for k, v in response.trailers]
        call = grpc_wire.summary(interaction)
        if call is not None:
            method, code, details = call
            lines.append(
                f"gRPC {method}: status {grpc_wire.status_name(code)} ({code})"
                + (f": {details}" if details else "")
            )
    lines += frames.lines(interaction)
    if error is not None:
        lines.append(f"Transport error {error.kind}: {error.type}: {error.message}")
    return "\n".join(lines) + "\n"


def _readable_json(headers: Headers, body: bytes) -> dict[str, Any]:
    kind, value, note = readable_body(headers, body)
    if kind == "binary":
        value = base64.b64encode(value).decode("ascii")
    out = {"kind": kind, "value": value, "size": len(body)}
    if note:
        out["note"] = note
    return out


def _detail_json(index: int, interaction: Interaction) -> dict[str, Any]:
    return {
        **row(index, interaction),
        "url": interaction.request.url,
        **exchange_json(interaction, _readable_json),
        "websocket": frames.as_json(interaction),
    }
