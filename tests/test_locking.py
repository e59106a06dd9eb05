from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agenttape import CassetteWriteError
from agenttape._core import locking


def hold_in_turn(path: Path) -> list[str]:
    """Two threads take the lock for one cassette; returns the order of events."""
    events: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with locking.locked(path):
            events.append("first in")
            first_in.set()
            time.sleep(0.2)
            events.append("first out")

    def second() -> None:
        first_in.wait()
        with locking.locked(path):
            events.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return events


def test_one_holder_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "cassettes" / "tape.msgpack"
    assert hold_in_turn(path) == ["first in", "first out", "second in"]
    assert list(path.parent.iterdir()) == []  # nothing left behind


def test_lock_file_where_directories_cannot_be_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locking, "fcntl", None)
    path = tmp_path / "tape.msgpack"
    assert hold_in_turn(path) == ["first in", "first out", "second in"]
    assert not (tmp_path / ".tape.msgpack.lock").exists()


def test_lock_file_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / ".tape.msgpack.lock"
    lock.touch()
    old = time.time() - locking.STALE_AFTER - 5
    os.utime(lock, (old, old))
    with locking._lock_file(lock):
        assert lock.exists()
    assert not lock.exists()


def test_lock_file_held_too_long_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locking, "WAIT", 0.1)
    lock = tmp_path / ".tape.msgpack.lock"
    lock.touch()
    with pytest.raises(CassetteWriteError, match="delete the file"), locking._lock_file(lock):
        pass
    assert lock.exists()  # someone else's lock is not removed
