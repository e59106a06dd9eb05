"""The interactions of a large cassette, kept as where they stand in its file until played.

Decoded, an interaction holds about three times its recorded bytes in Python objects (the
strings, tuples and dataclasses around them); a cassette of 20,000 holds tens of MB, and one
larger than memory could not replay at all. Read lazily, a cassette keeps per interaction
only its place in the file and its two times (for the replay order), and an interaction is
decoded when something asks for it. While anything holds one (the replay serving it, the
caller), asking again gives the same object, so a replayed failure names its interaction;
once let go, it is decoded again when asked for: replaying a cassette of large bodies holds
one body at a time.

The file is read through a descriptor of its own, opened when the cassette was read: a save
or another process that replaces the file meanwhile replaces the path, not what this
descriptor reads, so every offset stays true. Where ``os.pread`` is missing (Windows, where an
open file also blocks replacing it) cassettes are decoded whole, as before.
"""

from __future__ import annotations

import math
import os
import weakref
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

import msgpack

from ..errors import CassetteFormatError
from ..models import Failure, Interaction, Request, Response
from .fast_read import SharedPairs, decode_plain

LAZY_FROM = 16 << 20
"""A cassette whose interactions would hold this much memory decoded (``decoded_size``) is
read lazily. Below it they cost little, and decoding each again on play (a read, an unpack
and the objects, 7 µs and more per request) would be paid for nothing."""

OBJECTS_PER_INTERACTION = 1024
"""What an interaction's objects hold decoded beyond its bytes in the file (strings, tuples,
the dataclasses): 20,000 recorded GETs held 1,390 B each for 732 B of file."""


def decoded_size(file_size: int, interactions: int) -> int:
    """About what a file's interactions hold once decoded: its bytes, and the objects
    around them, which a file of many small interactions is mostly made of."""
    return file_size + interactions * OBJECTS_PER_INTERACTION


LAZY_POSSIBLE = hasattr(os, "pread")

_SHARED_ROOM = 1 << 16
"""Header pairs kept once across the interactions decoded on play."""


