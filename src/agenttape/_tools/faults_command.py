"""``agenttape faults CASSETTE``: which faults each recorded interaction can be given, and the
few most telling ones written out ready to paste, as ``--fault`` text and as
``agenttape.fault(...)`` lines.

What applies follows from what the interaction is: any HTTP exchange can be rate-limited, fail
on the server, time out, be reset or refused, or be slow; a call to an LLM API can also be
overloaded; a JSON body can arrive malformed; a stream can be cut; a WebSocket session can be
closed by the server with a code; a gRPC call can end with a status. The proposals are the
failures agents meet first in production: the first call rate-limited, the longest stream cut
mid-answer, each tool host down (one that serves no LLM calls), the realtime session dropped,
the gRPC service unavailable.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlsplit

from .._core.bodies import is_sse, parse_json
from .._core.faults import Fault, FaultKind, fault, fault_to_json
from .._core.faults.spec import fault_to_python, fault_to_text
from .._core.files import read
from .._core.models import Interaction
from .._core.text import counted
from .._core.wire import grpc as grpc_wire
from .cli_usage import JSON, command, operands
from .reading import reading, where

HTTP_KINDS = ("rate_limit", "server_error", "status", "slow", "timeout", "reset", "refused")
"""What any HTTP exchange can meet."""

RETRY_AFTER = 30
"""The ``retry-after`` a proposed rate limit asks for: longer than most agents' own timeouts,
which is what shows a retry loop that does not honour it."""


@dataclass(slots=True)
class Applicable:
    """One interaction: what it is, and the fault kinds that apply to it."""

    index: int
    method: str
    where: str
    answer: str
    kinds: tuple[str, ...]


@dataclass(slots=True)
class Proposal:
    """A telling fault, why, and the interaction it lands on."""

    title: str
    index: int
    fault: Fault


def is_grpc(interaction: Interaction) -> bool:
    return interaction.request.url.startswith(grpc_wire.SCHEMES)


def _chunks(interaction: Interaction) -> int:
    response = interaction.response
    return len(response.chunks) if response is not None else 0


def _is_stream(interaction: Interaction) -> bool:
    response = interaction.response
    if response is None or interaction.frames is not None:
        return False
    return is_sse(response.headers) or _chunks(interaction) > 1


def _is_json(interaction: Interaction) -> bool:
    response = interaction.response
    if response is None or not response.body:
        return False
    content_type = (response.header("content-type") or "").lower()
    return "json" in content_type or parse_json(response.body)[0]


def applicable(index: int, interaction: Interaction) -> Applicable:
    """The fault kinds that apply to ``interaction``, and what it is in a few words."""
    request = interaction.request
    if is_grpc(interaction):
        kinds: tuple[str, ...] = ("grpc_status",)
        answer = "grpc call"
    elif interaction.frames is not None:
        kinds = ("close", "refused", "reset", "timeout")
        answer = f"websocket, {counted(len(interaction.frames), 'frame')}"
    else:
        found = list(HTTP_KINDS)
        if interaction.llm is not None:
            found.insert(1, "overloaded")
        if _is_json(interaction):
            found.append("malformed")
        if _is_stream(interaction):
            found.append("cut_stream")
            answer = f"stream, {counted(_chunks(interaction), 'chunk')}"
        elif interaction.response is None:
            error = interaction.error
            answer = f"failed ({error.kind})" if error is not None else "no response"
        else:
            answer = "json" if _is_json(interaction) else "body"
        kinds = tuple(found)
    return Applicable(index, request.method, where(request), answer, kinds)


def pattern(interaction: Interaction) -> str:
    """The request pattern ``on=`` that matches ``interaction``'s method, host and path."""
    request = interaction.request
    parts = urlsplit(request.url)
    host = parts.netloc.rpartition("@")[2]
    return f"{request.method} {host}{parts.path or '/'}"


def origin_of(interaction: Interaction) -> str:
    """``host:port/*``: every request to the server ``interaction`` went to (``host=``
    would take in other servers on the same host, other ports)."""
    return f"{urlsplit(interaction.request.url).netloc.rpartition('@')[2]}/*"


