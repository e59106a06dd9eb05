"""agenttape: record every HTTP exchange an AI agent makes, byte-exact, and replay it offline."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._adapters import enable as _enable_adapters
from ._adapters import uninstall as _uninstall_adapters
from ._core.errors import (
    AgentTapeError,
    AgentTapeWarning,
    CassetteFormatError,
    CassetteNotFoundError,
    CassetteWriteError,
    FaultNotFiredError,
    NetworkBlockedError,
    UnmatchedInteractionError,
)
from ._core.options import Mode
from ._version import __version__

if TYPE_CHECKING:
    from ._core.boundary import boundary
    from ._core.cassette import Cassette, load, use_cassette
    from ._core.faults import Fault, fault
    from ._core.llm import LLMCall
    from ._core.matching.matcher import Candidate
    from ._core.models import Failure, Interaction, Request, Response
    from ._production.recorder import Recorder, RecorderStats
    from ._production.run import Run

_enable_adapters()

_LAZY = {
    "boundary": "._core.boundary",
    "Candidate": "._core.matching.matcher",
    "Cassette": "._core.cassette",
    "Failure": "._core.models",
    "Interaction": "._core.models",
    "LLMCall": "._core.llm",
    "Request": "._core.models",
    "Response": "._core.models",
    "load": "._core.cassette",
    "use_cassette": "._core.cassette",
    "Fault": "._core.faults",
    "fault": "._core.faults",
    "Recorder": "._production.recorder",
    "RecorderStats": "._production.recorder",
    "Run": "._production.run",
}
"""Names imported on first use: a process that never opens a cassette or a recorder of its
own (a pytest session in which no test uses one, say) never loads them, nor the model and the
matching they stand on."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def uninstall() -> None:
    """Puts back every attribute agenttape replaced in the libraries it intercepts, and
    removes its import hook, so that nothing of it is left in them (``agenttape doctor``
    shows what is patched). The next cassette or run opened installs them again. One that
    another library wrapped since agenttape did is left under that wrapper, passing
    through (their wrapper is never removed)."""
    _uninstall_adapters()


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AgentTapeError",
    "AgentTapeWarning",
    "Candidate",
    "Cassette",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "CassetteWriteError",
    "Failure",
    "Fault",
    "FaultNotFiredError",
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
    "fault",
    "load",
    "uninstall",
    "use_cassette",
]
