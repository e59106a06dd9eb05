"""The hook pytest-recording gives a project's conftest, served by agenttape in its place."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_recording_configure(config: pytest.Config, vcr: Any) -> None:
    """Called with each test's ``vcr.VCR`` before its cassette is read: a conftest registers
    its serializers, matchers and persister here (``vcr.register_serializer`` and so on)."""
