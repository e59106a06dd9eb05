"""How a cassette is to behave, kept apart from what it holds while active: the decorator
starts a fresh activation from the same options on every call."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from .age import ON_EXPIRED, OnExpired, parse_age

if TYPE_CHECKING:
    from .faults import Fault

Mode = Literal["none", "once", "new_episodes", "all"]
"""What a cassette does per request: ``none`` replays only, ``once`` records a cassette that
does not exist yet, ``new_episodes`` records what misses, ``all`` records everything anew."""
OnUnused = Literal["ignore", "warn", "fail"]
MODES: tuple[Mode, ...] = get_args(Mode)
ON_UNUSED: tuple[OnUnused, ...] = get_args(OnUnused)
MODE_ENVIRONMENT_VARIABLE = "AGENTTAPE_MODE"
MODE_ALIASES: dict[str, Mode] = {"record": "all"}
"""Names accepted for a mode: ``record`` is what other record/replay tools call "always
records"."""
_MEANT: dict[str, Mode] = {
    **MODE_ALIASES,
    "rewrite": "all",
    "overwrite": "all",
    "always": "all",
    "live": "all",
    "replay": "none",
    "playback": "none",
    "offline": "none",
    "new": "new_episodes",
    "append": "new_episodes",
    "new_episode": "new_episodes",
}
"""Words people type for a mode, read as a guess for "did you mean" (only the aliases are
accepted)."""


def parse_mode(value: object) -> Mode:
    """``value`` as a mode (``record`` is ``all``), or ValueError naming the modes and the
    closest one: the same words from the keyword, ``AGENTTAPE_MODE``, the pytest option and
    the command line."""
    if isinstance(value, str):
        for mode in MODES:
            if value == mode:
                return mode
        alias = MODE_ALIASES.get(value)
        if alias is not None:
            return alias
    raise ValueError(_unknown_mode(value))


def mode_argument(value: str) -> Mode:
    """``parse_mode`` for a command-line option (``--mode``, ``--agenttape-mode``): argparse
    shows the same words as the keyword does."""
    try:
        return parse_mode(value)
    except ValueError as exc:
        import argparse  # only a command line needs it

        raise argparse.ArgumentTypeError(str(exc)) from None


MODE_METAVAR = "{" + ",".join(MODES) + "}"


def _unknown_mode(value: object) -> str:
    message = (
        f"{value!r} is not a mode; the modes are {', '.join(MODES)} "
        "('record' is accepted for 'all')"
    )
    if not isinstance(value, str):
        return message
    word = value.strip().lower().replace("-", "_")
    guess: str | None = word if word in MODES else _MEANT.get(word)
    if guess is None:
        import difflib  # only a mistyped mode needs it

        close = difflib.get_close_matches(word, [*MODES, *_MEANT], n=1, cutoff=0.6)
        guess = close[0] if close else None
        guess = _MEANT.get(guess, guess) if guess is not None else None
    return f"{message}; did you mean {guess!r}?" if guess else message


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
    max_age: float | None = None
    on_expired: OnExpired = "warn"
    faults: tuple[Fault, ...] = ()
    strict_faults: bool = False

    def __post_init__(self) -> None:
        if self.faults:
            from .faults import Fault  # only a cassette given faults loads them

            for item in self.faults:
                if not isinstance(item, Fault):
                    raise TypeError(f"faults= takes agenttape.fault(...) values, got {item!r}")
        object.__setattr__(self, "mode", parse_mode(self.mode))
        object.__setattr__(self, "max_age", parse_age(self.max_age))
        if self.on_expired not in ON_EXPIRED:
            raise ValueError(
                f"on_expired must be one of {', '.join(ON_EXPIRED)}; got {self.on_expired!r}"
            )
        if self.on_unused not in ON_UNUSED:
            raise ValueError(
                f"on_unused must be one of {', '.join(ON_UNUSED)}; got {self.on_unused!r}"
            )
        if self.tags:
            from .wire.codec import check_tags  # the msgpack writer, loaded when tags need it

            check_tags(self.tags)

    def effective_mode(self) -> Mode:
        """The mode, unless ``AGENTTAPE_MODE`` overrides it for the whole process."""
        return environment_mode() or self.mode

    def effective_faults(self) -> tuple[Fault, ...]:
        """The faults given, then those ``AGENTTAPE_FAULTS`` gives the whole process."""
        text = os.environ.get("AGENTTAPE_FAULTS")
        if not text:
            return self.faults
        from .faults import faults_from_environment  # only a process given faults loads them

        return self.faults + faults_from_environment(text)


def environment_mode() -> Mode | None:
    """The mode ``AGENTTAPE_MODE`` sets for the whole process; None when it is unset."""
    override = os.environ.get(MODE_ENVIRONMENT_VARIABLE)
    if not override:
        return None
    try:
        return parse_mode(override)
    except ValueError as exc:
        raise ValueError(f"{MODE_ENVIRONMENT_VARIABLE}: {exc}") from None
