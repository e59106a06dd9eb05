"""The exceptions agenttape raises; each message names the cassette and the next step.

Each class reports its module as ``agenttape``, where users import it from: a traceback names
``agenttape.UnmatchedInteractionError``, not the private module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import Request


class AgentTapeError(Exception):
    """Base of every error agenttape raises on purpose."""

    __module__ = "agenttape"


class AgentTapeWarning(UserWarning):
    """What agenttape warns about: a library it cannot intercept at the installed version,
    connections no adapter accounted for, a recording that holds nothing."""

    __module__ = "agenttape"


class CassetteNotFoundError(AgentTapeError, FileNotFoundError):
    """Replay was asked for a cassette that is not on disk."""

    __module__ = "agenttape"


class CassetteFormatError(AgentTapeError, ValueError):
    """A file is not a cassette this version can read; the file is left untouched."""

    __module__ = "agenttape"


class CassetteWriteError(AgentTapeError, OSError):
    """A cassette could not be written; the previous file, if any, is intact."""

    __module__ = "agenttape"


class NetworkBlockedError(AgentTapeError, ConnectionError):
    """An outbound connection was attempted that no cassette serves."""

    __module__ = "agenttape"

    def __init__(
        self, message: str, *, host: str = "", port: int | None = None, cassette_path: str = ""
    ) -> None:
        super().__init__(message)
        self.host = host
        self.port = port
        self.cassette_path = cassette_path


class UnmatchedInteractionError(AgentTapeError, AssertionError):
    """A request has no recorded interaction left to serve it.

    Subclasses AssertionError so that test runners report it as a failed expectation.
    """

    __module__ = "agenttape"

    def __init__(
        self,
        message: str,
        *,
        request: Request,
        candidates: list[Any],
        cassette_path: str,
        mode: str,
    ) -> None:
        super().__init__(message)
        self.request = request
        self.candidates = candidates
        self.cassette_path = cassette_path
        self.mode = mode


class FaultNotFiredError(AgentTapeError):
    """A fault given with ``strict_faults=True`` never fired while its cassette was open: the
    code no longer makes the request it was meant for, so the failure was never rehearsed."""

    __module__ = "agenttape"

    def __init__(self, message: str, *, faults: list[Any], cassette_path: str) -> None:
        super().__init__(message)
        self.faults = faults
        self.cassette_path = cassette_path
