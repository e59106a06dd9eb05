"""The ``agenttape`` commands over a store of kept runs: ``runs`` lists them, ``fetch`` copies
one out to replay as a test, ``index rebuild`` and ``index compact`` keep their index."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TextIO

from .._core.errors import AgentTapeError
from .._core.text import counted
from . import runs_actions
from .cli_usage import JSON, PROG, UsageError, arg, command, flag, moment, operands, repeated
from .runs_actions import STORE


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.durations import parse_since
    from .._production.stored_runs import list_runs
    from .runs_table import format_runs, parse_tags

    if args.by is not None or args.html:
        return runs_actions.cmd_groups(args, out)
    try:
        tags = parse_tags(args.tag)
        since = None if args.since is None else parse_since(args.since)
    except ValueError as exc:
        raise UsageError(f"{exc}") from None
    runs = list_runs(args.store, tags=tags, since=since, errors=args.errors, warn=_warn("runs"))
    if args.json:
        json.dump([info.to_dict() for info in runs], out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(format_runs(runs) + "\n")
    return 0


def cmd_fetch(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.run import RUN_ID
    from .._production.stored_runs import fetch_run

    if not RUN_ID.fullmatch(args.run_id):
        raise UsageError(f"{args.run_id!r} is not a run id")
    target = fetch_run(args.store, args.run_id, args.output, force=args.force)
    out.write(
        f"copied run {args.run_id} to {target}; replay it with use_cassette({str(target)!r})\n"
    )
    return 0


def _warn(command: str) -> Callable[[str], None]:
    def warn(message: str) -> None:
        sys.stderr.write(f"{PROG} {command}: warning: {message}\n")

    return warn


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    raise UsageError(f"give an action: rebuild, compact or status (see '{PROG} index --help')")


def cmd_index_rebuild(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.durations import parse_since
    from .._production.index.rebuild import rebuild_index

    try:
        since = None if args.since is None else parse_since(args.since)
    except ValueError as exc:
        raise UsageError(f"{exc}") from None
    done = rebuild_index(args.store, since=since)
    unreadable = (
        f", {counted(done.unreadable, 'unreadable file')} among them" if done.unreadable else ""
    )
    out.write(
        f"indexed {counted(done.runs, 'run')} in {counted(done.days, 'day')}{unreadable}; "
        f"replaced {counted(done.replaced, 'index file')}\n"
    )
    if done.late:
        from .._production.index.compaction import late_message

        again = f"{PROG} index rebuild {args.store} --since {done.late[0]}"
        raise AgentTapeError(late_message(args.store, done.late, again))
    return 0


def cmd_index_status(args: argparse.Namespace, out: TextIO) -> int:
    from .._production import deletions
    from .._production.index import claims, listing
    from .._production.store import open_store

    store = open_store(args.store)
    path = claims.write_path(store)
    how = (
        "conditional writes (each day claimed under _claims/ before it is rewritten)"
        if path.conditional
        else "fragments and manifests (no day is claimed; nothing is overwritten)"
    )
    files = listing.index_files(store)
    stones = deletions.tombstones(store)
    out.write(
        f"{store.url}: compactions, deletions and rebuilds go through {how}; {path.why}\n"
        f"index: {counted(len(files), 'file')} read over "
        f"{counted(len({found.day for found in files}), 'day')}; "
        f"{counted(len(stones), 'deletion')} on record, "
        f"{sum(not stone.done for stone in stones)} not finished\n"
    )
    return 0


def cmd_index_compact(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.stored_runs import compact_index

    done = compact_index(args.store)
    out.write(
        f"merged {counted(done.files, 'index file')} into one per day for "
        f"{counted(done.days, 'day')} ({counted(done.rows, 'run')})"
        f"{runs_actions.busy_note(done.busy)}\n"
    )
    if done.by_manifests:
        out.write(
            "this store has no conditional writes: days published by manifests; "
            f"{counted(done.collected, 'replaced file')} deleted after the grace period\n"
        )
    if done.late:
        from .._production.index.compaction import late_message

        raise AgentTapeError(late_message(args.store, done.late, f"{PROG} index compact"))
    if done.skipped:
        day, reason = done.skipped[0]
        raise AgentTapeError(
            f"{counted(len(done.skipped), 'day')} not compacted: an index file of {day} cannot "
            f"be read ({reason}); rebuild with: agenttape index rebuild {args.store} --since {day}"
        )
    return 0


STORE_COMMANDS = (
    command(
        "runs",
        cmd_runs,
        STORE,
        repeated("--tag", "K=V", "only runs tagged so (repeatable)"),
        moment("--since", "only runs since T: 30m, 2h, 7d or 1w ago, or an ISO date/time"),
        flag("--errors", "only runs that raised, failed a call or were flagged"),
        JSON,
        *runs_actions.GROUP_OPTIONS,
        help="list the runs a Recorder kept in STORE, newest first, with tags and status",
    ),
    command(
        "index",
        cmd_index,
        help="the run index of a STORE (Parquet by day, for agenttape runs and any SQL engine)",
        description=(
            "Maintain the run index a Recorder writes beside the runs: "
            "STORE/_index/date=YYYY-MM-DD/*.parquet. Needs pip install "
            "'agenttape-recorder[index]'."
        ),
        actions=(
            command(
                "rebuild",
                cmd_index_rebuild,
                STORE,
                moment("--since", "only the days from T's on: 30m, 2h, 7d, 1w or an ISO date"),
                help="index the run files again: for runs written before the index, or a lost batch",
            ),
            command(
                "status",
                cmd_index_status,
                STORE,
                help="say whether STORE is written through conditional writes or manifests, and why",
            ),
            command(
                "compact",
                cmd_index_compact,
                STORE,
                help="merge each day's small index files into one, atomically",
            ),
        ),
    ),
    command(
        "fetch",
        cmd_fetch,
        STORE,
        *operands("run_id"),
        arg("output", metavar="OUT.msgpack"),
        flag("--force", "overwrite OUT.msgpack if it exists"),
        help="copy one run out of STORE to replay it as a test",
    ),
)
"""``runs``, ``index`` and ``fetch``."""
