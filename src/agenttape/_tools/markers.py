"""A misspelled marker is an error, not a test that quietly goes live.

``@pytest.mark.agentape`` is, to pytest without ``--strict-markers``, a marker of its own that
nobody reads: the test runs with no cassette and reaches the network. Every marker of a
collected test that is not registered and is a near miss of one of agenttape's names (or of
pytest-recording's, which agenttape serves) stops the run with a usage error naming the test
and the marker meant.
"""

from __future__ import annotations

import difflib
import re

import pytest

MARKERS = ("agenttape", "vcr", "block_network", "default_cassette", "allowed_hosts")
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)")


def registered(config: pytest.Config) -> set[str]:
    """The marker names the ini file and the plugins registered."""
    names = set()
    for line in config.getini("markers"):
        match = _NAME.match(line)
        if match:
            names.add(match.group(1))
    return names


def meant(name: str, known: set[str]) -> str | None:
    """The agenttape marker ``name`` is a near miss of; None when it is none, or is a
    registered marker of its own."""
    if name in known or name in MARKERS:
        return None
    close = difflib.get_close_matches(name.lower(), MARKERS, n=1, cutoff=0.75)
    return close[0] if close else None


def check_spelling(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Raises a usage error naming each test with a misspelled agenttape marker."""
    known = registered(config)
    found = []
    for item in items:
        for marker in item.iter_markers():
            guess = meant(marker.name, known)
            if guess is not None:
                found.append(
                    f"{item.nodeid}: @pytest.mark.{marker.name} is not a marker; "
                    f"did you mean @pytest.mark.{guess}?"
                )
    if found:
        shown = list(dict.fromkeys(found))
        raise pytest.UsageError(
            "agenttape: a misspelled marker would let these tests reach the network with no "
            "cassette:\n  "
            + "\n  ".join(shown[:20])
            + (f"\n  ... and {len(shown) - 20} more" if len(shown) > 20 else "")
            + "\n(register a marker of that name in your ini file if it is meant)"
        )
