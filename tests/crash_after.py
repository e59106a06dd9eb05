"""Run ``agenttape ARGS`` and kill it (SIGKILL: no cleanup of any kind) just before its Nth
change to the store: ``CRASH_AFTER=N python tests/crash_after.py runs delete STORE ...``.
Counts every write, conditional create and delete of a run file, index file, tombstone or
claim, so a test can kill a command at each of its steps in turn. ``CRASH_AFTER=0`` never
kills, and the command prints how many changes it made on stderr. ``PAUSE_BEFORE=N:SECONDS``
(``PAUSE_AFTER``) sleeps before (after) the Nth change instead; ``CLOCK_OFFSET=SECONDS`` sets the process's clock off.
tests/command_server.py imports it once and arms it in each child it forks."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from agenttape._production.s3_store import S3Store
from agenttape._production.store import FsspecStore, LocalStore
from agenttape._tools.cli import main

LIMIT = 0
# PAUSE_BEFORE=N:SECONDS (PAUSE_AFTER=...) sleeps that long before (after) the Nth change,
# having said "paused" on stderr: another process acts then.
PAUSES: dict[str, tuple[float, ...]] = {}
changes = 0


def pause(when: str) -> None:
    at, seconds = PAUSES[when]
    if changes == at:
        sys.stderr.write("paused\n")
        sys.stderr.flush()
        time.sleep(seconds)


def counted(method: Callable[..., Any]) -> Callable[..., Any]:
    def change(*args: Any, **kwargs: Any) -> Any:
        global changes
        changes += 1
        if changes == LIMIT:
            os.kill(os.getpid(), signal.SIGKILL)
        pause("before")
        done = method(*args, **kwargs)
        pause("after")
        return done

    return change


def arm(arguments: list[str]) -> None:
    """Count this process's changes to a store from now on, as the environment says."""
    global LIMIT
    LIMIT = int(os.environ.get("CRASH_AFTER", "0"))
    PAUSES.update(
        (when, tuple(float(part) for part in os.environ.get(name, "0:0").split(":")))
        for when, name in (("before", "PAUSE_BEFORE"), ("after", "PAUSE_AFTER"))
    )
    # A local folder's delete_many deletes one file at a time (each counted); an object
    # store's deletes a thousand in one request. On an object store, the local copies a reader
    # makes of index files are not changes to the store.
    remote = any("://" in argument for argument in arguments)
    for store_class, names in (
        (LocalStore, () if remote else ("write", "create", "delete")),
        (FsspecStore, ("write", "create", "delete", "delete_many")),
        (S3Store, ("write", "create", "delete", "delete_many")),
    ):
        for name in names:
            setattr(store_class, name, counted(getattr(store_class, name)))


def run(arguments: list[str]) -> int:
    """The command, then how many changes it made, on stderr."""
    # CLOCK_OFFSET=SECONDS: this process's clock (time.time, datetime.now) is that far off,
    # as a host's whose clock is wrong; the store's own times are not.
    if os.environ.get("CLOCK_OFFSET"):
        import time_machine

        offset = float(os.environ["CLOCK_OFFSET"])
        time_machine.travel(time.time() + offset, tick=True).start()
    code = main(arguments)
    sys.stderr.write(f"changes: {changes}\n")
    return code


if __name__ == "__main__":
    arm(sys.argv[1:])
    sys.exit(run(sys.argv[1:]))
