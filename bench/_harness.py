"""pyperf around each scenario: every contestant is timed in worker processes of its own, so
one library's patches never touch another's figures; the scenario's main process prepares the
cassettes once and writes one JSON result for ``python -m bench`` to tabulate."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyperf

TimeFunc = Callable[[int], float]


@dataclass
class Row:
    name: str
    value: float  # median: seconds per operation, bytes, or a ratio, as ``unit`` says
    stdev: float = 0.0
    values: int = 0
    note: str = ""


@dataclass
class Check:
    """One target of the issue: ``measured`` must stay at or under ``limit``."""

    what: str
    measured: float | None
    limit: float
    note: str = ""

    @property
    def holds(self) -> bool | None:
        return None if self.measured is None else self.measured <= self.limit


@dataclass
class Line:
    """One line of the summary table: a ratio (or a difference) per contestant."""

    label: str
    measure: str
    baseline: str
    cells: dict[str, float | None]
    style: str  # "ratio" (x) or "ms" (difference in milliseconds)
    target: str
    holds: bool | None


@dataclass
class Result:
    number: int
    title: str
    unit: str
    baseline: str
    rows: list[Row] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for check, raw in zip(self.checks, data["checks"], strict=False):
            raw["holds"] = check.holds
        return data

    def value(self, name: str) -> float | None:
        for row in self.rows:
            if row.name == name and row.value == row.value:
                return row.value
        return None


class Scenario:
    def __init__(
        self,
        number: int,
        title: str,
        unit: str,
        baseline: str,
        module: str,
        processes: int = 3,
        values: int = 3,
        warmups: int = 1,
    ) -> None:
        self.runner = pyperf.Runner(
            processes=processes,
            values=values,
            warmups=warmups,
            loops=1,
            program_args=("-m", module),
            add_cmdline_args=_forward,
        )
        self.runner.argparser.add_argument("--bench-dir", default="")
        self.runner.argparser.add_argument("--bench-out", default="")
        self.runner.argparser.add_argument("--bench-full", action="store_true")
        self.args = self.runner.parse_args()
        self.is_worker = bool(self.args.worker)
        self._own_dir = not self.args.bench_dir
        if self._own_dir:
            self.args.bench_dir = tempfile.mkdtemp(prefix="agenttape-bench-")
        self.dir = Path(self.args.bench_dir)
        self.full = bool(self.args.bench_full)
        self.result = Result(number, title, unit, baseline)

    def time(
        self,
        name: str,
        func: TimeFunc,
        per: int = 1,
        processes: int | None = None,
        values: int | None = None,
        warmups: int | None = None,
        note: str = "",
        failure: str = "",
    ) -> None:
        """Time ``func(loops) -> seconds``; the row holds seconds per each of ``per`` operations."""
        saved = (self.args.processes, self.args.values, self.args.warmups)
        if processes is not None:
            self.args.processes = processes
        if values is not None:
            self.args.values = values
        if warmups is not None:
            self.args.warmups = warmups
        try:
            bench = self.runner.bench_time_func(name, func, inner_loops=per)
        except (SystemExit, RuntimeError):
            if self.is_worker:
                raise
            # pyperf numbers benchmarks by call order and skips its count on a failure: keep
            # it in step, or every later benchmark would run the wrong worker task.
            self.runner._worker_task += 1
            self.result.rows.append(Row(name, float("nan"), note=failure or "failed: see the log"))
            return
        finally:
            self.args.processes, self.args.values, self.args.warmups = saved
        if bench is not None and not self.is_worker:
            count = bench.get_nvalue()
            self.result.rows.append(
                Row(
                    name,
                    bench.median(),
                    bench.stdev() if count > 1 else 0.0,
                    count,
                    note,
                )
            )

    def add(self, name: str, value: float, note: str = "") -> None:
        if not self.is_worker:
            self.result.rows.append(Row(name, value, note=note))

    def missing(self, name: str, why: str) -> None:
        if not self.is_worker:
            self.result.rows.append(Row(name, float("nan"), note=why))

    def check(self, what: str, measured: float | None, limit: float, note: str = "") -> bool | None:
        check = Check(what, measured, limit, note)
        self.result.checks.append(check)
        return check.holds

    def line(
        self,
        label: str,
        measure: str,
        baseline: str,
        cells: dict[str, float | None],
        target: str,
        holds: bool | None,
        style: str = "ratio",
    ) -> None:
        self.result.lines.append(Line(label, measure, baseline, cells, style, target, holds))

    def ratios(self, names: dict[str, str], over: str) -> dict[str, float | None]:
        """``{column: value(row) / value(over)}`` for each ``column: row`` of ``names``."""
        base = self.result.value(over)
        cells: dict[str, float | None] = {}
        for column, row in names.items():
            value = self.result.value(row)
            cells[column] = value / base if value is not None and base else None
        return cells

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def finish(self) -> None:
        if self.is_worker:
            return
        data = json.dumps(self.result.to_json(), indent=2, allow_nan=True)
        if self.args.bench_out:
            Path(self.args.bench_out).write_text(data)
        else:
            print(data)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def _forward(command: list[str], args: Any) -> None:
    command.extend(("--bench-dir", args.bench_dir))
    if args.bench_full:
        command.append("--bench-full")


@contextlib.contextmanager
def serve() -> Iterator[str]:
    """The bench server (bench/_server.py) in a process of its own; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench._server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the bench server did not start")
        yield url
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


def json_from(module: str, *args: str) -> Any:
    """What ``python -m module args`` prints as JSON: a measurement taken in a process of
    its own."""
    output = subprocess.run(
        [sys.executable, "-m", module, *args], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(output)
