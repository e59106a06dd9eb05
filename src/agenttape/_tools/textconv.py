"""``agenttape textconv``: a cassette as stable, line-based text, for ``git diff``.

msgpack is a binary blob to git (``Binary files differ``). Given as git's ``textconv`` for
cassettes (``agenttape init-git``), this text makes ``git diff``, ``git log -p`` and a
reviewer's local checkout show what a re-recording changed: one block per interaction, the
request line, headers in their order with secrets redacted, bodies decoded for reading (JSON
pretty with sorted keys where the bytes are JSON, SSE as events, gRPC messages, WebSocket
frames), then the response the same way. Nothing that varies between two printings of the
same file is printed (no durations or offsets, which change on every recording and would
bury what matters): the same cassette gives the same bytes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
from typing import Any, TextIO

from .._core.models import Frame, Headers, Interaction
from .._core.text import counted, interrupted
from .cli_usage import command, operands


def text(header: dict[str, Any], interactions: list[Interaction]) -> str:
    """The text form of a cassette: a header line, then one block per interaction."""
    created = header.get("created_at")
    when = created.strftime("%Y-%m-%d %H:%M:%S UTC") if isinstance(created, _dt.datetime) else "?"
    lines = [
        f"agenttape cassette: {counted(len(interactions), 'interaction')}, recorded {when} "
        f"by agenttape {header.get('agenttape_version', '?')}"
    ]
    cut = interrupted(header)
    if cut is not None:
        lines.append(f"recording cut short: {cut}")
    for index, interaction in enumerate(interactions):
        lines.append("")
        lines += block(index, interaction)
    return "\n".join(lines) + "\n"


def block(index: int, interaction: Interaction) -> list[str]:
    """One interaction: ``>`` lines are what the client sent, ``<`` what came back."""
    from .._core.redaction import Redactor
    from .frames import ARROWS, ending
    from .reading import status_text

    redactor = Redactor.from_rules(None)
    request = redactor.request(interaction.request)
    lines = [
        f"=== #{index} {interaction.boundary} {request.method} {request.url}",
        f"    status {status_text(interaction)}",
    ]
    if interaction.injected is not None:
        lines.append(f"    injected: {interaction.injected}")
    lines += [f"> {name}: {value}" for name, value in request.headers]
    lines += _body(">", "request body", request.headers, request.body)
    response = interaction.response
    if response is not None:
        lines.append(f"< {response.http_version} {response.status} {response.reason}".rstrip())
        headers = redactor.response_headers(response.headers)
        lines += [f"< {name}: {value}" for name, value in headers]
        lines += _body("<", "response body", headers, response.body)
        lines += [f"< trailer {name}: {value}" for name, value in response.trailers]
    if interaction.frames is not None:
        lines.append(
            f"~ websocket: {counted(len(interaction.frames), 'frame')}, {ending(interaction)}"
        )
        for number, frame in enumerate(interaction.frames):
            lines.append(f"~ [{number}] {ARROWS[frame.direction]} {frame.opcode} {_frame(frame)}")
    error = interaction.error
    if error is not None:
        lines.append(f"! {error.kind}: {error.type}: {error.message}")
    return lines


def _body(mark: str, label: str, headers: Headers, body: bytes) -> list[str]:
    """A body for reading, with its digest: a change past what is shown still shows."""
    from .show import body_lines

    if not body:
        return []
    digest = hashlib.sha256(body).hexdigest()[:16]
    first, *rest = body_lines(label, headers, body, None, sort_keys=True)
    return [f"{mark} {first[:-1]}, sha256 {digest})"] + [f"{mark} {line}" for line in rest]


def _frame(frame: Frame) -> str:
    """A frame's payload whole: JSON with sorted keys, text as is, binary in hex."""
    from .reading import parse_json

    if frame.opcode in ("text", "continuation"):
        is_json, document = parse_json(frame.payload)
        if is_json:
            return json.dumps(document, ensure_ascii=False, sort_keys=True)
        return frame.payload.decode("utf-8", "replace")
    return f"{len(frame.payload)} bytes {frame.payload.hex(' ')}"


def cmd_textconv(args: argparse.Namespace, out: TextIO) -> int:
    from .._core.files import read
    from .reading import reading

    header, interactions = read(args.cassette)
    with reading(os.path.getsize(args.cassette)):
        out.write(text(header, interactions))
    return 0


COMMANDS = (
    command(
        "textconv",
        cmd_textconv,
        *operands("cassette"),
        help="a cassette as stable text, for git diff (see agenttape init-git)",
        description=(
            "Print CASSETTE as stable, line-based text: one block per interaction, the "
            "request line, headers with secrets redacted, bodies decoded for reading (JSON "
            "with sorted keys, SSE events, gRPC messages, WebSocket frames), then the "
            "response. The same cassette always gives the same bytes."
        ),
    ),
)
