"""What a cassette older than its ``max_age`` does when it is activated: replays with a
warning, fails, or is recorded again where the hosts answer and the keys are set."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import age, blame
from .errors import AgentTapeError, AgentTapeWarning
from .models import Interaction
from .options import MODE_ENVIRONMENT_VARIABLE, CassetteOptions, Mode


def mode_after_age(
    path: Path,
    metadata: dict[str, Any],
    loaded: Sequence[Interaction],
    options: CassetteOptions,
    mode: Mode,
) -> Mode:
    """The mode this activation runs in once the recording's age is known: ``all`` for
    an expired cassette that ``on_expired="rerecord"`` can record again now."""
    seconds = age.age(metadata)
    assert options.max_age is not None
    if seconds is None or seconds <= options.max_age:
        return mode
    expired = (
        f"cassette {path} was recorded {age.say_age(seconds)} ago, more than its "
        f"max_age of {age.say_age(options.max_age)}"
    )
    action = options.on_expired
    if action == "fail":
        raise AgentTapeError(
            f"{expired} (on_expired='fail'). Record it again: pytest --agenttape-record, "
            f"or {MODE_ENVIRONMENT_VARIABLE}=all"
        )
    if action == "rerecord":
        missing = age.why_not_record(loaded)
        if not missing:
            blame.warn(f"{expired}: recording it again", AgentTapeWarning)
            return "all"
        expired += f"; not recorded again now ({missing}), replayed as it is"
    else:
        expired += "; record it again (pytest --agenttape-record), or pass on_expired='rerecord'"
    blame.warn(expired, AgentTapeWarning)
    return mode
