"""agenttape: record every HTTP exchange an AI agent makes, byte-exact, and replay it offline."""

from __future__ import annotations

from ._boundary import boundary
from ._cassette import Cassette, load, use_cassette
from ._errors import (
    AgentTapeError,
    CassetteFormatError,
    CassetteNotFoundError,
    CassetteWriteError,
    NetworkBlockedError,
    UnmatchedInteractionError,
)
from ._llm import LLMCall
from ._matching import Candidate
from ._models import Failure, Interaction, Request, Response
from ._recorder import Recorder, RecorderStats, Run
from ._version import __version__

__all__ = [
    "AgentTapeError",
    "Candidate",
    "Cassette",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "CassetteWriteError",
    "Failure",
    "Interaction",
    "LLMCall",
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
