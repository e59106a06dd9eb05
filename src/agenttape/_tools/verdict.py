"""``agenttape diff OLD NEW --verdict``: one verdict per interaction of a re-recording
(``identical``, ``benign``, ``response shape changed``, ``request changed``) with the fields
behind it, and ``--fail-on`` to make a class a CI failure. The classes are
``_core.verdict``'s, shared with the re-recording guard and the drift report."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from .._core.errors import AgentTapeError
from .._core.files import read
from .._core.text import counted
from .._core.verdict import FAIL_ON, KINDS, Kind, Verdict, judge
from .cli_usage import arg, flag
from .reading import reading

OPTIONS = (
    flag(
        "--verdict",
        "judge B as a re-recording of A: one verdict per interaction (identical, benign, "
        "response shape changed, request changed) with the fields behind it",
    ),
    arg(
        "--fail-on",
        metavar="CLASSES",
        default="",
        help="with --verdict: exit 1 when one of these occurs, comma-separated: request, "
        "response, benign (e.g. request,response; default: none, exit 0)",
    ),
)
"""``--verdict`` and ``--fail-on`` on ``agenttape diff``."""


def fail_on(text: str) -> set[Kind]:
    """The classes ``--fail-on`` names."""
    classes = set()
    for word in filter(None, (part.strip() for part in text.split(","))):
        if word not in FAIL_ON:
            raise AgentTapeError(f"--fail-on {word!r}: give {', '.join(FAIL_ON)} (comma-separated)")
        classes.add(FAIL_ON[word])
    return classes


def summary(verdicts: list[Verdict]) -> str:
    """``2 identical, 1 benign, 1 request changed``: the classes that occur, most serious
    last."""
    found = [verdict.kind for verdict in verdicts]
    return ", ".join(f"{found.count(kind)} {kind}" for kind in KINDS if kind in found)


def write_verdicts(verdicts: list[Verdict], out: TextIO) -> None:
    """One line per interaction, its verdict at the end, the fields behind it below."""
    for verdict in verdicts:
        out.write(f"#{verdict.index} {verdict.label}: {verdict.kind}\n")
        out.write("".join(f"    {line}\n" for line in verdict.lines()))


def cmd_verdict(args: argparse.Namespace, out: TextIO) -> int:
    if args.ignore:
        raise AgentTapeError("--ignore does not go with --verdict, which judges every field")
    failing = fail_on(args.fail_on)
    _, old = read(args.a)
    _, new = read(args.b)
    with reading(os.path.getsize(args.a), os.path.getsize(args.b)):
        verdicts = judge(old, new)
    out.write(f"OLD {args.a} ({counted(len(old), 'interaction')})\n")
    out.write(f"NEW {args.b} ({counted(len(new), 'interaction')})\n")
    write_verdicts(verdicts, out)
    out.write(f"verdicts: {summary(verdicts)}\n" if verdicts else "no interactions\n")
    failed = sorted({v.kind for v in verdicts} & failing, key=KINDS.index)
    if failed:
        out.write(f"failing on: {', '.join(failed)} (--fail-on {args.fail_on})\n")
        return 1
    return 0
