"""Faults: failures a cassette never recorded, injected on top of a replayed (or live) exchange
so an agent's retry and fallback code runs as it would in production (SPEC §18).

``Fault`` holds a fault's options and nothing else; ``FaultPlan`` is the state of the faults
given to one open cassette: how many matching requests each saw and how often it fired.
Whether a fault fires never depends on timing or thread scheduling beyond the order requests
are made: ``probability`` is decided by a hash of the seed and the request, so a run and its
rerun, and every xdist worker, inject at the same requests.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from ..models import FAULT_HEADER, Failure, Interaction, Request, Response
from . import shapes

FaultKind = Literal[
    "rate_limit",
    "overloaded",
    "server_error",
    "status",
    "malformed",
    "cut_stream",
    "slow",
    "timeout",
    "reset",
    "refused",
    "close",
    "grpc_status",
]
"""What goes wrong: ``close`` is a WebSocket close code after N frames, ``grpc_status`` a gRPC
status; the others are HTTP faults."""

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

RESPONSE_KINDS: frozenset[FaultKind] = frozenset(("malformed", "cut_stream", "slow"))
"""Kinds that change a recorded response (it is served, changed); the others answer in its
place, and the recorded interaction stays for the retry."""
HTTP_KINDS: frozenset[FaultKind] = frozenset(FAULT_KINDS) - {"close", "grpc_status"}
LIVE_KINDS: frozenset[FaultKind] = HTTP_KINDS - RESPONSE_KINDS
"""What a fault can answer with from the request alone, in a recording mode."""


FAULTS_ENVIRONMENT_VARIABLE = "AGENTTAPE_FAULTS"
"""A JSON list of faults (``[{"kind": "rate_limit", "on": "POST /v1/chat/completions",
"nth": 2}]``) every cassette of the process injects, besides its own."""

_PROVIDER = ("provider",)
OPTIONS: dict[FaultKind, tuple[str, ...]] = {
    "rate_limit": ("retry_after", *_PROVIDER),
    "overloaded": ("retry_after", *_PROVIDER),
    "server_error": ("status", "retry_after", *_PROVIDER),
    "status": ("status", "retry_after", *_PROVIDER),
    "malformed": (),
    "cut_stream": ("after_chunks", "after_bytes"),
    "slow": ("delay", "first_byte", "between_chunks"),
    "timeout": ("connect",),
    "reset": (),
    "refused": (),
    "close": ("code", "after_frames"),
    "grpc_status": ("code",),
}
"""The options each kind takes (``provider`` forces an error shape: ``openai``,
``anthropic``, ``google``, ``bedrock``, ``mistral``, ``cohere``, ``json``)."""

_SELECTORS = ("on", "host", "index", "nth", "every", "times", "probability", "seed")


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: its kind, which requests it applies to, and its kind's options. It holds no
    state: the same ``Fault`` may be given to many cassettes (``FaultPlan`` counts)."""

    kind: FaultKind
    on: str | None = None
    host: str | None = None
    index: int | None = None
    nth: int | None = None
    every: int | None = None
    times: int | None = None
    probability: float | None = None
    seed: int | None = None
    options: Mapping[str, object] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for notes, reports and ``show``: ``rate_limit(retry_after=3) on POST
        /v1/chat/completions, nth=2``."""
        text: str = self.kind
        if self.options:
            text += "(" + ", ".join(f"{k}={v!r}" for k, v in self.options.items()) + ")"
        where = [f"on {self.on}"] if self.on is not None else []
        if self.host is not None:
            where.append(f"host={self.host}")
        for name in ("index", "nth", "every", "times", "probability", "seed"):
            value = getattr(self, name)
            if value is not None:
                where.append(f"{name}={value}")
        return f"{text} {', '.join(where)}" if where else text

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def matches(self, request: Request, index: int | None) -> bool:
        """Whether ``request`` (served by interaction ``index`` of the cassette, when one
        serves it) is one this fault applies to, before counting and chance."""
        if self.index is not None and index != self.index:
            return False
        if self.host is not None or self.on is not None:
            parts = urlsplit(request.url)
            if self.host is not None and not _glob(self.host).fullmatch(
                (parts.hostname or "").lower()
            ):
                return False
            if self.on is not None and not _matches_pattern(self.on, request.method, parts):
                return False
        return True


def fault(
    kind: FaultKind,
    /,
    *,
    on: str | None = None,
    host: str | None = None,
    index: int | None = None,
    nth: int | None = None,
    every: int | None = None,
    times: int | None = None,
    probability: float | None = None,
    seed: int | None = None,
    **options: object,
) -> Fault:
    """A fault to give ``use_cassette(faults=[...])``: ``fault("rate_limit", on="POST
    /v1/chat/completions", nth=2, retry_after=3)``. Without ``index``, ``nth``, ``every`` or
    ``probability`` it fires on every request it applies to (at most ``times`` times)."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"{kind!r} is not a fault kind; the kinds are {', '.join(FAULT_KINDS)}")
    allowed = OPTIONS[kind]
    for name in options:
        if name not in allowed:
            takes = f"it takes {', '.join(allowed)}" if allowed else "it takes no options"
            raise TypeError(
                f"fault {kind!r} has no option {name!r}: {takes}, and the selectors "
                f"{', '.join(_SELECTORS)}"
            )
    for name, text in (("on", on), ("host", host)):
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise TypeError(f"fault {name}= must be a non-empty string, got {text!r}")
    if on is not None:
        _split_pattern(on)  # raises for a pattern that cannot match
    _check_count("index", index, 0)
    for name, value in (("nth", nth), ("every", every), ("times", times)):
        _check_count(name, value, 1)
    if probability is not None:
        if isinstance(probability, bool) or not isinstance(probability, (int, float)):
            raise TypeError(f"fault probability= must be a number, got {probability!r}")
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"fault probability= must be between 0 and 1, got {probability}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"fault seed= must be an int, got {seed!r}")
    _check_options(kind, options)
    return Fault(
        kind,
        on=on,
        host=host.lower() if host is not None else None,
        index=index,
        nth=nth,
        every=every,
        times=times,
        probability=None if probability is None else float(probability),
        seed=seed,
        options=dict(options),
    )


def _check_count(name: str, value: object, least: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"fault {name}= must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"fault {name}= must be {least} or more, got {value}")


_SECONDS = ("retry_after", "delay", "first_byte", "between_chunks")


def _check_options(kind: FaultKind, options: Mapping[str, object]) -> None:
    """Each option's type and range, so a mistake is an error where the fault is written."""
    for name, value in options.items():
        if name in _SECONDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"fault {kind!r}: {name}= must be seconds (a number)")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"fault {kind!r}: {name}= must be 0 or more, got {value}")
        elif name in ("after_chunks", "after_bytes", "after_frames"):
            _check_count(name, value, 0)
        elif name == "status":
            if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 999:
                raise ValueError(f"fault {kind!r}: status= must be an HTTP status, got {value!r}")
        elif name == "connect":
            if not isinstance(value, bool):
                raise TypeError(f"fault {kind!r}: connect= must be True or False")
        elif name == "provider":
            if value not in shapes.PROVIDERS:
                raise ValueError(
                    f"fault {kind!r}: provider= must be one of "
                    f"{', '.join(shapes.PROVIDERS)}, "
                    f"got {value!r}"
                )
        elif name == "code" and (isinstance(value, bool) or not isinstance(value, (int, str))):
            raise TypeError(f"fault {kind!r}: code= must be a status name or number")
    if kind == "status" and "status" not in options:
        raise TypeError("fault 'status' needs status= (the HTTP status to answer with)")
    if kind == "cut_stream" and "after_chunks" in options and "after_bytes" in options:
        raise TypeError("fault 'cut_stream' takes after_chunks= or after_bytes=, not both")
    if kind == "grpc_status" and "code" not in options:
        raise TypeError("fault 'grpc_status' needs code= (a gRPC status name)")


