"""The drift report: tests whose requests changed since their vcrpy cassette was recorded.

vcrpy's default matching compares method and URL only, so a test whose request body changed
(a new parameter, a field dropped) still gets the old answer and passes on a stale cassette.
agenttape compares each replayed request with the recorded one anyway; this plugin gathers
what differed, from every xdist worker too (it travels on the teardown report), and names
the tests, field by field, at the end of the session, in the classes and words of
``agenttape diff --verdict``. What is benign by nature is left out without being told: ids a
client draws anew on every run (tool-call ids, request ids, uuids), model output the code
sends back; fields a client now sends as explicit nulls where the cassettes hold nothing are
said in one line for the whole session. Each test is said as it ended; a report longer than
a screen goes whole to a file under the rootdir, and the screen gets its summary.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import pytest

from .._core.text import counted

DriftMode = Literal["report", "fail", "off"]
DRIFT_MODES: tuple[DriftMode, ...] = get_args(DriftMode)
SHOWN = 8  # differences shown per request


@dataclass(slots=True)
class Drift:
    """A replayed request that differs from the one recorded: vcrpy's matching let it
    through, agenttape's would not."""

    number: int
    method: str
    url: str
    differences: list[str] = field(default_factory=list)
    nulls: list[str] = field(default_factory=list)
    """Fields now sent as explicit nulls where the recording had none: benign, counted."""

    def as_list(self) -> list[Any]:
        """As it travels on a report (plain values, for xdist)."""
        return [self.number, self.method, self.url, self.differences, self.nulls]


def changed_requests(drifts: list[list[Any]]) -> bool:
    """Whether a test's drift holds a request change, not only benign nulls."""
    return any(differences for _n, _m, _u, differences, _nulls in drifts)


def drift_text(nodeid: str, cassette: str, drifts: list[list[Any]], outcome: str = "") -> str:
    """One test's drift, as the report and a failing test show it; ``outcome`` (passed,
    failed, ...) is said after the test's name when known."""
    said = f" ({outcome})" if outcome else ""
    lines = [f"{nodeid}: its requests changed since {cassette} was recorded{said}"]
    for number, method, url, differences, _nulls in drifts:
        if not differences:
            continue
        lines.append(f"  #{number} {method} {url}")
        lines += [f"      {line}" for line in differences[:SHOWN]]
        if len(differences) > SHOWN:
            lines.append(f"      ... and {len(differences) - SHOWN} more")
    return "\n".join(lines)


SCREEN = 25
"""Lines the end of a run gives the drift report at most; the rest goes to ``REPORT_FILE``."""

REPORT_FILE = Path(".agenttape") / "drift-report.txt"
"""Where the whole report is written, under pytest's rootdir."""

TOP = 5  # fields and tests named in the summary

DRIFT_FAILED = "failed on its drift"
"""The outcome of a test that passed and was failed by ``--agenttape-drift=fail``."""


def _field(line: str) -> str:
    """The field a difference line names, list positions as ``[*]``: ``request body.n`` of
    ``request changed: request body.n: 1, now 2``."""
    where = line.partition(": ")[2].partition(": ")[0]
    return re.sub(r"\[\d+\]", "[*]", where)