def propose(interactions: list[Interaction]) -> list[Proposal]:
    """The telling faults for a cassette, each aimed at one interaction (``nth`` counts the
    requests its pattern matches, in recorded order)."""
    seen: Counter[str] = Counter()
    nth: list[int] = []
    for interaction in interactions:
        seen[pattern(interaction)] += 1
        nth.append(seen[pattern(interaction)])
    proposals: list[Proposal] = []
    http = [
        i
        for i, interaction in enumerate(interactions)
        if not is_grpc(interaction) and interaction.frames is None
    ]

    def aimed(title: str, i: int, kind: FaultKind, **options: Any) -> None:
        """A fault that fires on interaction ``i`` alone: its pattern, at its count."""
        item = fault(kind, on=pattern(interactions[i]), nth=nth[i], **options)
        proposals.append(Proposal(title, i, item))

    llm = [i for i in http if interactions[i].llm is not None]
    if llm or http:
        aimed("first call rate-limited", (llm or http)[0], "rate_limit", retry_after=RETRY_AFTER)
    streams = [i for i in http if _is_stream(interactions[i])]
    if streams:
        longest = max(streams, key=lambda i: (_chunks(interactions[i]), -i))
        title = "longest stream cut mid-answer"
        after_chunks = max(1, _chunks(interactions[longest]) // 2)
        aimed(title, longest, "cut_stream", after_chunks=after_chunks)
    for origin, i in _tool_hosts(interactions, http).items():
        title = f"tool host {origin[:-2]} down"
        proposals.append(Proposal(title, i, fault("refused", on=origin)))
    for i, interaction in enumerate(interactions):
        frames = interaction.frames
        if frames is None:
            continue
        served = sum(1 for frame in frames if frame.direction == "server")
        title = "WebSocket session closed by the server mid-session"
        aimed(title, i, "close", after_frames=max(1, served // 2), code=1011)
    services: dict[str, int] = {}
    for i, interaction in enumerate(interactions):
        if is_grpc(interaction):
            services.setdefault(origin_of(interaction), i)
    for origin, i in services.items():
        title = f"gRPC service {origin[:-2]} unavailable"
        proposals.append(Proposal(title, i, fault("grpc_status", on=origin, code="UNAVAILABLE")))
    return proposals


def _tool_hosts(interactions: list[Interaction], http: list[int]) -> dict[str, int]:
    """Each server that answered tool (non-LLM) calls alone, with its first one: refusing a
    server that also serves the LLM calls (a local stand-in) would take the LLM down too."""
    llm = {origin_of(interactions[i]) for i in http if interactions[i].llm is not None}
    tools: dict[str, int] = {}
    for i in http:
        origin = origin_of(interactions[i])
        if interactions[i].llm is None and origin not in llm:
            tools.setdefault(origin, i)
    return tools


def shared_hosts(interactions: list[Interaction]) -> list[str]:
    """The servers that answered both tool and LLM calls: no "tool host down" fits them."""
    http = [i for i, x in enumerate(interactions) if not is_grpc(x) and x.frames is None]
    kinds: dict[str, set[bool]] = {}
    for i in http:
        kinds.setdefault(origin_of(interactions[i]), set()).add(interactions[i].llm is None)
    return [origin for origin, seen in kinds.items() if seen == {True, False}]


def cmd_faults(args: argparse.Namespace, out: TextIO) -> int:
    _, interactions = read(args.cassette)
    with reading(os.path.getsize(args.cassette)):
        rows = [applicable(i, interaction) for i, interaction in enumerate(interactions)]
        proposals = propose(interactions)
        shared = shared_hosts(interactions)
    if args.json:
        document = _document(args.cassette, rows, proposals, shared)
        json.dump(document, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 0
    out.write(f"{args.cassette}: {counted(len(rows), 'interaction')}\n")
    columns = ("n", "method", "host+path", "answer", "faults that apply")
    cells = [(str(r.index), r.method, r.where, r.answer, ", ".join(r.kinds)) for r in rows]
    widths = [max([len(c), *(len(line[k]) for line in cells)]) for k, c in enumerate(columns)]
    for line in [columns, *cells]:
        out.write("  ".join(cell.ljust(widths[k]) for k, cell in enumerate(line)).rstrip() + "\n")
    for origin in shared:
        out.write(f"\nno tool host down proposed for {origin[:-2]}: {_SHARED}\n")
    if not proposals:
        return 0
    out.write("\nproposed (paste one into agenttape run/proxy, or use_cassette(faults=[...])):\n")
    for proposal in proposals:
        out.write(f"\n  {proposal.title} (interaction {proposal.index}):\n")
        out.write(f"    --fault {shlex.quote(fault_to_text(proposal.fault))}\n")
        out.write(f"    {fault_to_python(proposal.fault)}\n")
    return 0


_SHARED = "it serves the LLM calls too (refuse the tool's own path with on='METHOD host/path')"


def _document(
    path: str, rows: list[Applicable], proposals: list[Proposal], shared: list[str]
) -> dict[str, Any]:
    return {
        "cassette": path,
        "shared_hosts": {origin[:-2]: _SHARED for origin in shared},
        "interactions": [
            {
                "n": r.index,
                "method": r.method,
                "host+path": r.where,
                "answer": r.answer,
                "kinds": list(r.kinds),
            }
            for r in rows
        ],
        "proposals": [
            {
                "title": p.title,
                "interaction": p.index,
                "fault": fault_to_json(p.fault),
                "cli": f"--fault {shlex.quote(fault_to_text(p.fault))}",
                "python": fault_to_python(p.fault),
            }
            for p in proposals
        ],
    }


COMMANDS = (
    command(
        "faults",
        cmd_faults,
        *operands("cassette"),
        JSON,
        help="the faults each interaction can be given, and the telling ones ready to paste",
        description=(
            "List each interaction of CASSETTE with the fault kinds that apply to it (a "
            "stream can be cut, a JSON body malformed, any HTTP exchange rate-limited, "
            "failed or timed out, a WebSocket session closed, a gRPC call given a status), "
            "then propose the telling ones (the first call rate-limited, the longest stream "
            "cut mid-answer, each tool host down) as --fault text for agenttape run and "
            "proxy and as agenttape.fault(...) lines."
        ),
    ),
)