def fault_from_json(data: Mapping[str, Any]) -> Fault:
    """A fault from its JSON form (``{"kind": ..., "on": ..., ...options}``), as
    ``AGENTTAPE_FAULTS`` holds a list of them."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a fault in JSON is an object with a 'kind', got {data!r}")
    values = dict(data)
    kind = values.pop("kind", None)
    if not isinstance(kind, str):
        raise TypeError(f"a fault in JSON needs a 'kind' string, got {data!r}")
    return fault(kind, **values)  # type: ignore[arg-type]  # fault() checks the kind


def fault_to_json(item: Fault) -> dict[str, Any]:
    """The JSON form ``fault_from_json`` reads back."""
    data: dict[str, Any] = {"kind": item.kind}
    for name in _SELECTORS:
        value = getattr(item, name)
        if value is not None:
            data[name] = value
    data.update(item.options)
    return data


def faults_from_environment(text: str | None) -> tuple[Fault, ...]:
    """The faults ``AGENTTAPE_FAULTS`` holds (a JSON list); none when it is unset or empty."""
    if not text or not text.strip():
        return ()
    import json  # only a process given faults reads them

    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{FAULTS_ENVIRONMENT_VARIABLE} is not JSON: {exc}") from None
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ValueError(f"{FAULTS_ENVIRONMENT_VARIABLE} must hold a JSON list of faults")
    try:
        return tuple(fault_from_json(item) for item in items)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{FAULTS_ENVIRONMENT_VARIABLE}: {exc}") from None


@dataclass(frozen=True, slots=True)
class FiredFault:
    """A fault that fired: on which request, and which interaction of the cassette it took
    the place of (None when none did: a live request, or one the cassette never held)."""

    fault: Fault
    method: str
    url: str
    index: int | None


class FaultPlan:
    """The faults of one open cassette and what they did: ``pick`` decides, per request,
    which fault (if any) answers it."""

    __slots__ = ("_counts", "_fires", "_lock", "_seen", "faults", "fired")

    def __init__(self, faults: tuple[Fault, ...] | list[Fault]) -> None:
        self.faults = tuple(faults)
        for item in self.faults:
            if not isinstance(item, Fault):
                raise TypeError(f"faults= takes agenttape.fault(...) values, got {item!r}")
        self.fired: list[FiredFault] = []
        self._counts = [0] * len(self.faults)
        self._fires = [0] * len(self.faults)
        self._seen: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.faults)

    def pick(
        self,
        request: Request,
        index: int | None,
        *,
        kinds: Collection[FaultKind] = HTTP_KINDS,
    ) -> Fault | None:
        """The fault that answers ``request`` (served by interaction ``index``, or None),
        counted as fired; None when no fault fires. Only faults of ``kinds`` are considered
        (a live request cannot be ``cut_stream``: there is no recorded stream to cut).
        Every fault that applies counts the request, whichever fires: ``nth=2`` is the
        second request it applies to."""
        with self._lock:
            occurrence = self._seen.get((request.method, request.url), 0) + 1
            self._seen[(request.method, request.url)] = occurrence
            chosen: Fault | None = None
            for position, item in enumerate(self.faults):
                if item.kind not in kinds or not item.matches(request, index):
                    continue
                self._counts[position] += 1
                if chosen is not None or not self._due(position, item, request, occurrence):
                    continue
                self._fires[position] += 1
                chosen = item
                self.fired.append(FiredFault(item, request.method, request.url, index))
            return chosen

    def _due(self, position: int, item: Fault, request: Request, occurrence: int) -> bool:
        if item.times is not None and self._fires[position] >= item.times:
            return False
        count = self._counts[position]
        if item.nth is not None:
            if count < item.nth:
                return False
            if item.every is None and count != item.nth:
                return False
            if item.every is not None and (count - item.nth) % item.every:
                return False
        elif item.every is not None and count % item.every:
            return False
        if item.probability is not None:
            return chance(item.seed or 0, request.method, request.url, occurrence) < (
                item.probability
            )
        return True

    def unfired(self) -> list[Fault]:
        """The faults that never fired."""
        with self._lock:
            return [item for item, fires in zip(self.faults, self._fires, strict=True) if not fires]


def chance(seed: int, method: str, url: str, occurrence: int) -> float:
    """A number in [0, 1) fixed by the seed, the request and how many times the same
    request was made before: the same in every run and every process."""
    digest = hashlib.sha256(f"{seed}\0{method}\0{url}\0{occurrence}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _split_pattern(pattern: str) -> tuple[str | None, str]:
    """``"POST /v1/chat/completions"`` -> (``POST``, the glob); a method alone (``"POST"``)
    has the glob ``*``."""
    words = pattern.split()
    if len(words) == 2:
        method, glob = words
        return (None if method == "*" else method.upper()), glob
    if len(words) == 1:
        word = words[0]
        if word.isalpha() and word.isupper():
            return word, "*"
        return None, word
    raise ValueError(
        f"fault on={pattern!r} is not a request pattern: 'METHOD URL-GLOB' or 'URL-GLOB' "
        "('POST /v1/chat/completions', 'GET api.search.example/*')"
    )


@lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` matches any run of characters (``/`` too); everything else is literal (``?``
    included: it starts a query)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def _matches_pattern(pattern: str, method: str, parts: Any) -> bool:
    wanted, glob = _split_pattern(pattern)
    if wanted is not None and wanted != method.upper():
        return False
    path = parts.path or "/"
    if "?" in glob and parts.query:
        path += "?" + parts.query
    regex = _glob(glob)
    if glob.startswith("/"):
        return regex.fullmatch(path) is not None
    if "://" in glob:
        return regex.fullmatch(f"{parts.scheme}://{parts.netloc}{path}") is not None
    host = (parts.hostname or "").lower()
    return bool(
        regex.fullmatch(f"{host}{path}") or regex.fullmatch(f"{parts.netloc.lower()}{path}")
    )


SLOW = 3.0
"""Seconds a ``slow`` fault given no timing holds the first byte back."""
_CUT = "peer closed connection without sending complete message body (injected by agenttape)"


def inject(
    item: Fault, request: Request, recorded: Interaction | None, realtime: bool
) -> Interaction:
    """The interaction ``item`` makes of ``request``: an error answer in the provider's
    shape, a transport failure, or (``RESPONSE_KINDS``) the ``recorded`` one changed. Its
    timings are the recorded ones with ``realtime``, else none but the fault's own delays."""
    made = Interaction(request, started_at=time.time(), injected=item.describe())
    kind = item.kind
    if kind in ("rate_limit", "overloaded", "server_error", "status"):
        provider = item.option("provider") or shapes.provider_of(request)
        status = shapes.error_status(kind, provider, item.option("status"))
        retry_after = item.option("retry_after", 1 if kind == "rate_limit" else None)
        reason, headers, body = shapes.error_answer(kind, provider, status, retry_after)
        headers = [*headers, (FAULT_HEADER, fault_header(item, request))]
        version = recorded.response.http_version if recorded and recorded.response else "HTTP/1.1"
        made.response = Response(status, reason, version, headers, body, [(len(body), 0.0)])
        made.ttfb, made.duration = 0.0, 0.0
    elif kind == "timeout":
        connect = bool(item.option("connect", False))
        made.error = (
            Failure("connect_timeout", "ConnectTimeout", "timed out (injected by agenttape)")
            if connect
            else Failure("read_timeout", "ReadTimeout", "timed out (injected by agenttape)")
        )
    elif kind == "reset":
        made.error = Failure(
            "read_error", "ConnectionResetError", "[Errno 104] Connection reset by peer"
        )
    elif kind == "refused":
        made.error = Failure(
            "connect_error", "ConnectionRefusedError", "[Errno 111] Connection refused"
        )
    else:
        assert recorded is not None and recorded.response is not None
        made.started_at = recorded.started_at
        _change(item, made, recorded, realtime)
    return made


