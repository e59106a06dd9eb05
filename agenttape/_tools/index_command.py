"""``agenttape index``: keep up the run index a Recorder writes beside its runs."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .._core.errors import AgentTapeError
from .._core.text import counted
from .commands import PROG, STORE_HELP, Parser, UsageError, command


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    raise UsageError(f"give an action: rebuild or compact (see '{PROG} index --help')")


def cmd_index_rebuild(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.stored_runs import parse_since, rebuild_index

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
    return 0


def cmd_index_compact(args: argparse.Namespace, out: TextIO) -> int:
    from .._production.stored_runs import compact_index

    done = compact_index(args.store)
    out.write(
        f"merged {counted(done.files, 'index file')} into one per day for "
        f"{counted(done.days, 'day')} ({counted(done.rows, 'run')})\n"
    )
    if done.skipped:
        day, reason = done.skipped[0]
        raise AgentTapeError(
            f"{counted(len(done.skipped), 'day')} not compacted: an index file of {day} cannot "
            f"be read ({reason}); rebuild with: agenttape index rebuild {args.store} --since {day}"
        )
    return 0


def register(commands: Any) -> None:
    """Adds ``index`` and its actions to the command line."""
    index = command(
        commands,
        "index",
        cmd_index,
        help="the run index of a STORE (Parquet by day, for agenttape runs and any SQL engine)",
        description=(
            "Maintain the run index a Recorder writes beside the runs: "
            "STORE/_index/date=YYYY-MM-DD/*.parquet. Needs pip install "
            "'agenttape-recorder[index]'."
        ),
    )
    actions = index.add_subparsers(dest="index_action", metavar="ACTION", parser_class=Parser)
    rebuild = command(
        actions,
        "rebuild",
        cmd_index_rebuild,
        help="index the run files again: for runs written before the index, or a lost batch",
    )
    rebuild.add_argument("store", metavar="STORE", help=STORE_HELP)
    rebuild.add_argument(
        "--since", metavar="T", help="only the days from T's on: 30m, 2h, 7d, 1w or an ISO date"
    )
    compact = command(
        actions,
        "compact",
        cmd_index_compact,
        help="merge each day's small index files into one, atomically",
    )
    compact.add_argument("store", metavar="STORE", help=STORE_HELP)
