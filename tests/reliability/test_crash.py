"""SIGKILL at random moments never leaves a partial cassette behind.

A worker process records (or appends, or redacts in place) and is killed mid-request,
mid-write or after it finished; every file left must load completely, or be absent / byte-for-
byte the file from before.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import agenttape
from agenttape._core.files import STALE_TEMPORARY
from tests.reliability.scale import scaled
from tests.servers import Server, path_app, path_body

WORKER = Path(__file__).with_name("worker.py")
BODY = 512 * 1024
SEED = 20261122


@dataclass
class Tally:
    """What the kills hit, for the report printed at the end of the test."""

    kills: int = 0
    survived: int = 0
    lost: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    leftovers: int = 0

    def report(self, name: str) -> str:
        phases = ", ".join(f"{k}={v}" for k, v in sorted(self.phases.items()))
        return (
            f"{name}: kills={self.kills} survived={self.survived} lost={self.lost} "
            f"temporary files left={self.leftovers} [{phases}]"
        )


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def calibrate(args: list[str]) -> dict[str, float]:
    """Runs the worker to the end once; wall-clock moment of each marker since launch."""
    launched = time.perf_counter()
    process = worker(*args)
    assert process.stdout is not None
    moments = {}
    for line in process.stdout:
        moments[line.split(" ", 1)[1].strip()] = time.perf_counter() - launched
    assert process.wait() == 0, process.stderr.read() if process.stderr else ""
    moments["end"] = time.perf_counter() - launched
    return moments


def phase_of(markers: list[str], killed: bool) -> str:
    if not killed:
        return "after exit"
    if not markers:
        return "starting"
    last = markers[-1]
    if last == "start":
        return "before work"
    if last.startswith("request"):
        return "mid-request"
    if last == "saving":
        return "mid-write"
    return "after write"


def kill_at(args: list[str], after: str | None, delay: float) -> tuple[list[str], bool]:
    """Launches the worker, waits for its marker ``after`` (or for nothing), sleeps ``delay``
    and kills it if it still runs; returns the markers it printed."""
    process = worker(*args)
    assert process.stdout is not None
    seen = []
    if after is not None:
        for line in process.stdout:
            seen.append(line.split(" ", 1)[1].strip())
            if seen[-1] == after:
                break
    time.sleep(delay)
    killed = process.poll() is None
    if killed:
        process.send_signal(signal.SIGKILL)
    out, err = process.communicate()
    if not killed:
        assert process.returncode == 0, err
    return seen + [line.split(" ", 1)[1] for line in out.splitlines()], killed


def schedule(rng: random.Random, moments: dict[str, float]) -> tuple[str | None, float]:
    """A third of the kills anywhere from launch to past the exit, the rest during the write."""
    if rng.random() < 1 / 3:
        return None, rng.uniform(0, moments["end"] * 1.1)
    return "saving", rng.uniform(0, (moments["saved"] - moments["saving"]) * 1.3)


def sweep(directory: Path, keep: str) -> int:
    """Removes (and counts) what a kill left beside the cassette: temporary files only (a
    re-recording keeps the file it replaced as ``<stem>.previous.msgpack``, on purpose)."""
    previous = keep.replace(".msgpack", ".previous.msgpack")
    left = [p for p in directory.iterdir() if p.name not in (keep, previous)]
    for stray in left:
        assert stray.name.startswith((f".{keep}.", f".{previous}.")), stray.name
        assert stray.name.endswith(".tmp"), stray.name
        stray.unlink()
    return len(left)


def torture(
    tally: Tally,
    kills: int,
    args: list[str],
    prepare: Callable[[], bytes | None],
    check: Callable[[bytes | None, list[str]], None],
    path: Path,
) -> None:
    rng = random.Random(SEED + kills)
    before = prepare()
    moments = calibrate(args)
    for _ in range(kills):
        before = prepare()
        markers, killed = kill_at(args, *schedule(rng, moments))
        tally.kills += killed
        tally.phases[phase_of(markers, killed)] += 1
        check(before, markers)
        tally.survived += killed
        tally.leftovers += sweep(path.parent, path.name)


def check_loads(path: Path, urls: list[str]) -> list[agenttape.Interaction]:
    cassette = agenttape.load(path)
    assert [i.request.url for i in cassette.interactions] == urls
    for interaction in cassette.interactions:
        assert interaction.response is not None
        path_part = "/" + interaction.request.url.split("/", 3)[3]
        assert interaction.response.body == path_body(path_part, BODY)
        assert not interaction.response.truncated
    return cassette.interactions


def restoring(path: Path, baseline: bytes) -> Callable[[], bytes]:
    """A ``prepare`` that puts the cassette back as it was before each run."""

    def prepare() -> bytes:
        path.write_bytes(baseline)
        return baseline

    return prepare


def left_unchanged(path: Path, before: bytes | None, markers: list[str]) -> bool:
    """True when the run left the file as it was, which is only right if it never saved."""
    if path.read_bytes() != before:
        return False
    assert "saved" not in markers
    return True


@pytest.fixture
def server() -> Iterator[Server]:
    with Server(path_app(BODY)) as running:
        yield running


def nothing_lost(tally: Tally, capsys: pytest.CaptureFixture[str], title: str) -> None:
    """Shows the tally past pytest's capture, then holds it to no recording lost."""
    with capsys.disabled():
        print("\n" + tally.report(title))
    assert tally.lost == 0