def fault_header(item: Fault, request: Request) -> str:
    """``FAULT_HEADER``'s value: the fault and the request (its URL without the query, which
    may hold a key), in ASCII, as every client takes header values."""
    url = request.url.partition("?")[0].partition("#")[0]
    text = f"{item.describe()}, fired on {request.method} {url}"
    return (
        text.encode("ascii", "backslashreplace")
        .decode("ascii")
        .replace("\r", " ")
        .replace("\n", " ")
    )


def _change(item: Fault, made: Interaction, recorded: Interaction, realtime: bool) -> None:
    """``malformed``, ``cut_stream`` and ``slow``: the recorded response, changed."""
    response = recorded.response
    assert response is not None
    pieces = list(response.iter_chunks())
    offsets = [offset for _size, offset in response.chunks] if realtime else []
    offsets += [0.0] * (len(pieces) - len(offsets))
    made.ttfb = (recorded.ttfb or 0.0) if realtime else 0.0
    made.duration = (recorded.duration or 0.0) if realtime else 0.0
    made.error = recorded.error
    headers = list(response.headers)
    truncated = response.truncated
    if item.kind == "malformed":
        pieces, headers = _malformed(response)
        offsets = [offsets[-1] if offsets else 0.0]
    elif item.kind == "cut_stream":
        pieces, offsets = _cut(item, pieces, offsets)
        truncated = True
        made.error = Failure("protocol_error", "RemoteProtocolError", _CUT)
    else:  # slow
        timed = any(name in item.options for name in ("delay", "first_byte", "between_chunks"))
        first = float(item.option("first_byte", item.option("delay", 0.0 if timed else SLOW)))
        between = float(item.option("between_chunks", 0.0))
        made.ttfb += first
        offsets = [offset + first + between * n for n, offset in enumerate(offsets, 1)]
        made.duration = max([made.duration + first, *offsets])
    body = b"".join(pieces)
    made.response = Response(
        response.status,
        response.reason,
        response.http_version,
        headers,
        body,
        [(len(piece), offset) for piece, offset in zip(pieces, offsets, strict=True)],
        truncated,
        response.trailers,
    )


