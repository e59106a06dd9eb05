"""The recorded interactions a replay serves, and what a miss tells the user.

Identical requests are served in recorded order, each recorded response once (the last one
again with ``allow_repeats``): a recorded 429 then 200 replays as 429 then 200. The index from
match key to positions is built on the first lookup, so reading a cassette never pays for it.
It holds each key's hash, not the key: a key's parts (the URL's path and query, the body's
canonical form) would cost more memory than the interaction they index, and the few
positions a hash leads to are checked against the request's key before one is served.

A response under way while other requests started (a long-lived event stream, concurrent
calls) knows them as its ``Precedents``: a piece of its body, or its end, that was recorded
after one of them started is not handed over before that request is made again.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ..errors import UnmatchedInteractionError
from ..models import Interaction, Request
from ..options import MODE_ENVIRONMENT_VARIABLE, Mode
from ..text import counted
from ..wire.stored import StoredInteractions
from .matcher import Candidate, Matcher

Key = tuple[str, Hashable]
"""A boundary and a request's match key."""


Wake = Callable[[], None]


class Positions(list[int]):
    """Where the interactions recorded for one key's hash stand in the queue, in order, and
    ``cursor``: how many of them, from the first, were played (a lookup skips them without
    looking up the key a second time). A hash met once is indexed by its position alone."""

    __slots__ = ("cursor",)

    def __init__(self) -> None:
        super().__init__()
        self.cursor = 0


@dataclass(slots=True)
class Precedents:
    """The recorded requests that started while one response was under way: ``starts``
    (seconds after that response's request started, ascending) and their ``positions`` in
    the queue. What the response sent after a request started may have been caused by it
    (an event a tool call announced, a stream the server ended when a DELETE came), so it
    is sent on replay once that request has been made again."""

    queue: ReplayQueue
    starts: tuple[float, ...]
    positions: tuple[int, ...]
    made: int = 0
    """How many of them, from the first, were made again (a request once made stays made)."""

    def begun(self, offset: float) -> bool:
        """Whether every request recorded as starting before ``offset`` was made again."""
        counts, starts, positions = self.queue.play_counts, self.starts, self.positions
        made = self.made
        while made < len(starts) and counts[positions[made]]:
            made += 1
        self.made = made
        return made == len(starts) or starts[made] >= offset

    def watch(self, wake: Wake) -> None:
        """Calls ``wake`` (from any thread) each time the queue serves a request."""
        self.queue.wakers.add(wake)

    def unwatch(self, wake: Wake) -> None:
        self.queue.wakers.discard(wake)


class SharedPlays(Protocol):
    """Plays that several processes share (``agenttape run``'s play log): ``claim`` counts
    the other processes' plays into ``play_counts``, runs ``choose`` while no other process
    can, and records the position chosen, if any, as played by this one."""

    def claim(self, play_counts: list[int], choose: Callable[[], int | None]) -> int | None: ...