@dataclass(slots=True, eq=False)
class DriftReport:
    """Collects each test's drift and outcome as its reports come in; writes the report to a
    file and a summary that fits a screen. Compared by identity, so hashable: pytest's plugin
    manager keeps its plugins in sets."""

    mode: str
    tests: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = getattr(report, "agenttape_drift", None)
        if found and report.when == "teardown":
            self.tests[report.nodeid] = (found["cassette"], found["drifts"])
        known = self.outcomes.get(report.nodeid)
        if getattr(report, "agenttape_drift_failed", False):
            self.outcomes[report.nodeid] = DRIFT_FAILED
        elif report.failed and known not in ("failed", DRIFT_FAILED):
            self.outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
        elif report.when == "call" and known is None:
            self.outcomes[report.nodeid] = report.outcome
        elif report.skipped and known is None:
            self.outcomes[report.nodeid] = "skipped"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.tests or self.mode == "off":
            return
        changed = {n: t for n, t in self.tests.items() if changed_requests(t[1])}
        lines = [
            drift_text(nodeid, cassette, drifts, self.outcomes.get(nodeid, ""))
            for nodeid, (cassette, drifts) in changed.items()
        ]
        full = "\n".join([*lines, *self._benign(), *self._closing(changed)])
        terminalreporter.write_sep("=", "agenttape: requests changed since recording")
        if not changed or full.count("\n") < SCREEN:
            terminalreporter.write_line(full)
            return
        rootpath: Path = terminalreporter.config.rootpath
        target = rootpath / REPORT_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        ignore = target.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n")
        target.write_text(full + "\n", encoding="utf-8")
        shown = os.path.relpath(target) if target.is_relative_to(Path.cwd()) else str(target)
        summary = [*self._summary(changed), *self._benign()]
        summary.append(f"The whole report ({counted(full.count(chr(10)) + 1, 'line')}): {shown}")
        summary += self._closing(changed)
        terminalreporter.write_line("\n".join(summary))

    def _summary(self, changed: dict[str, tuple[str, list[Any]]]) -> list[str]:
        """The counts, the fields that changed in most tests and the tests most changed."""
        requests = sum(len([d for d in t[1] if d[3]]) for t in changed.values())
        fields: Counter[str] = Counter()
        for _cassette, drifts in changed.values():
            fields.update({_field(line) for drift in drifts for line in drift[3]})
        lines = [
            f"{counted(len(changed), 'test')} named, "
            f"{counted(requests, 'replayed request')} that differ from the recorded one "
            f"({self._outcome_counts(changed)})",
            "Fields changed in most tests:",
        ]
        lines += [f"  {where}: {counted(n, 'test')}" for where, n in fields.most_common(TOP)]
        lines.append("Tests with most changes:")
        size = {n: sum(len(d[3]) for d in t[1]) for n, t in changed.items()}
        for nodeid in sorted(changed, key=lambda n: -size[n])[:TOP]:
            outcome = self.outcomes.get(nodeid, "not run to its end")
            lines.append(f"  {nodeid} ({outcome}): {counted(size[nodeid], 'difference')}")
        return lines

    def _outcome_counts(self, changed: dict[str, tuple[str, list[Any]]]) -> str:
        counts = Counter(self.outcomes.get(nodeid, "not run to its end") for nodeid in changed)
        return ", ".join(f"{n} {outcome}" for outcome, n in counts.most_common())

    def _benign(self) -> list[str]:
        nulls = {n: [f for d in t[1] for f in d[4]] for n, t in self.tests.items()}
        fields = sorted({field for found in nulls.values() for field in found})
        if not fields:
            return []
        shown = ", ".join(fields[:6]) + (f", and {len(fields) - 6} more" if len(fields) > 6 else "")
        return [
            f"benign: {counted(sum(1 for f in nulls.values() if f), 'test')} now send "
            f"explicit nulls where the cassettes hold nothing ({shown}); left out"
        ]

    def _closing(self, changed: dict[str, tuple[str, list[Any]]]) -> list[str]:
        """What is true of the tests named, by their outcome: a passing one passed only
        because vcrpy's matching let the changed request through; a failing one failed."""
        if not changed:
            return []
        one = len(changed) == 1
        head = (
            f"{counted(len(changed), 'test')} "
            f"{'replays a cassette' if one else 'replay cassettes'} recorded for other requests"
        )
        counts = Counter(self.outcomes.get(nodeid, "") for nodeid in changed)
        said = []
        if counts["passed"]:
            if one or counts["passed"] == len(changed):
                who = "it passed" if one else "they passed"
            else:
                who = f"{counts['passed']} passed"
            said.append(
                f"{who} only because vcrpy's matching ignores what changed "
                "(--agenttape-drift=fail makes such a test fail)"
            )
        if counts[DRIFT_FAILED]:
            said.append(f"{counts[DRIFT_FAILED]} failed on it: --agenttape-drift=fail")
        failed = counts["failed"] + counts["error"]
        if failed:
            said.append(
                f"{failed} failed or errored on {'its' if failed == 1 else 'their'} own "
                "(the stale cassette may be why)"
            )
        return [f"{head}: {'; '.join(said) or 'none ran to its end'}. "
                "Re-record with --record-mode=rewrite."]  # fmt: skip