class StoredInteractions(Sequence[Interaction]):
    """A cassette's interactions, each decoded from the file when asked for.

    ``recorded`` gives an interaction's boundary and request for the match index without
    decoding it again: the requests read while loading are held until ``forget_requests``
    (the index is built at activation). Interactions added later (``append``) are held as
    they are."""

    __slots__ = (
        "__weakref__",
        "_added",
        "_boundaries",
        "_durations",
        "_ends",
        "_fd",
        "_injected",
        "_kept",
        "_last",
        "_path",
        "_requests",
        "_seen",
        "_started",
        "_starts",
    )

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self._path = path
        weakref.finalize(self, os.close, fd)
        self._starts = array("q")
        self._ends = array("q")
        self._started = array("d")
        self._durations = array("d")  # NaN: none recorded
        self._injected = bytearray()
        self._boundaries: list[str] | None = []
        self._requests: list[Request] | None = []
        # Weak references (no callback: a dead one is replaced when its position is asked
        # for again), by position.
        self._kept: dict[int, weakref.ref[Interaction]] = {}
        self._last: Interaction | None = None  # the one just decoded, for the caller's next ask
        self._added: list[Interaction] = []
        self._seen = SharedPairs(_SHARED_ROOM * 64)

    def note(self, interaction: Interaction, start: int, end: int) -> None:
        """Keeps what the loader decoded at ``start``..``end`` of the file: its place, its
        times, and its request until the index is built."""
        self._starts.append(start)
        self._ends.append(end)
        self._started.append(interaction.started_at)
        duration = interaction.duration
        self._durations.append(math.nan if duration is None else duration)
        self._injected.append(interaction.injected is not None)
        if self._boundaries is not None and self._requests is not None:
            self._boundaries.append(interaction.boundary)
            self._requests.append(interaction.request)

    @property
    def stored(self) -> int:
        """How many interactions the file holds (those appended since excluded)."""
        return len(self._starts)

    def __len__(self) -> int:
        return len(self._starts) + len(self._added)

    @overload
    def __getitem__(self, position: int) -> Interaction: ...

    @overload
    def __getitem__(self, position: slice) -> list[Interaction]: ...

    def __getitem__(self, position: int | slice) -> Interaction | list[Interaction]:
        if isinstance(position, slice):
            return [self[index] for index in range(len(self))[position]]
        if position < 0:
            position += len(self)
        reference = self._kept.get(position)
        if reference is not None:
            kept = reference()
            if kept is not None:
                return kept
        stored = len(self._starts)
        if position >= stored:
            return self._added[position - stored]
        interaction = self._last = self._decode(position)
        self._kept[position] = weakref.ref(interaction)
        return interaction

    def __iter__(self) -> Iterator[Interaction]:
        """Every interaction, those no one holds decoded for the caller alone."""
        kept = self._kept
        for position in range(len(self._starts)):
            reference = kept.get(position)
            interaction = None if reference is None else reference()
            yield interaction if interaction is not None else self._decode(position)
        yield from self._added

    def __eq__(self, other: object) -> bool:
        """Equal, as a list of the same interactions is (``Cassette.interactions`` of a small
        cassette is a list)."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def append(self, interaction: Interaction) -> None:
        self._added.append(interaction)

    def position_of(self, interaction: Interaction) -> int | None:
        """Where ``interaction`` (this very object) stands, if it came from here."""
        for position, reference in list(self._kept.items()):
            if reference() is interaction:
                return position
        for offset, added in enumerate(self._added):
            if added is interaction:
                return len(self._starts) + offset
        return None

    def recorded(self, position: int) -> tuple[str, Request]:
        """The boundary and request of the interaction at ``position``, for the index."""
        requests, boundaries = self._requests, self._boundaries
        if requests is not None and boundaries is not None and position < len(requests):
            return boundaries[position], requests[position]
        interaction = self[position]
        return interaction.boundary, interaction.request

    def forget_requests(self) -> None:
        """The index is built: the requests read while loading are let go."""
        self._requests = self._boundaries = None

    def started_at(self) -> Sequence[float]:
        """Each interaction's start, by position."""
        return [*self._started, *(interaction.started_at for interaction in self._added)]

    def durations(self) -> list[float | None]:
        """Each interaction's duration, by position (None: none recorded)."""
        return [
            *(None if math.isnan(duration) else duration for duration in self._durations),
            *(interaction.duration for interaction in self._added),
        ]

    def without_injected(self) -> StoredInteractions:
        """The same file's interactions but those a fault made."""
        view = StoredInteractions(os.dup(self._fd), self._path)
        if self._requests is None or self._boundaries is None:
            view._requests = view._boundaries = None
        for position in range(len(self._starts)):
            if not self._injected[position]:
                view._starts.append(self._starts[position])
                view._ends.append(self._ends[position])
                view._started.append(self._started[position])
                view._durations.append(self._durations[position])
                view._injected.append(0)
                if view._requests is not None and view._boundaries is not None:
                    boundary, request = self.recorded(position)
                    view._boundaries.append(boundary)
                    view._requests.append(request)
        return view

    def _decode(self, position: int) -> Interaction:
        start = self._starts[position]
        data = os.pread(self._fd, self._ends[position] - start, start)
        interaction = None
        try:
            raw = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True, timestamp=3)
            interaction = rebuilt(raw) or decode_plain(raw, self._seen)
        except Exception:  # the loader checked these bytes: changed in place since
            interaction = None
        if interaction is None:
            raise CassetteFormatError(
                f"{self._path}: interaction {position} no longer reads as it did when the "
                "cassette was loaded (was the file written over in place?); the file was left "
                "as it is"
            )
        return interaction


def rebuilt(raw: dict[str, Any]) -> Interaction | None:
    """An interaction the loader checked (``decode_plain``) built again without the checks:
    the same values, in less time; None for a WebSocket session, which ``decode_plain``
    builds."""
    if "frames" in raw or "closed" in raw:
        return None
    req = raw["request"]
    sent = req.get("chunks")
    request = Request(
        req["method"],
        req["url"],
        list(req["headers"]),
        req["body"],
        () if sent is None else [(size, float(offset)) for size, offset in sent],
    )
    response = None
    res = raw.get("response")
    if res is not None:
        trailers = res.get("trailers")
        response = Response(
            res["status"],
            res.get("reason", ""),
            res.get("http_version", "HTTP/1.1"),
            list(res["headers"]),
            res["body"],
            [(size, float(offset)) for size, offset in res.get("chunks", ())],
            bool(res.get("truncated", False)),
            () if trailers is None else list(trailers),
        )
    error = None
    err = raw.get("error")
    if err is not None:
        error = Failure(err["kind"], err["type"], err.get("message", ""))
    started, ttfb, duration = raw.get("started_at"), raw.get("ttfb"), raw.get("duration")
    return Interaction(
        request,
        response,
        error,
        raw.get("boundary", "http"),
        0.0 if started is None else float(started),
        None if ttfb is None else float(ttfb),
        None if duration is None else float(duration),
        None,
        None,
        raw.get("injected"),
    )


def position_of(interactions: Sequence[Interaction], interaction: Interaction) -> int | None:
    """Where ``interaction`` (this very object) stands in ``interactions``; None if it is
    not one of them."""
    if isinstance(interactions, StoredInteractions):
        return interactions.position_of(interaction)
    return next((i for i, known in enumerate(interactions) if known is interaction), None)
