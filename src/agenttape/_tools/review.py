"""``agenttape rerecord --review``: walk a re-recording's changes one cassette at a time, as
inline-snapshot's review does, and keep or undo each.

A re-recording leaves ``<stem>.previous.msgpack`` beside each cassette it replaced (and
``<stem>.new.msgpack`` where it failed and kept the old one). For each pair the review shows
the verdict of every interaction that changed and asks: accept keeps the new recording,
reject restores the old one, ``d`` shows the two as text side by side in a unified diff,
skip leaves both files for later. ``--accept-benign`` accepts, without asking, a cassette in
which nothing worse than ``benign`` changed; one that did not change at all is accepted
always. Every change of a file is atomic (a rename, or a write through a temporary file).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .._core.errors import AgentTapeError
from .cli_usage import arg, command, flag

PROMPT = (
    "accept the new recording (a), reject it and restore the old (r), show the text diff "
    "(d), skip (s), quit (q)? "
)


@dataclass(slots=True)
class Pending:
    """A cassette with a re-recording to decide: ``current`` is the file tests replay;
    ``other`` the file beside it; ``new_beside`` says which of the two is the new one."""

    current: Path
    other: Path
    new_beside: bool

    @property
    def old(self) -> Path:
        return self.current if self.new_beside else self.other

    @property
    def new(self) -> Path:
        return self.other if self.new_beside else self.current

    def accept(self) -> None:
        if self.new_beside:
            os.replace(self.other, self.current)
        else:
            self.other.unlink()

    def reject(self) -> None:
        if self.new_beside:
            self.other.unlink()
        else:
            os.replace(self.other, self.current)


def pending(paths: list[str]) -> list[Pending]:
    """Every cassette under ``paths`` with a ``.previous`` or ``.new`` file beside it."""
    found = []
    for name in paths:
        root = Path(name)
        if not root.exists():
            raise AgentTapeError(f"{name} does not exist")
        files = [root] if root.is_file() else sorted(root.rglob("*.msgpack"))
        for path in files:
            for kind, new_beside in (("previous", False), ("new", True)):
                suffix = f".{kind}.msgpack"
                if path.name.endswith(suffix):
                    current = path.with_name(path.name[: -len(suffix)] + ".msgpack")
                    if current.exists():
                        found.append(Pending(current, path, new_beside))
    return found


def _text_diff(item: Pending) -> str:
    from .._core.files import read
    from .textconv import text

    old, new = (text(*read(path)).splitlines(keepends=True) for path in (item.old, item.new))
    return "".join(difflib.unified_diff(old, new, f"{item.old} (old)", f"{item.new} (new)"))


def review(
    items: list[Pending], accept_benign: bool, ask: Callable[[str], str], out: TextIO
) -> dict[str, int]:
    """Walks ``items``, asking ``ask`` about each that changed; returns what was done."""
    from .._core.files import read
    from .._core.verdict import BENIGN, IDENTICAL, KINDS, judge
    from .reading import reading
    from .verdict import summary

    done = {"accepted": 0, "rejected": 0, "skipped": 0}
    for number, item in enumerate(items, 1):
        _header, old = read(item.old)
        _header, new = read(item.new)
        with reading(item.old.stat().st_size, item.new.stat().st_size):
            verdicts = judge(old, new)
        worst = max((v.kind for v in verdicts), key=KINDS.index, default=IDENTICAL)
        out.write(f"[{number}/{len(items)}] {item.current}: {worst} ({summary(verdicts)})\n")
        if worst == IDENTICAL or (accept_benign and worst == BENIGN):
            item.accept()
            done["accepted"] += 1
            out.write("  accepted: nothing worse than benign changed\n")
            continue
        for verdict in verdicts:
            if verdict.kind != IDENTICAL:
                out.write(f"  #{verdict.index} {verdict.label}: {verdict.kind}\n")
                out.write("".join(f"      {line}\n" for line in verdict.lines()))
        answer = ask(PROMPT).strip().lower()[:1]
        while answer not in ("a", "r", "s", "q", ""):  # "" is the end of the input
            if answer == "d":
                out.write(_text_diff(item) or "(the two read the same as text)\n")
            answer = ask(PROMPT).strip().lower()[:1]
        if answer == "a":
            item.accept()
            done["accepted"] += 1
            out.write(f"  accepted: {item.current} holds the new recording\n")
        elif answer == "r":
            item.reject()
            done["rejected"] += 1
            out.write(f"  rejected: {item.current} holds the old recording again\n")
        else:
            done["skipped"] += 1
            out.write("  skipped: both files left as they are\n")
            if answer in ("q", ""):
                done["skipped"] += len(items) - number
                break
    return done


def cmd_rerecord(args: argparse.Namespace, out: TextIO) -> int:
    if not args.review:
        raise AgentTapeError(
            "give --review: re-record first (pytest --agenttape-record, or AGENTTAPE_MODE=all), "
            "then review what changed with agenttape rerecord --review"
        )
    items = pending(args.paths)
    if not items:
        out.write("nothing to review: no <stem>.previous.msgpack or <stem>.new.msgpack found\n")
        return 0

    def ask(prompt: str) -> str:
        out.write(prompt)
        out.flush()
        try:
            answer = input()
        except EOFError:
            out.write("\n")
            return ""
        if not sys.stdin.isatty():
            out.write(answer + "\n")  # what a terminal would have echoed, for the log
        return answer

    done = review(items, args.accept_benign, ask, out)
    out.write(
        f"accepted {done['accepted']}, rejected {done['rejected']}, skipped {done['skipped']}\n"
    )
    return 0


COMMANDS = (
    command(
        "rerecord",
        cmd_rerecord,
        arg("paths", nargs="*", default=["."], metavar="PATH", help="default: the current folder"),
        flag("--review", "walk the changes one by one, asking about each"),
        flag("--accept-benign", "accept without asking where nothing worse than benign changed"),
        help="review a re-recording cassette by cassette: accept the new, or restore the old",
        description=(
            "Walk the cassettes under PATH that a re-recording replaced (the old one kept as "
            "<stem>.previous.msgpack) or kept (the new one as <stem>.new.msgpack): show the "
            "verdict of each changed interaction and ask whether to accept the new recording "
            "or restore the old one."
        ),
    ),
)