class ReplayQueue:
    """Interactions with their play counts; not thread-safe (the cassette holds a lock)."""

    __slots__ = (
        "_index",
        "_own",
        "_start_positions",
        "_starts",
        "allow_repeats",
        "interactions",
        "matcher",
        "overlapping",
        "play_counts",
        "shared_plays",
        "wakers",
    )

    def __init__(
        self,
        matcher: Matcher,
        allow_repeats: bool = False,
        shared_plays: SharedPlays | None = None,
    ) -> None:
        self.matcher = matcher
        self.allow_repeats = allow_repeats
        self.shared_plays = shared_plays
        self.interactions: list[Interaction] | StoredInteractions = []
        self.play_counts: list[int] = []
        self.wakers: set[Wake] = set()
        self._index: dict[int, int | Positions] | None = None
        # With shared plays: the positions this process played (the others, another did).
        self._own: set[int] = set()
        # Start times in order, and whose they are: built on the first ``precedents``.
        self._starts: array[float] | None = None
        self._start_positions: array[int] = array("q")
        # Whether any request started while another's response was under way; until the
        # start order is built, and once a recording adds to it, assumed so. False: no
        # recorded response has precedents (a client that made its requests one after
        # another), and ``precedents`` is None for every one, asked without a lock.
        self.overlapping = True

    def key(self, request: Request, boundary: str = "http") -> Key:
        return boundary, self.matcher.key(request)

    def load(self, interactions: Sequence[Interaction]) -> None:
        """The recorded interactions, none played yet; a lazily read file's stay in it."""
        if isinstance(interactions, StoredInteractions) and not self.interactions:
            self.interactions = interactions
            self.play_counts = [0] * len(interactions)
            return
        for interaction in interactions:
            self.add(interaction, played=False)

    def add(self, interaction: Interaction, played: bool) -> None:
        """Appends one; keeps a built index in step."""
        self.interactions.append(interaction)
        self.play_counts.append(1 if played else 0)
        if self._index is not None:
            self._index_one(self._index, len(self.interactions) - 1)
        if self._starts is not None:
            at = bisect.bisect_right(self._starts, interaction.started_at)
            self._starts.insert(at, interaction.started_at)
            self._start_positions.insert(at, len(self.interactions) - 1)
            self.overlapping = True

    def precedents(self, interaction: Interaction) -> Precedents | None:
        """The requests recorded as starting while the response of ``interaction`` (one of
        this queue's) was under way; None when there were none."""
        duration = interaction.duration
        if duration is None or duration <= 0:
            return None
        starts = self._start_order()
        started = interaction.started_at
        low = bisect.bisect_right(starts, started)
        high = bisect.bisect_left(starts, started + duration, low)
        if low >= high:
            return None
        return Precedents(
            self,
            tuple(start - started for start in starts[low:high]),
            tuple(self._start_positions[low:high]),
        )

    def _start_order(self) -> array[float]:
        """The start times in order (whose they are in ``_start_positions``): sorted once,
        then kept in step by ``add``; held as machine numbers, not one object each."""
        starts = self._starts
        if starts is None:
            interactions = self.interactions
            by_position = (
                interactions.started_at()
                if isinstance(interactions, StoredInteractions)
                else [interaction.started_at for interaction in interactions]
            )
            order = sorted(range(len(by_position)), key=by_position.__getitem__)
            starts = self._starts = array("d", [by_position[position] for position in order])
            self._start_positions = array("q", order)
            self.overlapping = self._any_precedents()
        return starts

    def _any_precedents(self) -> bool:
        """Whether a request started while an earlier-started response was under way (as
        ``precedents`` counts: after its start, before its end)."""
        assert self._starts is not None
        interactions = self.interactions
        durations = (
            interactions.durations()
            if isinstance(interactions, StoredInteractions)
            else [interaction.duration for interaction in interactions]
        )
        ended = group_ended = float("-inf")
        group_start = None
        for start, position in zip(self._starts, self._start_positions, strict=True):
            if start != group_start:  # requests starting together are no precedents
                ended = max(ended, group_ended)
                group_start, group_ended = start, float("-inf")
            if start < ended:
                return True
            duration = durations[position]
            if duration is not None and duration > 0:
                group_ended = max(group_ended, start + duration)
        return False

    def prepare(self) -> None:
        """Builds now what replay looks things up in (the match index, the start-time order),
        so that a cassette's first request does not pay for them: sorting 20,000 start times
        takes milliseconds."""
        self.build_index()
        self._start_order()

    def _index_one(self, index: dict[int, int | Positions], position: int) -> None:
        interactions = self.interactions
        if isinstance(interactions, StoredInteractions):
            # Its requests are not held: their URLs and bodies are remembered by hash.
            boundary, request = interactions.recorded(position)
            code = hash((boundary, self.matcher.key(request, remember="hashes")))
        else:
            interaction = interactions[position]
            code = hash((interaction.boundary, self.matcher.key(interaction.request, True)))
        known = index.get(code)
        if known is None:
            index[code] = position
        elif type(known) is int:
            positions = index[code] = Positions()
            positions.append(known)
            positions.append(position)
        else:
            assert isinstance(known, Positions)
            known.append(position)

    def _serves(self, position: int, key: Key, request: Request | None = None) -> bool:
        """Whether the interaction at ``position`` was recorded for ``key`` (and not for
        another key of the same hash). A ``request`` whose method, URL and body are the
        recorded ones, byte for byte, has its key without the key being made again."""
        interaction = self.interactions[position]
        if interaction.boundary != key[0]:
            return False
        recorded = interaction.request
        if request is not None and recorded.body == request.body:
            if (
                recorded.url == request.url
                and recorded.method == request.method
                and not self.matcher.reads_headers
            ):
                return True
            # The bodies agree byte for byte: a body known by its hash (``Digest``) is.
            return self.matcher.key(recorded) == key[1]
        return self.matcher.key(recorded, exact=True) == key[1]

    def build_index(self) -> dict[int, int | Positions]:
        """The index, built now if this is the first lookup."""
        if self._index is None:
            index: dict[int, int | Positions] = {}
            for position in range(len(self.interactions)):
                self._index_one(index, position)
            self._index = index
            if isinstance(self.interactions, StoredInteractions):
                self.interactions.forget_requests()
        return self._index

    def recorded_body(self, body: bytes) -> bool:
        """Whether a recorded request whose body the match compares has exactly ``body``."""
        self.build_index()
        return self.matcher.remembers_body(body)

    def recorded_url(self, url: str) -> bool:
        """Whether a recorded request has exactly ``url``."""
        if self._index is None:
            self.build_index()
        return self.matcher.remembers_url(url)

    def take(self, key: Key, request: Request | None = None) -> Interaction | None:
        """The next unplayed interaction recorded for ``key`` (made from ``request``, when
        given), counted as played."""
        if self.shared_plays is None:
            position = self.next_position(key, request)
        else:
            position = self.shared_plays.claim(
                self.play_counts, lambda: self.next_position(key, request)
            )
        if position is None:
            return None
        self.play_counts[position] += 1
        if self.shared_plays is not None:
            self._own.add(position)
        if self.wakers:  # a response waiting for its turn (rare): wake it
            for wake in tuple(self.wakers):
                wake()
        return self.interactions[position]

    def next_position(self, key: Key, request: Request | None = None) -> int | None:
        """Where the interaction ``take`` would serve stands, without playing it."""
        index = self._index
        found = (index if index is not None else self.build_index()).get(hash(key))
        if found is None:
            return None
        if type(found) is int:
            if (self.allow_repeats or not self.play_counts[found]) and self._serves(
                found, key, request
            ):
                return found
            return None
        assert isinstance(found, Positions)
        cursor = found.cursor
        counts = self.play_counts
        while cursor < len(found) and counts[found[cursor]]:
            cursor += 1
        found.cursor = cursor
        for position in found[cursor:]:
            if not counts[position] and self._serves(position, key, request):
                return position
        if self.allow_repeats:
            for position in reversed(found):
                if self._serves(position, key):
                    return position
        return None

    def candidates(self, request: Request, boundary: str = "http") -> list[Interaction]:
        """The interactions of ``boundary`` whose requests match ``request`` in every field
        but the body, in recorded order: those not played, then, with ``allow_repeats``,
        those played."""
        matcher = self.matcher
        head = matcher.key(replace(request, body=b""))
        fresh: list[Interaction] = []
        again: list[Interaction] = []
        for interaction, count in zip(self.interactions, self.play_counts, strict=True):
            if (
                interaction.boundary == boundary
                and matcher.key(replace(interaction.request, body=b"")) == head
            ):
                (again if count else fresh).append(interaction)
        return fresh + again if self.allow_repeats else fresh

    @property
    def unplayed(self) -> list[Interaction]:
        return [
            i for i, count in zip(self.interactions, self.play_counts, strict=False) if not count
        ]

    def nearest(
        self, request: Request, limit: int = 3, boundary: str = "http", path: str = "CASSETTE"
    ) -> list[Candidate]:
        """Recorded requests of ``boundary`` closest to ``request``, fewest differences first;
        unplayed ones rank before played ones that differ equally. One that does not differ
        says why it was not served: another process of the run played it, or (never
        expected) nothing explains it; ``path`` names the cassette in what to look at."""
        scored = []
        for position, interaction in enumerate(self.interactions):
            if interaction.boundary != boundary:
                continue
            differences = self.matcher.differences(interaction.request, request)
            weight = sum(
                10 if d.split(":", 1)[0] in ("method", "url.host", "url.path", "url.scheme") else 1
                for d in differences
            )
            played = bool(self.play_counts[position])
            scored.append((weight, played, position, differences))
        scored.sort(key=lambda item: item[:3])
        return [
            Candidate(
                position,
                self.interactions[position],
                differences,
                played,
                "" if differences else self._unserved(position, played, path),
            )
            for _weight, played, position, differences in scored[:limit]
        ]

    def _unserved(self, position: int, played: bool, path: str) -> str:
        """Why the interaction at ``position``, equal to the request in every field matched
        on, was not served."""
        if played:
            if self.shared_plays is not None and position not in self._own:
                return "played by another process of this run (agenttape run shares the plays)"
            return ""
        fields = ", ".join(self.matcher.fields) or "nothing"
        return (
            f"equal in every field matched on ({fields}) and not played, yet not served: "
            f"compare it with the request sent (agenttape show {path} --index {position}) "
            "and report it"
        )