def _cut(item: Fault, pieces: list[bytes], offsets: list[float]) -> tuple[list[bytes], list[float]]:
    """The pieces sent before the cut: ``after_chunks`` pieces, or ``after_bytes`` bytes;
    half the pieces (half the body when it came in one) when neither is given."""
    after_bytes = item.option("after_bytes")
    if after_bytes is None and item.option("after_chunks") is None and len(pieces) == 1:
        after_bytes = len(pieces[0]) // 2
    if after_bytes is not None:
        kept: list[bytes] = []
        left = int(after_bytes)
        for piece in pieces:
            if left <= 0:
                break
            kept.append(piece[:left])
            left -= len(piece)
        return kept, offsets[: len(kept)]
    count = item.option("after_chunks", len(pieces) // 2)
    return pieces[:count], offsets[:count]


def _malformed(response: Response) -> tuple[list[bytes], list[tuple[str, str]]]:
    """The body (its content-encoding undone) cut in the middle of its JSON: for an event
    stream, the first event's JSON is cut and the stream goes on after it."""
    from ..bodies import decode_body, is_sse

    body = decode_body(response.headers, response.body).data
    headers = [
        (name, value)
        for name, value in response.headers
        if name.lower() not in ("content-encoding", "content-length")
    ]
    if is_sse(response.headers):
        start = body.find(b"data:")
        end = body.find(b"\n", start)
        if start != -1 and end != -1:
            line = body[start:end]
            cut = body[:start] + line[: max(len(b"data: {"), len(line) // 2)] + body[end:]
            return [cut], headers
    cut = body[: len(body) // 2]
    if response.header("content-length") is not None:
        headers.append(("content-length", str(len(cut))))
    return [cut], headers
