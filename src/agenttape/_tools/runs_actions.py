"""``agenttape runs delete`` and ``agenttape runs mark``: acting on the runs a Recorder kept.

``agenttape runs STORE`` lists runs, so these actions are a parser of their own that the
command line reaches when the word after ``runs`` is one of them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from .._core.errors import AgentTapeError
from .._core.text import counted
from .cli_usage import Parser, arg, command, flag, moment, operands, repeated

ACTIONS = ("delete", "mark")


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.durations import parse_since
    from .._production.run_deletion import delete_runs
    from .runs_table import format_runs, parse_tags

    try:
        tags = parse_tags(args.tag)
        before = None if args.before is None else parse_since(args.before)
        done = delete_runs(
            args.store, tags=tags, before=before, run_ids=args.run_ids, dry_run=args.dry_run
        )
    except ValueError as exc:
        raise AgentTapeError(str(exc)) from None
    if done.runs:
        out.write(format_runs(done.runs) + "\n")
    if done.finished:
        out.write(f"finished {counted(done.finished, 'earlier deletion')} left half done\n")
    if args.dry_run:
        out.write(f"would delete {counted(len(done.runs), 'run')} (dry run: nothing removed)\n")
        return 0
    out.write(
        f"deleted {counted(done.files, 'run')}: {counted(done.files, 'run file')} and "
        f"{counted(done.rows, 'index row')} removed\n"
    )
    if done.busy:
        sys.stderr.write(
            f"agenttape runs delete: the index of {counted(len(done.busy), 'day')} was being "
            f"rewritten by another host (or not published in time); the deleted runs stay hidden, and the next "
            f"'agenttape index compact {args.store}' removes their rows\n"
        )
    return 0


STORE = arg("store", metavar="STORE", help="a folder, or an fsspec URL such as s3://b/p")
"""The STORE every command on kept runs takes first."""


def cmd_mark(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.marking import mark_cold

    info = mark_cold(args.store, args.run_id, args.cold)
    out.write(f"marked run {info.run_id} a cold case: {args.cold}\n")
    return 0


ACTION_COMMANDS = (
    command(
        "delete",
        cmd_delete,
        STORE,
        arg("run_ids", metavar="RUN_ID", nargs="*", help="runs to delete by id"),
        repeated("--tag", "K=V", "the runs tagged so (repeatable; all must match)"),
        moment("--before", "the runs created before T: 90d, 2w ago, or an ISO date/time"),
        flag("--dry-run", "list what would be deleted, remove nothing"),
        help="delete runs and their index rows (erasure, retention), crash-safe",
        description=(
            "Delete runs: their files and their rows in the run index, together. A tombstone "
            "is written first, so a deletion killed mid-way is finished by the next delete, "
            "'agenttape index compact' or 'agenttape index rebuild', and a deleted run is "
            "never listed again."
        ),
    ),
    command(
        "mark",
        cmd_mark,
        STORE,
        *operands("run_id"),
        arg("--cold", metavar="WHY", required=True, help="why it is a cold case"),
        help="mark a run a cold case: one that cannot be replayed, with what was still seen",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """``agenttape runs ACTION …``, a parser of its own (``agenttape runs STORE`` lists)."""
    parser = Parser(prog="agenttape")
    commands = parser.add_subparsers(dest="command_name", parser_class=Parser)
    runs = commands.add_parser("runs", help="act on the runs a Recorder kept")
    actions = runs.add_subparsers(dest="runs_action", metavar="ACTION", parser_class=Parser)
    for action in ACTION_COMMANDS:
        action.declare(actions)
    return parser


def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    """``agenttape runs STORE --by …``: the groups where runs cluster, ranked."""
    from pathlib import Path

    from .._production.durations import parse_since
    from .._production.stored_runs import list_runs
    from .run_groups import format_ranking, parse_by, rank, to_html, to_json
    from .runs_table import parse_tags

    try:
        dimensions = parse_by(args.by)
        tags = parse_tags(args.tag)
        since = None if args.since is None else parse_since(args.since)
    except ValueError as exc:
        raise AgentTapeError(str(exc)) from None
    runs = list_runs(args.store, tags=tags, since=since)
    ranking = rank(runs, dimensions, args.errors)
    if args.html:
        Path(args.html).write_text(to_html(ranking, args.store), encoding="utf-8")
        out.write(f"wrote {args.html}\n")
    elif args.json:
        out.write(to_json(ranking) + "\n")
    else:
        out.write(format_ranking(ranking, args.errors) + "\n")
    return 0


GROUP_OPTIONS = (
    arg(
        "--by",
        metavar="DIMS",
        help="count runs per group (model, hour, status, tag:KEY; comma-separated) and rank "
        "the groups that stand out against the store's base rate; cold cases beside",
    ),
    arg("--html", metavar="OUT.html", help="with --by: a page charting the top groups by hour"),
)
"""``--by`` and ``--html`` for ``agenttape runs STORE``."""


def busy_note(busy: list[str]) -> str:
    """What ``index compact`` adds for days another process was compacting."""
    if not busy:
        return ""
    return f"; {counted(len(busy), 'day')} left to another compaction already at work"


def is_action(argv: list[str]) -> bool:
    """``argv`` is ``runs ACTION …`` rather than ``runs STORE …``."""
    return argv[:1] == ["runs"] and argv[1:2] != [] and argv[1] in ACTIONS