def test_kill_while_recording(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tally = Tally()
    count = 6
    path = tmp_path / "fresh" / "tape.msgpack"
    for mode in ("once", "all"):
        args = ["record", str(path), "--mode", mode, "--url", server.url, "--count", str(count)]
        urls = [f"{server.url}/item/w/0/{i}" for i in range(count)]

        def prepare(mode: str = mode) -> bytes | None:
            if mode == "once":
                path.unlink(missing_ok=True)
                return None
            return path.read_bytes() if path.exists() else None

        def check(before: bytes | None, markers: list[str], urls: list[str] = urls) -> None:
            if not path.exists():
                assert before is None
                tally.lost += count * ("saved" in markers)
                assert "saved" not in markers, "the block finished but no cassette is on disk"
                return
            if before is not None and path.read_bytes() == before:
                assert "saved" not in markers
                return
            check_loads(path, urls)

        torture(tally, scaled(5, 60), args, prepare, check, path)
    nothing_lost(tally, capsys, "record (once/all)")


def test_kill_while_appending(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tally = Tally()
    path = tmp_path / "append" / "tape.msgpack"
    base = ["record", str(path), "--url", server.url]
    assert calibrate([*base, "--mode", "once", "--count", "3"])
    baseline = path.read_bytes()
    args = [*base, "--mode", "new_episodes", "--count", "6"]
    urls = [f"{server.url}/item/w/0/{i}" for i in range(6)]
    old = agenttape.load(path).interactions

    def check(before: bytes | None, markers: list[str]) -> None:
        if not left_unchanged(path, before, markers):
            assert check_loads(path, urls)[:3] == old

    torture(tally, scaled(10, 60), args, restoring(path, baseline), check, path)
    nothing_lost(tally, capsys, "new_episodes append")


def test_kill_while_redacting_in_place(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tally = Tally()
    path = tmp_path / "redact" / "tape.msgpack"
    count = 12
    calibrate(["record", str(path), "--mode", "once", "--url", server.url, "--count", str(count)])
    baseline = path.read_bytes()
    urls = [f"{server.url}/item/w/0/{i}" for i in range(count)]
    assert all(
        i.request.header("user-agent") != "<redacted>" for i in agenttape.load(path).interactions
    )

    def check(before: bytes | None, markers: list[str]) -> None:
        if not left_unchanged(path, before, markers):
            loaded = check_loads(path, urls)
            assert all(i.request.header("user-agent") == "<redacted>" for i in loaded)

    torture(
        tally,
        scaled(10, 60),
        ["redact", str(path), "--header", "user-agent"],
        restoring(path, baseline),
        check,
        path,
    )
    nothing_lost(tally, capsys, "in-place redaction")


def test_temporary_files_left_by_a_kill_are_swept_later(tmp_path: Path) -> None:
    """A kill mid-write leaves a temporary file; a later save of the cassette removes it
    once it is old, and never touches one a live writer may still be filling."""
    path = tmp_path / "tape.msgpack"
    stale, fresh = tmp_path / ".tape.msgpack.dead1.tmp", tmp_path / ".tape.msgpack.live2.tmp"
    other = tmp_path / ".other.msgpack.dead3.tmp"
    for leftover in (stale, fresh, other):
        leftover.write_bytes(b"half a cassette")
    old = time.time() - STALE_TEMPORARY - 60
    for leftover in (stale, other):
        os.utime(leftover, (old, old))
    agenttape.Cassette(path, mode="all").save()
    assert agenttape.load(path).interactions == []
    assert not stale.exists()
    assert fresh.exists() and other.exists()
