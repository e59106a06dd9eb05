"""The cassette: decides per request whether to replay or record, and owns the file."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Hashable, Iterable
from contextvars import Token
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from . import _format, _locking, _provider_keys, _runtime
from ._clock import freeze_clock
from ._errors import (
    AgentTapeError,
    CassetteFormatError,
    CassetteNotFoundError,
    CassetteWriteError,
    UnmatchedInteractionError,
)
from ._matching import Candidate, Matcher
from ._models import Failure, Headers, Interaction, Request, Response
from ._redaction import Redactor
from ._scope import Scope

MODES = ("none", "once", "new_episodes", "all")
ON_UNUSED = ("ignore", "warn", "fail")
MODE_ENVIRONMENT_VARIABLE = "AGENTTAPE_MODE"
STALE_TEMPORARY = 3600.0  # seconds: no write of a cassette takes this long

F = TypeVar("F", bound=Callable[..., Any])


class Recording:
    """One live exchange being written down while the caller reads it.

    The interaction joins the cassette when the response head arrives (or the transport
    fails), so recorded order is the order responses started; the body fills in chunk by
    chunk and is sealed by ``finish``.
    """

    __slots__ = ("_cassette", "_parts", "_t0", "derived", "finished", "interaction")

    def __init__(
        self, cassette: Cassette, request: Request, boundary: str = "http", derived: bool = False
    ) -> None:
        self._cassette = cassette
        self._parts: list[bytes] = []
        self._t0 = time.perf_counter()
        self.finished = False
        self.derived = derived
        self.interaction = Interaction(request, None, None, boundary, time.time())

    def respond(self, status: int, reason: str, http_version: str, headers: Headers) -> None:
        self.interaction.ttfb = time.perf_counter() - self._t0
        self.interaction.response = Response(
            status, reason, http_version, self._cassette.redactor.response_headers(headers)
        )
        self._cassette._record(self)

    def chunk(self, data: bytes) -> None:
        if data and not self.finished:
            response = self.interaction.response
            assert response is not None
            self._parts.append(data)
            response.chunks.append((len(data), time.perf_counter() - self._t0))

    def finish(self, truncated: bool = False) -> None:
        if self.finished:
            return
        self.finished = True
        self.interaction.duration = time.perf_counter() - self._t0
        response = self.interaction.response
        if response is not None:
            response.body = b"".join(self._parts)
            response.truncated = truncated
            self._parts = []
        self._cassette._sealed(self)
        # A client may keep a read response in a reference cycle until the garbage collector
        # runs (httpx does); letting go of the cassette here keeps it and its recordings from
        # living on through such cycles, making every collection until then walk them.
        del self._cassette

    def fail(self, kind: str, type_name: str, message: str) -> None:
        """A transport error: instead of a response, or cutting a body short."""
        if self.finished:
            return
        self.interaction.error = Failure(kind=kind, type=type_name, message=message)
        if self.interaction.response is None:
            self.interaction.ttfb = None
            self._cassette._record(self)
        self.finish(truncated=self.interaction.response is not None)


class Cassette:
    """A file of recorded interactions, active as a context manager or decorator."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: str = "none",
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
        on_unused: str = "ignore",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if on_unused not in ON_UNUSED:
            raise ValueError(f"on_unused must be one of {', '.join(ON_UNUSED)}; got {on_unused!r}")
        self.path = Path(path)
        self.mode = mode
        self.allow_repeats = allow_repeats
        self.live = tuple(live)
        self.frozen = tuple(frozen)
        self.block_network = mode == "none" if block_network is None else block_network
        if isinstance(allowed_hosts, str):
            allowed_hosts = (allowed_hosts,)
        self.allowed_hosts = tuple(allowed_hosts)
        self.realtime = realtime
        self.fast_retries = fast_retries
        self.freeze_time = freeze_time
        self.tags = dict(tags or {})
        _format.check_tags(self.tags)
        self.on_unused = on_unused
        self._live_scope = Scope(self.live)
        self._frozen_scope = Scope(self.frozen)
        self._options: dict[str, Any] = {
            "mode": mode,
            "match_on": None if match_on is None else tuple(match_on),
            "ignore_json_fields": tuple(ignore_json_fields),
            "allow_repeats": allow_repeats,
            "live": self.live,
            "frozen": self.frozen,
            "redact": None if redact is None else tuple(redact),
            "block_network": block_network,
            "allowed_hosts": self.allowed_hosts,
            "realtime": realtime,
            "fast_retries": fast_retries,
            "freeze_time": freeze_time,
            "tags": tags,
            "on_unused": on_unused,
        }
        self.matcher = Matcher(match_on, ignore_json_fields)
        self.redactor = Redactor.from_rules(redact)
        self.metadata: dict[str, Any] = {}
        self.interactions: list[Interaction] = []
        # Every miss raised while active, so code that swallows one cannot hide it.
        self.misses: list[UnmatchedInteractionError] = []
        self._play_counts: list[int] = []
        # Built when the cassette opens, or on the first lookup of a load()ed one: reading a
        # cassette never pays for it.
        self._index: dict[Hashable, list[int]] | None = None
        self._cursors: dict[Hashable, int] = {}
        self._recording = False
        self._dirty = False
        self._pending: set[Recording] = set()
        # new_episodes: what the file held when last read or written (its digest and its
        # interactions), and how many of ours it holds, so a save merges with other writers.
        self._stored: list[Interaction] = []
        self._digest: bytes | None = None
        self._saved = 0
        self._lock = threading.Lock()
        self._token: Token[Cassette | None] | None = None
        self._frozen_pool: Cassette | None = None
        self._derived: list[Interaction] | None = None
        self._derived_dirty = False
        self._unfreeze_clock: Callable[[], None] | None = None
        self._placeholder_keys = False
        self.is_active = False

    def __repr__(self) -> str:
        return f"<Cassette {str(self.path)!r} mode={self.mode!r} interactions={len(self.interactions)}>"

    # -- public state ------------------------------------------------------------------

    @property
    def play_count(self) -> int:
        return sum(self._play_counts)

    @property
    def all_played(self) -> bool:
        return all(self._play_counts)

    @property
    def unplayed(self) -> list[Interaction]:
        return [
            i for i, count in zip(self.interactions, self._play_counts, strict=False) if not count
        ]

    @property
    def derived_path(self) -> Path:
        """Where a ``live=`` replay writes what its changed requests produced."""
        stem = (
            self.path.name[: -len(".msgpack")] if self.path.suffix == ".msgpack" else self.path.name
        )
        return self.path.with_name(f"{stem}.derived.msgpack")

    @property
    def is_recording(self) -> bool:
        """True when misses reach the network and are written down."""
        return self._recording or self.mode == "new_episodes"

    # -- activation --------------------------------------------------------------------

    def _copy(self) -> Cassette:
        return Cassette(self.path, **self._options)

    def __enter__(self) -> Cassette:
        self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop(failed=exc is not None)

    async def __aenter__(self) -> Cassette:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)

    def __call__(self, function: F) -> F:
        """Decorate a function (sync or async): each call runs inside a fresh activation."""
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with self._copy():
                    return await function(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._copy():
                return function(*args, **kwargs)

        return run  # type: ignore[return-value]

    def _effective_mode(self) -> str:
        override = os.environ.get(MODE_ENVIRONMENT_VARIABLE)
        if override:
            if override not in MODES:
                raise AgentTapeError(
                    f"{MODE_ENVIRONMENT_VARIABLE}={override!r} is not a mode; "
                    f"use one of {', '.join(MODES)}"
                )
            return override
        return self.mode

    def _start(self) -> None:
        if self.is_active:
            raise AgentTapeError(f"cassette {self.path} is already active; open it once at a time")
        self.mode = self._effective_mode()
        option = self._options["block_network"]
        self.block_network = self.mode == "none" if option is None else option
        exists = self.path.exists()
        if self.mode == "none" and not exists:
            raise CassetteNotFoundError(
                f"cassette {self.path} does not exist and mode is 'none' (replay only). "
                f"Record it first: use_cassette({str(self.path)!r}, mode='once'), "
                f"or run with {MODE_ENVIRONMENT_VARIABLE}=once"
            )
        self.interactions, self._play_counts = [], []
        self.misses = []
        self._index, self._cursors = None, {}
        self._pending, self._dirty = set(), False
        self._digest = None
        if exists:
            # Also read in mode 'all': a damaged file must fail loudly, never be overwritten.
            if self.mode == "new_episodes":
                data = _read_bytes(self.path)
                self.metadata, loaded = _format.decode(data, self.path)
                self._digest = _digest(data)
            else:
                self.metadata, loaded = read(self.path)
        else:
            loaded = []
        self._frozen_pool, self._derived, self._derived_dirty = None, None, False
        if self.mode == "all" or not exists:
            if loaded and self._frozen_scope:
                # Re-recording keeps serving frozen calls from the previous recording.
                self._frozen_pool = self._copy()
                for interaction in loaded:
                    if self._frozen_scope.matches(interaction.boundary, interaction.request):
                        self._frozen_pool._add(interaction, played=False)
            from ._meta import new_header  # platform, git and package metadata: only to record

            self.metadata = new_header(self.tags)
            loaded = []
        for interaction in loaded:
            self._add(interaction, played=False)
        self._recording = self.mode == "all" or (self.mode == "once" and not exists)
        if not self._recording:
            self._built_index()  # activation pays for the index, not the first request
        self._stored, self._saved = loaded, len(loaded)
        self._dirty = self._recording
        if self._live_scope and not self.is_recording:
            self._derived = []
        if self.freeze_time and not self.is_recording:
            self._unfreeze_clock = freeze_clock(self._recorded_start())
        # Replay only ('none', or 'once' over an existing file): SDKs get placeholder keys.
        self._placeholder_keys = not self.is_recording
        if self._placeholder_keys:
            _provider_keys.acquire()
        self.is_active = True
        self._token = _runtime.activate(self)

    def _recorded_start(self) -> Any:
        created = self.metadata.get("created_at")
        if created is None and self.interactions:
            created = self.interactions[0].started_at
        return created

    def _stop(self, failed: bool) -> None:
        if not self.is_active:
            return
        self.is_active = False
        assert self._token is not None
        _runtime.deactivate(self, self._token)
        self._token = None
        if self._unfreeze_clock is not None:
            self._unfreeze_clock()
            self._unfreeze_clock = None
        if self._placeholder_keys:
            self._placeholder_keys = False
            _provider_keys.release()
        for recording in list(self._pending):
            recording.finish(truncated=True)
        if self._dirty:
            self.save()
        if self._derived_dirty:
            self._save_derived()
        if not failed and not self.is_recording and self.on_unused != "ignore":
            self._report_unused()

    def _report_unused(self) -> None:
        unplayed = self.unplayed
        if not unplayed:
            return
        lines = "\n".join(f"  {i.request.method} {i.request.url}" for i in unplayed[:10]) + (
            "\n  ..." if len(unplayed) > 10 else ""
        )
        message = (
            f"{len(unplayed)} recorded interaction(s) of cassette {self.path} were never played "
            f"(the code no longer makes these requests; re-record to drop them):\n{lines}"
        )
        if self.on_unused == "fail":
            raise AgentTapeError(message)
        warnings.warn(message, stacklevel=3)

    # -- index -------------------------------------------------------------------------

    def _add(self, interaction: Interaction, played: bool) -> None:
        """Append under the lock (or before activation); keeps a built index in step."""
        self.interactions.append(interaction)
        self._play_counts.append(1 if played else 0)
        if self._index is not None:
            self._index_one(self._index, len(self.interactions) - 1)

    def _index_one(self, index: dict[Hashable, list[int]], position: int) -> None:
        interaction = self.interactions[position]
        key = (interaction.boundary, self.matcher.key(interaction.request, remember=True))
        index.setdefault(key, []).append(position)

    def _built_index(self) -> dict[Hashable, list[int]]:
        """The index, built now if this is the first lookup (called under the lock)."""
        if self._index is None:
            index: dict[Hashable, list[int]] = {}
            for position in range(len(self.interactions)):
                self._index_one(index, position)
            self._index = index
        return self._index

    # -- the decision per request ------------------------------------------------------

    def begin(self, request: Request, boundary: str = "http") -> Interaction | Recording:
        """Replay or record ``request`` (already in the library-neutral model) made through
        ``boundary`` (``"http"`` or a function boundary such as ``"tool:lookup_order"``).

        Returns the interaction to replay, or a Recording the adapter feeds while the real
        exchange runs. Raises UnmatchedInteractionError when replay is the only option.
        """
        request = self.redactor.request(request)
        frozen = bool(self._frozen_scope) and self._frozen_scope.matches(boundary, request)
        if self._recording:
            if frozen:
                return self._serve_frozen(request, boundary)
            return Recording(self, request, boundary)
        key = (boundary, self.matcher.key(request))
        with self._lock:
            found = self._take(key)
            if found is not None and self._derived is not None:
                self._derived.append(found)
        if found is not None:
            return found
        if frozen:
            raise self._miss(request, boundary, frozen=True)
        if self.mode == "new_episodes":
            return Recording(self, request, boundary)
        if self._derived is not None and self._live_scope.matches(boundary, request):
            return Recording(self, request, boundary, derived=True)
        raise self._miss(request, boundary)

    def _serve_frozen(self, request: Request, boundary: str) -> Interaction:
        """While recording, a frozen call is served from the previous recording, never run."""
        pool = self._frozen_pool
        found = None
        if pool is not None:
            with pool._lock:
                found = pool._take((boundary, pool.matcher.key(request)))
        if found is None:
            raise (pool or self)._miss(request, boundary, frozen=True)
        with self._lock:
            self._add(found, played=True)
            self._dirty = True
        return found

    def _take(self, key: Hashable) -> Interaction | None:
        positions = self._built_index().get(key)
        if not positions:
            return None
        cursor = self._cursors.get(key, 0)
        counts = self._play_counts
        while cursor < len(positions) and counts[positions[cursor]]:
            cursor += 1
        self._cursors[key] = cursor
        if cursor < len(positions):
            position = positions[cursor]
        elif self.allow_repeats:
            position = positions[-1]
        else:
            return None
        counts[position] += 1
        return self.interactions[position]

    def _record(self, recording: Recording) -> None:
        with self._lock:
            if recording.derived:
                assert self._derived is not None
                self._derived.append(recording.interaction)
                self._derived_dirty = True
            else:
                self._add(recording.interaction, played=True)
                self._dirty = True
            self._pending.add(recording)

    def _sealed(self, recording: Recording) -> None:
        with self._lock:
            self._pending.discard(recording)

    def _miss(
        self, request: Request, boundary: str = "http", frozen: bool = False
    ) -> UnmatchedInteractionError:
        candidates = self.nearest(request, boundary=boundary)
        lines = [
            f"No recorded interaction matches {request.method} {request.url}",
            f"cassette: {self.path} (mode {self.mode!r}, {len(self.interactions)} interactions)",
        ]
        if frozen:
            lines.append(
                "This call is frozen (frozen=...): it is only ever served from the cassette "
                "and never runs for real, in any mode."
            )
        exact = [c for c in candidates if not c.differences]
        if exact and all(c.played for c in exact):
            lines.append(
                f"Every matching interaction was already played ({len(exact)}); the code now "
                "makes this request more often than when it was recorded "
                "(allow_repeats=True serves the last one again)."
            )
        if candidates:
            lines.append("Nearest recorded requests:")
            lines.extend(str(c) for c in candidates)
        else:
            what = "HTTP interactions" if boundary == "http" else f"calls of {boundary}"
            lines.append(f"The cassette holds no {what}.")
        lines.append(
            f"To re-record: set {MODE_ENVIRONMENT_VARIABLE}=all (or mode='all', or pytest "
            f"--agenttape-record), or mode='new_episodes' to add only the missing requests."
        )
        error = UnmatchedInteractionError(
            "\n".join(lines),
            request=request,
            candidates=candidates,
            cassette_path=str(self.path),
            mode=self.mode,
        )
        with self._lock:
            self.misses.append(error)
        return error

    def nearest(self, request: Request, limit: int = 3, boundary: str = "http") -> list[Candidate]:
        """Recorded requests of ``boundary`` closest to ``request``, fewest differences first;
        unplayed ones rank before played ones that differ equally."""
        scored = []
        for position, interaction in enumerate(self.interactions):
            if interaction.boundary != boundary:
                continue
            differences = self.matcher.differences(interaction.request, request)
            weight = sum(
                10 if d.split(":", 1)[0] in ("method", "url.host", "url.path", "url.scheme") else 1
                for d in differences
            )
            played = bool(self._play_counts[position])
            scored.append((weight, played, position, differences))
        scored.sort(key=lambda item: item[:3])
        return [
            Candidate(position, self.interactions[position], differences, played)
            for _weight, played, position, differences in scored[:limit]
        ]

    # -- persistence -------------------------------------------------------------------

    def save(self) -> None:
        if self.mode == "new_episodes":
            self._save_merged()
            return
        with self._lock:
            interactions = list(self.interactions)
        write_atomic(self.path, _format.encode_pieces(self.metadata, interactions))
        self._dirty = False

    def _save_derived(self) -> None:
        """The run as it happened (replayed and live calls, in order) beside the original,
        which is never modified."""
        with self._lock:
            interactions = list(self._derived or [])
        from ._meta import new_header

        original_tags = self.metadata.get("tags")
        tags = {**(original_tags if isinstance(original_tags, dict) else {}), **self.tags}
        header = new_header(tags)
        header["derived_from"] = {"path": str(self.path), "run_id": self.metadata.get("run_id")}
        write_atomic(self.derived_path, _format.encode_pieces(header, interactions))
        self._derived_dirty = False

    def _save_merged(self) -> None:
        """Appends what this run recorded to the file as it is now, under the cassette lock:
        another process that appended since this one read the file loses nothing."""
        with _locking.locked(self.path):
            with self._lock:
                interactions = list(self.interactions)
            header, stored = self.metadata, self._stored
            try:
                current = _read_bytes(self.path)
            except CassetteNotFoundError:
                current = None
            if current is not None and _digest(current) != self._digest:
                header, stored = _format.decode(current, self.path)
            merged = stored + interactions[self._saved :]
            data = _format.encode(header, merged)
            write_atomic(self.path, data)
            self._stored, self._digest, self._saved = merged, _digest(data), len(interactions)
            self._dirty = False


def write_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Temporary file, fsync, rename: readers see the old file or the new one, never half.

    ``data`` may come in pieces (``_format.encode_pieces``); an error while producing them
    leaves the file it would replace untouched, as any other failed write does.
    """
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=directory
        )
    except OSError as exc:
        raise CassetteWriteError(f"cannot write cassette {path}: {exc}") from exc
    try:
        # mkstemp creates the file 0600; a cassette is a shared artefact, so it keeps the mode
        # of the file it replaces, or gets the one the umask gives any new file.
        os.fchmod(descriptor, _file_mode(path))
        with os.fdopen(descriptor, "wb", buffering=_WRITE_BUFFER) as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                handle.writelines(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise CassetteWriteError(f"cannot write cassette {path}: {exc}") from exc
        raise
    with contextlib.suppress(OSError):
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    _sweep_temporaries(path)


# Pieces are gathered into writes of this size: few system calls, and a buffer small
# enough for the allocator to reuse rather than map fresh pages for on every save.
_WRITE_BUFFER = 1 << 17


def _file_mode(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_UMASK


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _sweep_temporaries(path: Path) -> None:
    """Deletes temporary files of ``path`` that a writer killed mid-write left behind; only
    old ones, so another process's write in progress is never touched."""
    prefix, cutoff = f".{path.name}.", time.time() - STALE_TEMPORARY
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CassetteNotFoundError(f"cassette {os.fspath(path)} does not exist") from None
    except IsADirectoryError:
        raise CassetteFormatError(f"{os.fspath(path)}: is a directory, not a cassette") from None


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Interaction]]:
    try:
        with open(path, "rb") as handle:
            streamed = _format.decode_stream(handle)
    except (FileNotFoundError, IsADirectoryError):
        streamed = None  # reading the bytes below raises the error that says so
    if streamed is not None:
        return streamed
    return _format.decode(_read_bytes(path), path)


def use_cassette(path: str | os.PathLike[str], **options: Any) -> Cassette:
    """Activate ``path`` for a block or a function; see Cassette for the options."""
    return Cassette(path, **options)


def load(path: str | os.PathLike[str]) -> Cassette:
    """Read a cassette without activating it."""
    cassette = Cassette(path)
    cassette.metadata, cassette.interactions = read(path)
    cassette._play_counts = [0] * len(cassette.interactions)
    return cassette
