"""The drift report: tests whose requests changed since their vcrpy cassette was recorded.

vcrpy's default matching compares method and URL only, so a test whose request body changed
(a new parameter, a field dropped) still gets the old answer and passes on a stale cassette.
agenttape compares each replayed request with the recorded one anyway; this plugin gathers
what differed, from every xdist worker too (it travels on the teardown report), and names
the tests, field by field, at the end of the session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    def as_list(self) -> list[Any]:
        """As it travels on a report (plain values, for xdist)."""
        return [self.number, self.method, self.url, self.differences]


def drift_text(nodeid: str, cassette: str, drifts: list[list[Any]]) -> str:
    """One test's drift, as the summary and a failing test show it."""
    lines = [f"{nodeid}: its requests changed since {cassette} was recorded"]
    for number, method, url, differences in drifts:
        lines.append(f"  #{number} {method} {url}")
        lines += [f"      {line}" for line in differences[:SHOWN]]
        if len(differences) > SHOWN:
            lines.append(f"      ... and {len(differences) - SHOWN} more")
    return "\n".join(lines)


@dataclass(slots=True, eq=False)
class DriftReport:
    """Collects each test's drift as its report comes in; writes the summary."""

    mode: str
    tests: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = getattr(report, "agenttape_drift", None)
        if found and report.when == "teardown":
            self.tests[report.nodeid] = (found["cassette"], found["drifts"])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.tests or self.mode == "off":
            return
        terminalreporter.write_sep("=", "agenttape: requests changed since recording")
        for nodeid, (cassette, drifts) in self.tests.items():
            terminalreporter.write_line(drift_text(nodeid, cassette, drifts))
        one = len(self.tests) == 1
        advice = (
            "failed (--agenttape-drift=fail)"
            if self.mode == "fail"
            else "passed only because vcrpy's matching ignores what changed "
            "(--agenttape-drift=fail makes such a test fail)"
        )
        terminalreporter.write_line(
            f"{counted(len(self.tests), 'test')} "
            f"{'replays a cassette' if one else 'replay cassettes'} recorded for other "
            f"requests: {'it' if one else 'they'} {advice}. "
            "Re-record with --record-mode=rewrite."
        )
