"""The one seam every adapter calls: an HTTP library's request, in the library-neutral model,
goes in; the tape decides whether it is replayed or recorded; the adapter gets back what its
library expects.

An adapter translates and nothing more. It hands ``begin`` the request and gets back a
value: ``Replay`` (the recorded interaction, its ``playback`` and, for nearly every one, the
body to hand over at once) or ``Live`` (the recording a real exchange feeds). It branches on
that value: it builds its library's answer from the recording, or calls the library's own
transport (with or without ``await``), inside one ``with serving(tape, plan, failure_of)``.
What happens around the branch is decided here, once for every library, sync or async: the
signal that lets retry waits after a replayed response take no time, the note that says a
replayed failure was replayed, how a live failure is written down (``failure_of``: what one of
the library's exceptions stands for), that live traffic inside it is never recorded twice,
and when each replayed part is due (``Schedule``), also against the other requests the client
makes meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from . import runtime
from .errors import CassetteFormatError
from .models import Failure, Interaction, Request
from .playback import Schedule, held
from .tape import Recording, Tape
from .tracebacks import note_replayed
from .wire.stored import position_of

FailureOf = Callable[[BaseException], Failure | None]
"""An adapter's reading of one of its library's exceptions; None for one that is not a
transport failure (it propagates and is not written down)."""

_replayed: ContextVar[bool] = ContextVar("agenttape_replayed", default=False)


def skip_retry_wait() -> bool:
    """True when a retry wait should take no time: the exchange just made here was replayed
    and the tape asks for ``fast_retries``. Retry loops (urllib3, botocore, the OpenAI and
    Anthropic SDKs) ask this before sleeping; ``time.sleep`` itself is never touched."""
    if not _replayed.get():
        return False
    tape = runtime.active()
    return tape is not None and tape.fast_retries


@dataclass(slots=True)
class Replay:
    """The tape's answer for a request it replays: the recorded ``interaction``.

    ``body`` is given for nearly every one: an interaction with nothing to pace, hold, fail
    or wait for, whose body is handed over in at most one piece. The adapter hands that body
    to its library as any response read from memory, with no ``playback`` made and nothing
    of ``serving`` run (the exchange is marked replayed already). Any other is served inside
    ``serving`` by way of ``playback``."""

    interaction: Interaction
    tape: Tape = field(repr=False)
    body: bytes | None = None
    _playback: Schedule | None = field(default=None, repr=False)

    @property
    def playback(self) -> Schedule:
        """When each part of the replayed answer is due, counted from the first time it is
        asked for (where the adapter starts serving it, not where it began)."""
        playback = self._playback
        if playback is None:
            tape, interaction = self.tape, self.interaction
            playback = self._playback = Schedule.of(
                interaction, _paced(tape, interaction), tape.precedents(interaction), tape
            )
        return playback


@dataclass(slots=True)
class Live:
    """The tape's answer for a request it records: the real exchange runs (inside
    ``serving``) and feeds ``recording``."""

    recording: Recording


def begin(tape: Tape, request: Request, boundary: str = "http") -> Replay | Live:
    """The tape's decision for ``request``: replay a recorded interaction or record a live
    one. Raises UnmatchedInteractionError when replay is the only option and nothing
    matches."""
    plan = tape.begin(request, boundary)
    if not isinstance(plan, Interaction):
        return Live(plan)
    response = plan.response
    if (
        response is None
        or plan.error is not None
        or plan.injected is not None
        or tape.realtime
        or (response.truncated and held(plan))
        or tape.precedents(plan) is not None
    ):
        return Replay(plan, tape)
    chunks, body = response.chunks, response.body
    if chunks and (len(chunks) > 1 or chunks[0][0] != len(body)):
        return Replay(plan, tape)  # more than one piece (``Response.pieces``)
    _replayed.set(True)
    return Replay(plan, tape, body)


class serving:
    """Around the adapter serving ``plan``, sync or async (``with`` works in a coroutine):
    marks the exchange replayed or not (``skip_retry_wait``); a replayed failure's exception
    leaves with the note that says it was replayed (``note_replayed``); a live exchange
    passes the network guard, and an exception escaping it is written down (``failure_of``)
    as the recording's failure."""

    __slots__ = ("failure_of", "plan", "tape", "token")

    def __init__(self, tape: Tape, plan: Replay | Live, failure_of: FailureOf) -> None:
        self.tape = tape
        self.plan = plan
        self.failure_of = failure_of

    def __enter__(self) -> None:
        if isinstance(self.plan, Replay):
            _replayed.set(True)
            return
        _replayed.set(False)
        self.token = runtime.enter_adapter()

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        plan = self.plan
        if isinstance(plan, Replay):
            if isinstance(exc, Exception):
                note_replayed(exc, self.tape, plan.interaction)
            return
        try:
            if exc is not None:
                _failed(plan.recording, exc, self.failure_of)
        finally:
            runtime.exit_adapter(self.token)


def _paced(tape: Tape, interaction: Interaction) -> bool:
    """Whether the interaction is served at its recorded moments: with ``realtime``, and
    always for one a fault made (a ``slow`` fault's delays are its own, and the others have
    none)."""
    return tape.realtime or interaction.injected is not None


def unplayable(tape: Tape, interaction: Interaction, library: str, problem: str) -> Exception:
    """The error for a recorded interaction ``library`` cannot be handed (its parser refuses
    a header): it names the cassette and the interaction, where the library would fail deep
    inside itself or read something else than was recorded."""
    number = position_of(tape.interactions, interaction)
    which = "an interaction" if number is None else f"interaction {number}"
    return CassetteFormatError(
        f"{tape.path}: {which} cannot be replayed through {library}: {problem}; "
        "correct the cassette or record it again"
    )


def _failed(recording: Recording, exc: BaseException, failure_of: FailureOf) -> None:
    """Writes down an exception that escaped the live exchange: the failure in place of a
    response; a body already under way is marked cut (its own errors were taken where it was
    read)."""
    if recording.finished:
        return
    if recording.interaction.response is not None:
        recording.finish(truncated=True)
        return
    failure = failure_of(exc)
    if failure is not None:
        recording.fail(failure)
