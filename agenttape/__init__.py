"""agenttape: record every HTTP exchange an AI agent makes, byte-exact, and replay it offline."""

from __future__ import annotations

from ._adapters import enable as _enable_adapters
from ._core.boundary import boundary
from ._core.cassette import Cassette, load, use_cassette
from ._core.errors import (
    AgentTapeError,
    AgentTapeWarning,
    CassetteFormatError,
    CassetteNotFoundError,
    CassetteWriteError,
    NetworkBlockedError,
    UnmatchedInteractionError,
)
from ._core.llm import LLMCall
from ._core.matching import Candidate
from ._core.models import Failure, Interaction, Request, Response
from ._core.options import Mode
from ._production.recorder import Recorder, RecorderStats
from ._production.run import Run
from ._version import __version__

_enable_adapters()

__all__ = [
    "AgentTapeError",
    "AgentTapeWarning",
    "Candidate",
    "Cassette",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "CassetteWriteError",
    "Failure",
    "Interaction",
    "LLMCall",
    "Mode",
    "NetworkBlockedError",
    "Recorder",
    "RecorderStats",
    "Request",
    "Response",
    "Run",
    "UnmatchedInteractionError",
    "__version__",
    "boundary",
    "load",
    "use_cassette",
]
