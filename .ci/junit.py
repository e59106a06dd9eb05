"""What the CI scripts read from pytest's JUnit XML reports."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path


def counts(report: Path) -> tuple[int, int, int]:
    """Passed, failed (errors included) and skipped, over every test suite of the report."""
    if not report.exists():
        return 0, 0, 0
    totals = [0, 0, 0, 0]
    for part in ElementTree.parse(report).getroot().iter("testsuite"):
        for index, key in enumerate(("tests", "failures", "errors", "skipped")):
            totals[index] += int(part.get(key, "0"))
    total, failed, errors, skipped = totals
    return total - failed - errors - skipped, failed + errors, skipped
