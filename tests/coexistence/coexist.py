"""What the matrix cell running this suite turned on (``AGENTTAPE_COEXIST``, set by
.ci/coexistence.py), and what the tests share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FEATURES = frozenset(filter(None, os.environ.get("AGENTTAPE_COEXIST", "").split(",")))
MODELS_URL = "http://api.example.test/v1/models"
MODELS = {"object": "list", "data": [{"id": "alpha"}, {"id": "beta"}]}
NATIVE = HERE / "cassettes" / "models.msgpack"

# The async tests' runner: anyio's plugin in the cell that turns pytest-asyncio off, else
# pytest-asyncio (in strict mode a test must be marked to be run at all).
ASYNC = (
    pytest.mark.anyio if "anyio" in FEATURES and "asyncio" not in FEATURES else pytest.mark.asyncio
)


def on(feature: str) -> pytest.MarkDecorator:
    """Runs the test only in the cells where ``feature`` is on."""
    return pytest.mark.cell(feature)
