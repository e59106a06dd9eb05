"""The cassette: decides per request whether to replay or record, and owns the file."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from contextvars import Token
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from . import blame, files, runtime, tracebacks
from . import cassette_reports as reports
from .age import OnExpired
from .cassette_saving import Keeping, Saving, mark_interrupted
from .clock import freeze_clock
from .errors import (
    AgentTapeError,
    AgentTapeWarning,
    CassetteNotFoundError,
    UnmatchedInteractionError,
)
from .expiry import mode_after_age
from .matching.matcher import Candidate, Matcher
from .matching.replay_queue import (
    RERECORD_HINT,
    KeepsMisses,
    Key,
    Precedents,
    ReplayQueue,
    SharedPlays,
)
from .models import Interaction, Request
from .options import MODE_ENVIRONMENT_VARIABLE, CassetteOptions, Mode, OnUnused, parse_mode
from .redaction import Redacting, Redactor
from .scope import Scope
from .tape import Recording, Tape
from .text import interrupted
from .tracebacks import note_fired
from .wire import codec
from .wire.stored import StoredInteractions

if TYPE_CHECKING:
    from .faults import Fault, FaultPlan, FiredFault

F = TypeVar("F", bound=Callable[..., Any])


class Cassette(Saving, runtime.Block, KeepsMisses, Redacting):
    """A file of recorded interactions, active as a context manager (``with``/``async with``)
    or a decorator (on ``def`` and ``async def``); ``use_cassette`` builds one.

    While active it serves every request of the process: ``begin`` replays the next recorded
    interaction that matches, or records the real exchange, as the mode says. ``interactions``,
    ``play_count``, ``all_played``, ``unplayed`` and ``metadata`` tell what it holds and served.

    Args:
        path: the cassette file.
        mode: ``"none"`` replays only; ``"once"`` records when the file does not exist, else
            replays; ``"new_episodes"`` replays and records what misses; ``"all"`` (or
            ``"record"``) records everything anew. ``AGENTTAPE_MODE`` overrides it for the
            process.
        record_mode: vcrpy's name for ``mode``, accepted in its place.
        match_on: what a request is matched on (default method, URL with query as a
            multiset, body); ``"headers:x-name"`` adds a header.
        ignore_json_fields: JSON paths left out of body matching (``"messages[*].id"``).
        allow_repeats: serve the last matching interaction again once all are played.
        live: boundary names and host patterns that run for real in mode ``none`` when their
            request changed; what they produce goes to a derived cassette.
        frozen: boundary names and host patterns always served from the cassette, in every
            mode.
        redact: more header names, query names, JSON paths and regexes to redact.
        block_network: refuse connections that no cassette serves (default: in mode
            ``none``).
        allowed_hosts: hosts let through the network guard (names, addresses, globs).
        realtime: serve chunks at their recorded offsets.
        fast_retries: SDK and urllib3 retry waits after a replayed response take no time.
        freeze_time: while replaying, the clock starts at the recorded run's start.
        tags: anything msgpack-serialisable, written into the cassette's header.
        on_unused: ``"warn"`` or ``"fail"`` when recorded interactions were never played.
        max_age: how old the recording may be (``"90d"``; ``s``, ``m``, ``h``, ``d``, ``w``,
            ``y``, a ``timedelta`` or seconds), counted from its recorded time.
        on_expired: what an older one does when replayed: ``"warn"`` (default), ``"fail"``,
            or ``"rerecord"`` (records it again when the hosts answer and the providers'
            keys are set; replays with a warning otherwise).
        faults: ``agenttape.fault(...)`` values: failures injected on top of replayed (or,
            in a recording mode, instead of live) exchanges; ``AGENTTAPE_FAULTS`` adds more.
        strict_faults: a fault that never fired is an error (``FaultNotFiredError``) when the
            cassette closes, not a warning.
    """

    mode_label: str | None = None
    """How a miss names the mode, when not by ``mode`` alone (``agenttape run`` says its own)."""
    rerecord_hint: str = RERECORD_HINT
    """The last line of a miss: how to record what is missing."""
    keeping: Keeping | None = None
    """Where the recording goes when the cassette stops, when not to its own file: a tool
    composes a cassette with one (``agenttape run``'s fragments) instead of subclassing it."""
    shared_plays: SharedPlays | None = None
    """Plays shared with other processes (``agenttape run``'s play log), set before
    ``start``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: Mode | Literal["record"] = "none",
        record_mode: Mode | Literal["record"] | None = None,
        match_on: Iterable[str] | None = None,
        ignore_json_fields: Iterable[str] = (),
        allow_repeats: bool = False,
        live: Iterable[str] = (),
        frozen: Iterable[str] = (),
        redact: Iterable[str] | None = None,
        block_network: bool | None = None,
        allowed_hosts: Iterable[str] = (),
        realtime: bool = False,
        fast_retries: bool = True,
        freeze_time: bool = False,
        tags: dict[str, Any] | None = None,
        on_unused: OnUnused = "ignore",
        max_age: str | float | timedelta | None = None,
        on_expired: OnExpired = "warn",
        faults: Iterable[Fault] = (),
        strict_faults: bool = False,
    ) -> None:
        self._setup(
            Path(path),
            CassetteOptions(
                mode=parse_mode(mode if record_mode is None else record_mode),
                match_on=None if match_on is None else tuple(match_on),
                ignore_json_fields=tuple(ignore_json_fields),
                allow_repeats=allow_repeats,
                live=tuple(live),
                frozen=tuple(frozen),
                redact=None if redact is None else tuple(redact),
                block_network=block_network,
                allowed_hosts=(allowed_hosts,)
                if isinstance(allowed_hosts, str)
                else tuple(allowed_hosts),
                realtime=realtime,
                fast_retries=fast_retries,
                freeze_time=freeze_time,
                tags=dict(tags or {}),
                on_unused=on_unused,
                max_age=max_age,  # type: ignore[arg-type]  # parsed to seconds there
                on_expired=on_expired,
                faults=tuple(faults),
                strict_faults=strict_faults,
            ),
        )

    @classmethod
    def from_options(cls, path: str | os.PathLike[str], options: CassetteOptions) -> Cassette:
        cassette = cls.__new__(cls)
        cassette._setup(Path(path), options)
        return cassette

    def _setup(self, path: Path, options: CassetteOptions) -> None:
        self.path = path
        self.options = options
        self.mode: Mode = options.mode
        self.block_network = self._blocks_network()
        self.matcher = Matcher(options.match_on, options.ignore_json_fields)
        self.redactor = Redactor.from_rules(options.redact)
        self.queue = ReplayQueue(self.matcher, options.allow_repeats)
        self.metadata: dict[str, Any] = {}
        # Every miss raised while active, so code that swallows one cannot hide it.
        self.misses: list[UnmatchedInteractionError] = []
        self.is_active = False
        self._live_scope = Scope(options.live)
        self._frozen_scope = Scope(options.frozen)
        self._recording = False
        self._dirty = False
        self._pending: set[Recording] = set()
        # Connections opened while recording that no adapter made: (host, port) -> library.
        self._unaccounted: dict[tuple[str, int], str | None] = {}
        # new_episodes: what the file held when last read or written (its digest and its
        # interactions), and how many of ours it holds, so a save merges with other writers.
        self._stored: Sequence[Interaction] = []
        self._digest: bytes | None = None
        self._saved = 0
        self._lock = threading.Lock()
        self._token: Token[Tape | None] | None = None
        self._frozen_pool: Cassette | None = None
        self._derived: list[Interaction] | None = None
        self._derived_dirty = False
        self._unfreeze_clock: Callable[[], None] | None = None
        self._interrupted: dict[str, Any] | None = None
        # Mode 'all' over an existing file: what it held, kept beside it when saving.
        self._replaced: list[Interaction] | None = None
        self._left = False  # left (by _close), not yet stored
        self._faults: FaultPlan | None = None
        # Positions a fault's answer used up (a cut stream), and the fault: a miss says so.
        self._used_by_faults: dict[int, str] = {}

    def _blocks_network(self) -> bool:
        option = self.options.block_network
        return self.mode == "none" if option is None else option

    def __repr__(self) -> str:
        return f"<Cassette {str(self.path)!r} mode={self.mode!r} interactions={len(self.interactions)}>"

    # -- options, as the adapters and tests read them ------------------------------------

    @property
    def allow_repeats(self) -> bool:
        return self.options.allow_repeats

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        return self.options.allowed_hosts

    @property
    def realtime(self) -> bool:
        return self.options.realtime

    @property
    def ignore_json_fields(self) -> tuple[str, ...]:
        return self.options.ignore_json_fields

    @property
    def fast_retries(self) -> bool:
        return self.options.fast_retries

    fills_keys = True

    @property
    def tags(self) -> dict[str, Any]:
        return self.options.tags

    @property
    def on_unused(self) -> OnUnused:
        return self.options.on_unused

    @property
    def faults_fired(self) -> list[FiredFault]:
        """The faults that fired while this cassette was open, in order (SPEC §18)."""
        return list(self._faults.fired) if self._faults is not None else []

    # -- public state ------------------------------------------------------------------

    @property
    def interactions(self) -> Sequence[Interaction]:
        """What the cassette holds, in recorded order (a large one replayed is decoded as
        it plays: see ``StoredInteractions``)."""
        return self.queue.interactions

    @property
    def play_count(self) -> int:
        return sum(self.queue.play_counts)

    @property
    def all_played(self) -> bool:
        return all(self.queue.play_counts)

    @property
    def unplayed(self) -> list[Interaction]:
        return self.queue.unplayed

    @property
    def derived_path(self) -> Path:
        """Where a ``live=`` replay writes what its changed requests produced."""
        return self.sibling("derived")

    @property
    def is_recording(self) -> bool:
        """True when misses reach the network and are written down."""
        return self._recording or self.mode == "new_episodes"

    # -- activation --------------------------------------------------------------------

    touches_disk = True

    def _load(self) -> None:
        self._read()

    def _open(self) -> None:
        self._activate()

    def _close(self, exc: BaseException | None) -> None:
        if exc is not None:
            tracebacks.trim(exc)  # a miss shows the caller's code and library, then the message
            self.note_faults(exc)
        self._left = self._leave(exc)

    def note_faults(self, exception: BaseException) -> None:
        """Adds a note (PEP 678) on ``exception`` for each fault that fired, unless it says
        so already: the failure the agent met was injected, not the service's."""
        if self._faults is not None:
            note_fired(exception, self.path, self._faults.fired)

    def _store(self, exc: BaseException | None) -> None:
        if self._left:
            self._left = False
            self._finish(failed=exc is not None)

    def __call__(self, function: F) -> F:
        """Decorate a function (sync or async): each call runs inside a fresh activation."""
        path, options = self.path, self.options
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with Cassette.from_options(path, options):
                    return await function(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with Cassette.from_options(path, options):
                return function(*args, **kwargs)

        return run  # type: ignore[return-value]

    def start(self) -> None:
        """Activate: read the file as the mode says and serve every request from here on."""
        self._read()
        self._activate()

    def _read(self) -> None:
        """Everything activation needs from the disk: the file, as the mode says."""
        if self.is_active:
            raise AgentTapeError(f"cassette {self.path} is already active; open it once at a time")
        self.mode = self.options.effective_mode()
        self.block_network = self._blocks_network()
        exists = self.path.exists()
        if self.mode == "none" and not exists:
            raise CassetteNotFoundError(
                f"cassette {self.path} does not exist and mode is 'none' (replay only). "
                f"Record it first: use_cassette({str(self.path)!r}, mode='once'), "
                f"{MODE_ENVIRONMENT_VARIABLE}=once, pytest --agenttape-record, or "
                "agenttape run --mode once -- COMMAND"
            )
        self.queue = ReplayQueue(self.matcher, self.options.allow_repeats, self.shared_plays)
        self.misses = []
        self._pending, self._dirty = set(), False
        self._digest = None
        loaded = self._load_existing() if exists else []
        self._frozen_pool, self._derived, self._derived_dirty = None, None, False
        self._replaced = None
        faults = self.options.effective_faults()
        self._faults = None
        if faults:
            from .faults import FaultPlan  # only a cassette given faults loads them

            self._faults = FaultPlan(faults)
        self._used_by_faults = {}
        if self._faults is not None and self.mode != "all" and exists:
            # Interactions a fault made while recording are made again by the faults given
            # now, where they fire now: replayed as well, the agent would meet them twice.
            loaded = (
                loaded.without_injected()
                if isinstance(loaded, StoredInteractions)
                else [interaction for interaction in loaded if interaction.injected is None]
            )
        if self.mode == "all" or not exists:
            self._record_anew(loaded, exists)
            loaded = []
        self.queue.load(loaded)
        self._recording = self.mode == "all" or (self.mode == "once" and not exists)
        if not self._recording:
            self.queue.prepare()  # activation pays for the lookups, not the first request
        self._stored, self._saved = loaded, len(loaded)
        self._dirty = self._recording
        self._unaccounted = {}
        if self._live_scope and not self.is_recording:
            self._derived = []
        if self.is_recording:
            files.check_writable(self.path)
        elif self._derived is not None:
            files.check_writable(self.derived_path)

    def _load_existing(self) -> Sequence[Interaction]:
        """The file's interactions, read in every mode: in ``all`` too, since a damaged file
        must fail loudly, never be overwritten. Its age may change the mode. A large one
        replayed is decoded as it plays (``StoredInteractions``)."""
        loaded: Sequence[Interaction]
        if self.mode == "new_episodes":
            data = files.read_bytes(self.path)
            self.metadata, loaded = codec.decode(data, self.path)
            self._digest = files.digest(data)
        elif self.mode == "all":
            self.metadata, loaded = files.read(self.path)
        else:
            self.metadata, loaded = files.read_lazily(self.path)
        if self.options.max_age is not None and self.mode != "all":
            self.mode = mode_after_age(self.path, self.metadata, loaded, self.options, self.mode)
            self.block_network = self._blocks_network()
        return loaded

    def _record_anew(self, loaded: Sequence[Interaction], exists: bool) -> None:
        """A recording from scratch: a new header, and of the previous recording, the frozen
        calls (still served) and what a worse new one is compared with when saved."""
        if loaded and self._frozen_scope:
            self._frozen_pool = Cassette.from_options(self.path, self.options)
            for interaction in loaded:
                if self._frozen_scope.matches(interaction.boundary, interaction.request):
                    self._frozen_pool.queue.add(interaction, played=False)
        from .meta import new_header  # platform, git and package metadata: only to record

        self.metadata = new_header(self.tags)
        self._replaced = list(loaded) if exists and self.mode == "all" else None

    def _activate(self) -> None:
        """Serve every request from here on (what ``_read`` read)."""
        if self.options.freeze_time and not self.is_recording:
            self._unfreeze_clock = freeze_clock(self._recorded_start())
        self.is_active = True
        self._token = runtime.activate(self)

    def _recorded_start(self) -> Any:
        created = self.metadata.get("created_at")
        if created is None and self.interactions:
            created = self.interactions[0].started_at
        return created

    def stop(self, *, failed: bool = False, error: BaseException | None = None) -> None:
        """Deactivate and save what was recorded; ``failed`` (the block raised) skips the
        check for interactions never played. ``error``, the exception (or the signal's, as
        ``KeyboardInterrupt``) that ended the block, marks a recording it cut short as
        interrupted: ``metadata["interrupted"]`` says by what and after how many
        interactions, for ``show``, ``view`` and a later miss to tell."""
        if self._leave(error):
            self._finish(failed=failed)

    def _leave(self, error: BaseException | None) -> bool:
        """Deactivate; False (and nothing done) when this cassette was not active."""
        if not self._deactivate():
            return False
        if self._unfreeze_clock is not None:
            self._unfreeze_clock()
            self._unfreeze_clock = None
        for recording in list(self._pending):
            recording.finish(truncated=True)
        if self._dirty and self.is_recording:
            self._interrupted = (
                None
                if error is None
                else {"after": len(self.interactions), "by": type(error).__name__}
            )
            mark_interrupted(self.metadata, self._interrupted)
        return True

    def _finish(self, *, failed: bool) -> None:
        """What stopping writes and reports, once deactivated."""
        if self._dirty and self._recording and not self.interactions:
            self._dirty = False
            if not self._unaccounted:
                blame.warn(reports.nothing_recorded(self.path))
        if self._unaccounted and self.is_recording:
            blame.warn(
                reports.bypassed(self.path, self._unaccounted, len(self.interactions)),
                AgentTapeWarning,
            )
        if self._dirty:
            self.save()
        if self._derived_dirty:
            self._save_derived()
        if not failed and not self.is_recording and self.on_unused != "ignore":
            reports.report_unused(self.path, self.unplayed, self.on_unused)
        if self._faults is not None:
            reports.report_unfired(self.path, self._faults, self.options.strict_faults, failed)

    def unaccounted(self, host: str, port: int, library: str | None) -> None:
        """A connection this process opened while the cassette was active that no adapter
        made (a library agenttape does not intercept): said when the cassette stops."""
        self._unaccounted.setdefault((host, port), library)

    # -- the decision per request (the Tape) -------------------------------------------

    def begin(self, request: Request, boundary: str = "http") -> Interaction | Recording:
        """Replay or record ``request`` (already in the library-neutral model) made through
        ``boundary`` (``"http"`` or a function boundary such as ``"tool:lookup_order"``).

        Returns the interaction to replay, or a Recording the adapter feeds while the real
        exchange runs. Raises UnmatchedInteractionError when replay is the only option.
        """
        if self._recording:
            request = self.redactor.request(request)
            if bool(self._frozen_scope) and self._frozen_scope.matches(boundary, request):
                return self._serve_frozen(request, boundary)
            return self._live(request, boundary)
        queue = self.queue
        with self._lock:
            # A request that is only matched keeps its headers as they came, unless the match
            # or a fault reads them; what records, answers or shows it is redacted whole.
            whole = queue.matcher.reads_headers or (self._faults is not None and boundary == "http")
            matched = self.redactor.request(request, stored=queue, headers=whole)
            key = boundary, queue.matcher.key(matched)  # queue.key, one call fewer
            if self._faults is not None and boundary == "http":
                injected = self._faulted(self._faults, matched, key)
                if injected is not None:
                    return injected
            found = queue.take(key, matched)
            if found is not None and self._derived is not None:
                self._derived.append(found)
        if found is not None:
            return found
        request = matched if whole else self.redactor.request(request, stored=queue)
        if bool(self._frozen_scope) and self._frozen_scope.matches(boundary, request):
            raise self._miss(request, boundary, frozen=True)
        if self.mode == "new_episodes":
            return self._live(request, boundary)
        if self._derived is not None and self._live_scope.matches(boundary, request):
            return Recording(self, request, boundary, derived=True)
        raise self._miss(request, boundary)

    def _live(self, request: Request, boundary: str) -> Interaction | Recording:
        """``request`` made live: the Recording the adapter feeds, or what a fault answers
        in the network's place."""
        if self._faults is not None and boundary == "http":
            with self._lock:
                injected = self._faulted(self._faults, request, None)
            if injected is not None:
                return injected
        return Recording(self, request, boundary)

    def _faulted(self, plan: FaultPlan, request: Request, key: Key | None) -> Interaction | None:
        """(Under the lock) what a fault answers ``request`` with (``faults.answer``);
        None when no fault fires. With ``key``, while replaying: in place of the recorded
        interaction that would serve it; a fault that changes that one (a cut stream) serves
        it, any other leaves it for the retry. Without, in place of the network: the answer
        is kept in the cassette, marked ``injected``."""
        from .faults.answer import answer  # only a cassette given faults loads it

        if key is None:
            answered = answer(plan, request, None, len(self.interactions), self.realtime)
            if answered is not None:
                self.queue.add(answered.interaction, played=True)
                self._dirty = True
            return None if answered is None else answered.interaction
        position = self.queue.next_position(key, request)
        recorded = None if position is None else self.interactions[position]
        answered = answer(plan, request, recorded, position, self.realtime)
        if answered is None:
            return None
        if (
            answered.serves_recorded
            and self.queue.take(key, request) is not None
            and position is not None
        ):
            self._used_by_faults[position] = answered.interaction.injected or "fault"
        return answered.interaction

    def candidates(self, request: Request, boundary: str = "http") -> list[Interaction] | None:
        if self.is_recording or self._faults is not None or self._derived is not None:
            return None
        queue = self.queue
        with self._lock:
            return queue.candidates(self.redactor.request(request, stored=queue), boundary)

    def precedents(self, interaction: Interaction) -> Precedents | None:
        if not self.queue.overlapping:
            return None
        with self._lock:
            return self.queue.precedents(interaction)

    def _serve_frozen(self, request: Request, boundary: str) -> Interaction:
        """While recording, a frozen call is served from the previous recording, never run."""
        pool = self._frozen_pool
        found = None
        if pool is not None:
            with pool._lock:
                found = pool.queue.take(pool.queue.key(request, boundary))
        if found is None:
            raise (pool or self)._miss(request, boundary, frozen=True)
        with self._lock:
            self.queue.add(found, played=True)
            self._dirty = True
        return found

    def responded(self, recording: Recording) -> None:
        with self._lock:
            if recording.derived:
                assert self._derived is not None
                self._derived.append(recording.interaction)
                self._derived_dirty = True
            else:
                self.queue.add(recording.interaction, played=True)
                self._dirty = True
            self._pending.add(recording)

    def sealed(self, recording: Recording) -> None:
        with self._lock:
            self._pending.discard(recording)

    def _miss(
        self, request: Request, boundary: str = "http", frozen: bool = False
    ) -> UnmatchedInteractionError:
        return self._missing(
            request,
            boundary,
            self.nearest(request, boundary=boundary),
            str(self.path),
            self.rerecord_hint,
            len(self.interactions),
            frozen=frozen,
            interrupted=interrupted(self.metadata),
        )

    def nearest(self, request: Request, limit: int = 3, boundary: str = "http") -> list[Candidate]:
        """Recorded requests of ``boundary`` closest to ``request``, fewest differences first;
        unplayed ones rank before played ones that differ equally. One a fault's answer used
        up says so."""
        candidates = self.queue.nearest(request, limit, boundary, str(self.path))
        for candidate in candidates:
            fault = self._used_by_faults.get(candidate.index)
            if fault is not None:
                candidate.note = (
                    f"played by the injected fault {fault}: the answer it changed was this one"
                )
        return candidates

    # -- persistence -------------------------------------------------------------------


use_cassette = Cassette
"""``use_cassette(path, *, mode="none", ...)``: the cassette at ``path``, to activate for a
block or a function; see ``Cassette`` for the options."""


def load(path: str | os.PathLike[str]) -> Cassette:
    """Read a cassette without activating it."""
    cassette = Cassette(path)
    metadata, interactions = files.read(path)
    cassette.metadata = metadata
    for interaction in interactions:
        cassette.queue.add(interaction, played=False)
    return cassette
