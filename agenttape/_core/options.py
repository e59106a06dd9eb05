"""How a cassette is to behave, kept apart from what it holds while active: the decorator
starts a fresh activation from the same options on every call."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from . import codec
from .errors import AgentTapeError

Mode = Literal["none", "once", "new_episodes", "all"]
OnUnused = Literal["ignore", "warn", "fail"]
MODES: tuple[Mode, ...] = get_args(Mode)
ON_UNUSED: tuple[OnUnused, ...] = get_args(OnUnused)
MODE_ENVIRONMENT_VARIABLE = "AGENTTAPE_MODE"


@dataclass(frozen=True, slots=True)
class CassetteOptions:
    """The options of ``use_cassette``, checked once; see ``use_cassette`` for each."""

    mode: Mode = "none"
    match_on: tuple[str, ...] | None = None
    ignore_json_fields: tuple[str, ...] = ()
    allow_repeats: bool = False
    live: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()
    redact: tuple[str, ...] | None = None
    block_network: bool | None = None
    allowed_hosts: tuple[str, ...] = ()
    realtime: bool = False
    fast_retries: bool = True
    freeze_time: bool = False
    tags: dict[str, Any] = field(default_factory=dict)
    on_unused: OnUnused = "ignore"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if self.on_unused not in ON_UNUSED:
            raise ValueError(
                f"on_unused must be one of {', '.join(ON_UNUSED)}; got {self.on_unused!r}"
            )
        codec.check_tags(self.tags)

    def effective_mode(self) -> Mode:
        """The mode, unless ``AGENTTAPE_MODE`` overrides it for the whole process."""
        override = os.environ.get(MODE_ENVIRONMENT_VARIABLE)
        if not override:
            return self.mode
        for mode in MODES:
            if override == mode:
                return mode
        raise AgentTapeError(
            f"{MODE_ENVIRONMENT_VARIABLE}={override!r} is not a mode; use one of {', '.join(MODES)}"
        )
