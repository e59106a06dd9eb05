"""What a cassette says when it stops: nothing recorded, connections it could not record,
interactions never played, faults that never fired."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import blame
from .errors import AgentTapeError, AgentTapeWarning, FaultNotFiredError
from .models import Interaction
from .text import counted

if TYPE_CHECKING:
    from .faults import Fault, FaultPlan


def nothing_recorded(path: Path) -> str:
    kept = (
        "the cassette already there was left as it was"
        if path.exists()
        else "no cassette was written"
    )
    return (
        f"nothing was recorded into {path}: the code made no HTTP request (did it fail "
        f"before sending one, for a missing API key say?); {kept}, so the next run records "
        "again"
    )


def bypassed(path: Path, unaccounted: dict[tuple[str, int], str | None], recorded: int) -> str:
    places = ", ".join(
        f"{host}:{port}" + (f" ({library})" if library else "")
        for (host, port), library in list(unaccounted.items())[:10]
    )
    return (
        f"while recording {path} ({counted(recorded, 'interaction')}) the process opened "
        f"connections that agenttape does not intercept, so they were not recorded: {places}. "
        "Replay will not serve them (with block_network they raise NetworkBlockedError); call "
        "them through an intercepted library, or mark them live=(...) if they should stay live."
    )


def never_played(path: Path, unplayed: list[Interaction]) -> str:
    lines = "\n".join(f"  {i.request.method} {i.request.url}" for i in unplayed[:10]) + (
        "\n  ..." if len(unplayed) > 10 else ""
    )
    return (
        f"{counted(len(unplayed), 'recorded interaction')} of cassette {path} "
        f"{'was' if len(unplayed) == 1 else 'were'} never played "
        f"(the code no longer makes these requests; re-record to drop them):\n{lines}"
    )


def never_fired(path: Path, unfired: list[Fault]) -> str:
    lines = "\n".join(f"  {item.describe()}" for item in unfired)
    return (
        f"{counted(len(unfired), 'fault')} given to cassette {path} never fired (no "
        f"request it applies to was made, or not as often as its selectors ask):\n{lines}"
    )


def report_unused(path: Path, unplayed: list[Interaction], on_unused: str) -> None:
    """Recorded interactions never played: a warning, or an error with ``on_unused="fail"``."""
    if not unplayed:
        return
    message = never_played(path, unplayed)
    if on_unused == "fail":
        raise AgentTapeError(message)
    blame.warn(message)


def report_unfired(path: Path, plan: FaultPlan, strict: bool, failed: bool) -> None:
    """A fault that never fired rehearsed nothing: said as a warning, or raised as
    ``FaultNotFiredError`` with ``strict_faults`` (unless the block raised already)."""
    unfired = plan.unfired()
    if not unfired:
        return
    message = never_fired(path, unfired)
    if strict and not failed:
        raise FaultNotFiredError(message, faults=unfired, cassette_path=str(path))
    blame.warn(message, AgentTapeWarning)
