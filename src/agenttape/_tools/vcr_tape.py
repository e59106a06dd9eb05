"""A vcrpy cassette served by agenttape: read where and as pytest-recording reads it (through
vcrpy's own ``Cassette``, persister and serializer, so a project's registered ones are
honoured), matched as vcrpy matches, replayed by agenttape's adapters byte for byte.

vcrpy's default matching ignores the body: a test whose request changed since recording
still gets the old answer. Each replayed request is therefore also compared with the
recorded one as agenttape compares them (method, URL, body as canonical JSON or multipart
parts), and what differs is kept as ``drifts`` for the session's summary.

What is recorded anew goes to an agenttape cassette beside the old file (same stem,
``.msgpack``); where that exists it is read instead of the old one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from contextvars import Token
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._adapters.network_guard import allowed
from .._core import files, runtime
from .._core.errors import NetworkBlockedError, UnmatchedInteractionError
from .._core.matching.matcher import (
    Candidate,
    Matcher,
    multipart_parts,
    pair_differences,
)
from .._core.matching.replay_queue import KeepsMisses, Precedents
from .._core.models import Interaction, Request
from .._core.options import Mode
from .._core.redaction import Redacting, Redactor
from .._core.secrets import REDACTED
from .._core.tape import Recording, Tape
from .._core.urls import parse_url
from .._core.verdict import REQUEST, request_changes
from .._core.wire import codec
from .drift import Drift
from .vcr import VcrImportError, interaction_of, request_of, vcr_request_of, vcr_response_of

RERECORD = (
    "To record what is missing: pytest --record-mode=new_episodes (or once for a cassette "
    "that does not exist yet); --record-mode=rewrite records the test's cassette anew."
)

VcrMatcher = Callable[[Any, Any], Any]


def _attribute_key(name: str) -> Callable[[Any], Hashable]:
    if name == "method":
        # aiohttp sends a method in capitals, but vcrpy's aiohttp stubs record it as the
        # caller wrote it (google-genai writes "post"): on the wire they are one method.
        return lambda request: str(request.method).upper()
    if name == "query":
        return lambda request: tuple(request.query)
    if name == "path":
        return lambda request: request.path or "/"
    if name == "uri":
        return _uri_key
    return lambda request: getattr(request, name)


def _uri_key(request: Any) -> Hashable:
    """A URI with an empty path as with "/": vcrpy 9.4's ``uri`` matcher takes them as one
    (httpx sends ``https://host`` bare), older ones do not, so the matcher still runs."""
    parts = urlsplit(request.uri)
    return parts.scheme, parts.netloc, parts.path or "/", parts.query, parts.fragment


EXACT = frozenset(("method", "scheme", "host", "port", "query"))
"""The attributes every supported vcrpy compares for plain equality: a bucket by them is the
matcher's verdict. ``path`` and ``uri`` are bucketed too, with an empty path as "/", and
their matcher decides within the bucket."""


def _keyed_matchers() -> tuple[dict[VcrMatcher, str], VcrMatcher]:
    """vcrpy's matchers that compare one attribute (requests are bucketed by those
    attributes, and only the other matchers, ``path`` and ``uri`` included, run against each
    candidate), and its ``body`` matcher."""
    from vcr import matchers

    keyed = {
        matchers.method: "method",
        matchers.scheme: "scheme",
        matchers.host: "host",
        matchers.port: "port",
        matchers.path: "path",
        matchers.query: "query",
        matchers.uri: "uri",
    }
    return keyed, matchers.body


def _parts_or(body_matcher: VcrMatcher) -> VcrMatcher:
    """vcrpy's ``body`` matcher, but two multipart bodies compare by their parts (the
    boundary a client draws at random per request is no difference), and no body matches an
    empty one: vcrpy records a GET's body as null from requests and as '' from httpx, and
    the request on the wire is the same."""

    def body(incoming: Any, stored: Any) -> Any:
        mine, theirs = incoming.body, stored.body
        if not mine and not theirs:
            return True
        if isinstance(mine, bytes) and isinstance(theirs, bytes):
            parts, recorded = multipart_parts(mine), multipart_parts(theirs)
            if parts is not None and recorded is not None:
                return parts == recorded
        return body_matcher(incoming, stored)

    return body


def _matches(matcher: VcrMatcher, incoming: Any, stored: Any) -> bool:
    """One vcrpy matcher as vcrpy evaluates it: None or True match, False or an
    AssertionError do not."""
    try:
        result = matcher(incoming, stored)
    except AssertionError:
        return False
    return result is None or bool(result)


_STRICT_FIELDS: dict[str, tuple[str, ...]] = {
    "method": ("method",),
    "scheme": ("url.scheme",),
    "host": ("url.host",),
    "port": ("url.port",),
    "path": ("url.path",),
    "query": ("url.query",),
    "uri": ("url.",),
    "body": ("body",),
    "raw_body": ("body",),
}
"""For each of vcrpy's matchers, the fields of agenttape's difference that say where it
failed (a JSON body's changed field rather than two whole bodies)."""


@dataclass(slots=True)
class _Scrub:
    """vcrpy's assertion text without secrets: it prints both requests' headers or URIs
    as they are, and a vcrpy cassette holds them as its filters left them."""

    redactor: Redactor
    requests: tuple[Any, Any]

    def __call__(self, text: str) -> str:
        for vcr_request in self.requests:
            redacted = self.redactor.request(Request("GET", vcr_request.uri, [], b"")).url
            if redacted != vcr_request.uri:
                text = text.replace(vcr_request.uri, redacted)
            for name, value in vcr_request.headers.items():
                if name.lower() in self.redactor.headers:
                    for one in value if isinstance(value, list) else [value]:
                        if one:
                            text = text.replace(str(one), REDACTED)
        text = self.redactor.text(text)
        return text if len(text) <= 300 else text[:297] + "..."


def _rejections(
    failed: list[tuple[str, str | None]],
    strict: list[str],
    recorded: Request,
    sent: Request,
    scrub: _Scrub,
) -> list[str]:
    """One line per matcher of ``match_on`` that rejected ``recorded``, in vcrpy's words,
    each followed by agenttape's differences in the fields it compares."""
    lines = []
    for name, message in failed:
        said = (scrub(message) if message else "no match (the matcher returned False)").split("\n")
        lines.append(f"match_on {name}: {said[0]}")
        lines += [f"    {line}" for line in said[1:]]
        if name == "headers":
            details = _header_differences(recorded, sent)
        else:
            fields = _STRICT_FIELDS.get(name)
            details = [line for line in strict if fields and line.startswith(fields)]
        lines += [f"  {line}" for line in details]
    return lines


def _header_differences(recorded: Request, sent: Request) -> list[str]:
    """The headers whose values differ, by name, both sides redacted; eight at most."""
    lowered = [
        [(name.lower(), value) for name, value in headers]
        for headers in (recorded.headers, sent.headers)
    ]
    return pair_differences("headers", *lowered)[:8]


_BODY_HEADERS = ("content-type", "content-encoding")


def _as_recorded(sent: Any, stored: Any) -> bool:
    """True when the request sent is the recorded one, as vcrpy holds both, in all the drift
    check compares: method, URL and body bytes, and the headers that say how a body is
    redacted (so both redact alike). The common replay then needs no comparison."""
    body = sent.body
    if not isinstance(body, bytes) or body != stored.body:
        return False
    if sent.method != stored.method or sent.uri != stored.uri:
        return False
    return all(sent.headers.get(name) == stored.headers.get(name) for name in _BODY_HEADERS)


def msgpack_path(vcr_path: Path, suffix: str) -> Path:
    """Where a vcrpy cassette's agenttape successor lives: same folder, same stem."""
    name = vcr_path.name
    if suffix and name.endswith(suffix):
        name = name[: -len(suffix)]
    return vcr_path.with_name(f"{name}.msgpack")


VCR_MODES: dict[str, Mode] = {mode: mode for mode in ("none", "once", "new_episodes", "all")}
"""vcrpy's record modes that are agenttape's too (``rewrite`` is resolved before a tape)."""


class VcrTape(runtime.Activation, KeepsMisses, Redacting):
    """A ``Tape`` over vcrpy's ``Cassette`` (``vcr``, what the ``vcr`` fixture yields): play
    counts and newly recorded interactions are kept there too, so it answers as vcrpy's.

    ``record_mode`` is vcrpy's: ``none`` replays only; ``once`` records when no cassette
    exists, else replays only; ``new_episodes`` replays what matches and records the rest;
    ``all`` records everything.
    """

    realtime = False
    fast_retries = True
    # A pytest-recording suite brings its own dummy keys, and may test what its code does
    # without one: vcrpy leaves the environment as it is, and so does its drop-in.
    fills_keys = False
    repeats_option = "allow_playback_repeats=True"

    def __init__(
        self,
        cassette: Any,
        *,
        suffix: str,
        record_mode: str,
        drift: bool = True,
        ignore_json_fields: tuple[str, ...] = (),
        block_network: bool = False,
        allowed_hosts: tuple[str, ...] = (),
    ) -> None:
        self.vcr = cassette
        self.vcr_path = Path(cassette._path)
        self.path = msgpack_path(self.vcr_path, suffix)
        self.mode: Mode = VCR_MODES[record_mode]
        self.mode_label = f"vcr record_mode {record_mode!r}"
        self.block_network = block_network
        self.allowed_hosts = allowed_hosts
        self.check_drift = drift
        self.is_active = False
        self.drifts: list[Drift] = []
        self.misses: list[UnmatchedInteractionError] = []
        self.metadata: dict[str, Any] = {}
        # In step with ``vcr.data``; one read from the YAML file is None until first needed
        # (``_interaction``): its request is redacted then, and most are never played.
        self._interactions: list[Interaction | None] = []
        self._loaded = 0
        self._read_from = self.vcr_path  # the file the interactions came from: a miss names it
        self.redactor = Redactor.from_rules(None)  # the defaults, shared (and what they saw)
        self.ignore_json_fields = ignore_json_fields
        self._strict = Matcher(ignore_json_fields=ignore_json_fields)
        self._lock = threading.Lock()
        self._token: Token[Tape | None] | None = None
        self._replays = False
        self.is_recording = False
        self._dirty = False
        self._pending: dict[Recording, Any] = {}  # a recording and vcrpy's request for it
        self._ignored: set[Recording] = set()
        keyed, body = _keyed_matchers()
        match_on = tuple(cassette._match_on)
        self._key_of = tuple(_attribute_key(keyed[m]) for m in match_on if m in keyed)
        # vcrpy's matchers as ``_find`` runs them: what a miss reports is their verdict.
        self._match_on = tuple(_parts_or(m) if m is body else m for m in match_on)
        self._checks = tuple(
            check
            for matcher, check in zip(match_on, self._match_on, strict=True)
            if keyed.get(matcher) not in EXACT
        )
        self._buckets: dict[tuple[Hashable, ...], list[int]] | None = None
        # vcrpy's drop_unused_requests (8.0 on): the loaded interactions played, in play order.
        self._drop_unused = bool(getattr(cassette, "drop_unused_requests", False))
        self._played: list[int] = []

    @property
    def read_from(self) -> Path:
        """The file the interactions came from: the YAML cassette, or the agenttape one
        beside it where that is the one read."""
        return self._read_from

    @property
    def interactions(self) -> list[Interaction]:
        with self._lock:
            return [self._interaction(index) for index in range(len(self._interactions))]

    def _interaction(self, index: int) -> Interaction:
        """The interaction at ``index``, converted from vcrpy's form the first time it is
        asked for (under the lock, so every caller gets the same object). One vcrpy could
        not serve either is refused naming the file when asked for, as vcrpy refuses it
        when it plays it: the others still replay."""
        interaction = self._interactions[index]
        if interaction is None:
            request, response = self.vcr.data[index]
            try:
                interaction = interaction_of(request, response, self.redactor)[0]
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise VcrImportError(
                    f"{self.vcr_path}: interaction {index} is malformed ({exc!r})"
                ) from None
            self._interactions[index] = interaction
        return interaction

    # -- activation ----------------------------------------------------------------------

    def start(self) -> None:
        """Read the cassette (the msgpack successor first, else the old file through vcrpy)
        and serve every request from here on."""
        existed = self._load()
        mode = self.mode
        self.is_recording = mode in ("new_episodes", "all") or (mode == "once" and not existed)
        self._replays = mode in ("none", "new_episodes") or (mode == "once" and existed)
        self.is_active = True
        self._token = runtime.activate(self)

    def _load(self) -> bool:
        """Fills ``vcr.data`` and the interactions in step; True when a cassette existed."""
        cassette = self.vcr
        if self.path.exists():
            self._read_from = self.path
            self.metadata, interactions = files.read(self.path)
            for interaction in interactions:
                cassette.data.append(
                    (vcr_request_of(interaction.request), vcr_response_of(interaction))
                )
            cassette._loaded_count = len(cassette.data)
            cassette._old_interactions = list(cassette.data)
            cassette.rewound = True
            self._interactions = list(interactions)
        else:
            self._read_from = self.vcr_path
            cassette._load()  # the project's persister and serializer, as vcrpy reads it
            self._interactions = [None] * len(cassette.data)
        self._loaded = len(self._interactions)
        return bool(cassette.rewound)

    def stop(self) -> None:
        """Deactivate, and write what was recorded into the msgpack successor."""
        if not self._deactivate():
            return
        for recording in list(self._pending):
            recording.finish(truncated=True)
        if self._dirty or self._drops_unused():
            self.save()

    def _drops_unused(self) -> bool:
        """Whether the cassette is saved without the loaded interactions no request played
        (``drop_unused_requests``, outside mode ``all``, which keeps only new recordings)."""
        return self._drop_unused and self.mode != "all" and len(self._played) < self._loaded

    def save(self) -> None:
        with self._lock:
            interactions = self._kept()
        if not self.metadata or self.mode == "all":
            from .._core.meta import new_header

            self.metadata = new_header()
            self.metadata["imported_from"] = {"format": "vcrpy", "path": self.vcr_path.name}
        # Re-recording (``--record-mode=all``/``rewrite``) keeps what the msgpack held beside
        # it, once the new recording is in place, for ``agenttape diff --verdict``.
        replaced = self.path.exists() and self.mode == "all"
        previous = files.read_bytes(self.path) if replaced else None
        files.write_atomic(self.path, codec.encode_pieces(self.metadata, interactions))
        self._dirty = False
        if previous is not None:
            stem = self.path.name.removesuffix(".msgpack")
            files.write_atomic(self.path.with_name(f"{stem}.previous.msgpack"), previous)

    def _kept(self) -> list[Interaction]:
        """What the cassette holds once saved: in mode ``all``, as vcrpy keeps it, the loaded
        interactions no new recording matches (none with ``drop_unused_requests``), then the
        new recordings; else all of them, or with ``drop_unused_requests`` the loaded ones
        played, in the order first played, then the new recordings."""
        recorded = [
            self._interaction(index) for index in range(self._loaded, len(self._interactions))
        ]
        if self.mode != "all":
            if self._drops_unused():
                return [self._interaction(index) for index in self._played] + recorded
            return [self._interaction(index) for index in range(self._loaded)] + recorded
        if self._drop_unused:
            return recorded
        data = self.vcr.data
        requests = [request for request, _response in data[self._loaded :]]
        match_on = self.vcr._match_on
        kept = [
            self._interaction(index)
            for index in range(self._loaded)
            if not any(
                all(_matches(m, request, data[index][0]) for m in match_on) for request in requests
            )
        ]
        return kept + recorded

    # -- the decision per request ----------------------------------------------------------

    def begin(self, request: Request, boundary: str = "http") -> Interaction | Recording:
        incoming = vcr_request_of(request)
        filtered = self.vcr._before_record_request(incoming)
        if not filtered:  # ignore_hosts, ignore_localhost, or a hook that said None
            return self._passthrough(request, boundary)
        if self._replays:
            matched = self._as_stored(filtered)
            with self._lock:
                index = self._find(matched)
                if index is not None:
                    interaction = self._interaction(index)
            if index is not None:
                if self.check_drift:
                    self._check_drift(index, interaction, filtered)
                return interaction
        if not self.is_recording:
            raise self._miss(request, self._as_stored(filtered), boundary)
        recording = Recording(self, self.redactor.request(request), boundary)
        with self._lock:
            self._pending[recording] = incoming
        return recording

    def _passthrough(self, request: Request, boundary: str) -> Recording:
        """A request vcrpy would let through unrecorded: it runs live and is not kept."""
        if self.block_network and not self._allowed(request):
            raise NetworkBlockedError(
                f"agenttape blocked {request.method} {request.url}: the network is blocked "
                "for this test (block_network) and no cassette serves it",
                host=parse_url(request.url).host,
                port=parse_url(request.url).port,
                cassette_path=str(self.vcr_path),
            )
        recording = Recording(self, request, boundary)
        with self._lock:
            self._ignored.add(recording)
        return recording

    def _allowed(self, request: Request) -> bool:
        return allowed(parse_url(request.url).host, self.allowed_hosts)

    def _find(self, filtered: Any) -> int | None:
        """The first recorded interaction vcrpy's matchers accept that is not played yet
        (or any, with ``allow_playback_repeats``); counted as played."""
        buckets = self._buckets
        if buckets is None:
            buckets = self._buckets = {}
            for index in range(self._loaded):
                stored = self.vcr.data[index][0]
                buckets.setdefault(tuple(key(stored) for key in self._key_of), []).append(index)
        cassette = self.vcr
        counts = cassette.play_counts
        repeats = cassette.allow_playback_repeats
        for index in buckets.get(tuple(key(filtered) for key in self._key_of), ()):
            if counts[index] and not repeats:
                continue
            stored = cassette.data[index][0]
            if all(_matches(check, filtered, stored) for check in self._checks):
                if counts[index] == 0:
                    played = getattr(cassette, "_played_interactions", None)
                    if played is not None:  # vcrpy ≥ 8 (what ``all_played`` reads)
                        played.append(cassette.data[index])
                    if index < self._loaded:
                        self._played.append(index)
                counts[index] += 1
                return index
        return None

    def _check_drift(self, index: int, interaction: Interaction, filtered: Any) -> None:
        if _as_recorded(filtered, self.vcr.data[index][0]):
            return
        recorded = interaction.request
        sent = self.redactor.request(request_of(filtered))
        if self._strict.key(recorded) == self._strict.key(sent):
            return
        # In the verdict's classes and words; what is benign by nature (ids a client draws
        # anew, echoed model output) is left out, explicit nulls are said in one line.
        changes = request_changes(
            recorded, sent, headers=False, ignore=self._strict.ignore_json_fields
        )
        lines = [f"{change.kind}: {change}" for change in changes if change.kind == REQUEST]
        nulls = [change.where for change in changes if change.null]
        if lines or nulls:
            with self._lock:
                self.drifts.append(Drift(index, sent.method, sent.url, lines, nulls))

    def _as_stored(self, filtered: Any) -> Any:
        """The filtered request as the cassette read holds its requests: an agenttape one
        holds them redacted (an ``api_key`` in the query, the ``Authorization`` header), so
        vcrpy's matchers compare the request redacted alike; a vcrpy one holds them as
        vcrpy's filters left them."""
        if self._read_from != self.path:
            return filtered
        return vcr_request_of(self.redactor.request(request_of(filtered)))

    def _miss(self, request: Request, matched: Any, boundary: str) -> UnmatchedInteractionError:
        """The miss, in vcrpy's terms: each nearest recorded request with the matchers of
        ``match_on`` that rejected it and vcrpy's own words for why (agenttape's field by
        field difference under them, where it says more), fewest rejections first."""
        from vcr.matchers import get_matchers_results

        sent = request_of(matched)
        if self._read_from != self.path:
            sent = self.redactor.request(sent)
        with self._lock:
            interactions = [self._interaction(index) for index in range(len(self._interactions))]
            stored = [vcr_request for vcr_request, _response in self.vcr.data]
            counts = [self.vcr.play_counts[index] for index in range(len(stored))]
        scored = []
        for index, interaction in enumerate(interactions):
            if interaction.boundary != boundary:
                continue
            _passed, failed = get_matchers_results(matched, stored[index], self._match_on)
            played = bool(counts[index])
            note = ""
            if not failed and not played:
                names = ", ".join(getattr(m, "__name__", repr(m)) for m in self._match_on)
                where = (
                    f"agenttape show {self._read_from} --index {index}"
                    if self._read_from == self.path
                    else f"interaction {index} of {self._read_from}"
                )
                note = (
                    f"every matcher of match_on ({names}) accepts it, yet it was not served; "
                    f"compare it with the request sent ({where})"
                )
            strict = self._strict.differences(interaction.request, sent)
            scrub = _Scrub(self.redactor, (matched, stored[index]))
            lines = _rejections(failed, strict, interaction.request, sent, scrub)
            scored.append((len(failed), played, len(lines), index, lines, note))
        scored.sort(key=lambda item: item[:4])
        return self._missing(
            self.redactor.request(request),
            boundary,
            [
                Candidate(index, interactions[index], lines, played, note)
                for _failed, played, _count, index, lines, note in scored[:3]
            ],
            str(self._read_from),
            RERECORD,
            len(interactions),
        )

    # -- the Tape protocol, for recordings ---------------------------------------------------

    def candidates(self, request: Request, boundary: str = "http") -> list[Interaction] | None:
        """vcrpy's matchers take whole requests."""
        return None

    def precedents(self, interaction: Interaction) -> Precedents | None:
        return None

    def responded(self, recording: Recording) -> None:
        """Nothing to do at the head: a recording joins the cassette once sealed, when
        vcrpy's ``before_record_response`` can see its whole body."""

    def sealed(self, recording: Recording) -> None:
        with self._lock:
            if recording in self._ignored:
                self._ignored.discard(recording)
                return
            incoming = self._pending.pop(recording, None)
            interaction = recording.interaction
            if incoming is None or interaction.response is None:
                return  # a transport failure: vcrpy keeps none
            self._append(incoming, interaction)

    def _append(self, incoming: Any, interaction: Interaction) -> None:
        """The recording through vcrpy's ``append`` (its request and response filters run
        there, as vcrpy's own stubs run them), then as the filters left it."""
        cassette = self.vcr
        before = len(cassette.data)
        response = vcr_response_of(interaction)
        cassette.append(incoming, response)
        if len(cassette.data) == before:
            return  # a filter dropped it
        stored_request, stored_response = cassette.data[-1]
        interaction.request = self.redactor.request(request_of(stored_request))
        if stored_response != response:
            rebuilt, _ = interaction_of(stored_request, stored_response, self.redactor)
            assert rebuilt.response is not None and interaction.response is not None
            if rebuilt.response.body == interaction.response.body:
                rebuilt.response.chunks = interaction.response.chunks
            interaction.response = rebuilt.response
        self._interactions.append(interaction)
        self._dirty = True