RERECORD_HINT = (
    f"To re-record: set {MODE_ENVIRONMENT_VARIABLE}=all (or mode='all', or pytest "
    "--agenttape-record, or agenttape run --mode all), or mode='new_episodes' to add only the "
    "missing requests."
)


def miss_error(
    request: Request,
    *,
    boundary: str,
    candidates: list[Candidate],
    path: str,
    mode: str,
    count: int,
    mode_label: str | None = None,
    rerecord: str = RERECORD_HINT,
    frozen: bool = False,
    interrupted: str | None = None,
    repeats: str = "allow_repeats=True",
) -> UnmatchedInteractionError:
    """The error for a request nothing recorded serves: what was asked, what comes nearest
    and how it differs, and how to record it; ``repeats``, the option that serves a played
    one again."""
    lines = [
        f"No recorded interaction matches {request.method} {request.url}",
        f"cassette: {path} (mode {mode_label or repr(mode)}, {counted(count, 'interaction')})",
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
            f"({repeats} serves the last one again)."
        )
    if candidates:
        lines.append("Nearest recorded requests:")
        lines.extend(str(c) for c in candidates)
    elif count == 0:
        lines.append(
            "The cassette holds no interactions at all: the recording that wrote it captured "
            "nothing (did the code fail before its first request, for a missing API key say?)."
        )
    else:
        what = "HTTP interactions" if boundary == "http" else f"calls of {boundary}"
        lines.append(f"The cassette holds no {what}.")
    if interrupted is not None:
        lines.append(
            f"This cassette's recording was cut short ({interrupted}): what the code did "
            "after that was never recorded. Record it again to the end."
        )
    lines.append(rerecord)
    return UnmatchedInteractionError(
        "\n".join(lines),
        request=request,
        candidates=candidates,
        cassette_path=path,
        mode=mode,
    )


class KeepsMisses:
    """A tape that keeps every miss it raised, so code that swallows the exception cannot
    hide it; ``_missing`` builds one with the tape's mode."""

    mode: Mode
    mode_label: str | None
    misses: list[UnmatchedInteractionError]
    repeats_option = "allow_repeats=True"
    """The option that serves a played interaction again, as a miss names it."""
    _lock: threading.Lock

    def _missing(
        self,
        request: Request,
        boundary: str,
        candidates: list[Candidate],
        path: str,
        rerecord: str,
        count: int,
        *,
        frozen: bool = False,
        interrupted: str | None = None,
    ) -> UnmatchedInteractionError:
        error = miss_error(
            request,
            boundary=boundary,
            candidates=candidates,
            path=path,
            mode=self.mode,
            mode_label=self.mode_label,
            rerecord=rerecord,
            count=count,
            frozen=frozen,
            interrupted=interrupted,
            repeats=self.repeats_option,
        )
        self.missed(error)
        return error

    def missed(self, error: UnmatchedInteractionError) -> None:
        """Keeps a miss, so code that swallows the exception cannot hide it."""
        with self._lock:
            self.misses.append(error)
