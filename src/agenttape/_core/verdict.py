"""The verdict on a re-recording: what changed between two recordings of the same calls, and
whether it matters.

Every interaction gets one of four verdicts, the worst of its changes:

- ``identical``: nothing changed.
- ``benign``: only what changes on every run without meaning anything: ids the client or the
  provider draws anew (tool-call ids ``call_…``/``toolu_…``, request ids, uuids), timestamps,
  token counts, the model's output text (also where the code sends it back, in an assistant
  message), values in an answer whose shape stayed, and fields now sent as explicit nulls
  where nothing was before (JSON's null and absent mean the same to these APIs).
- ``response shape changed``: the provider answers with new or missing fields, a field of
  another type, another status, or no answer at all.
- ``request changed``: the code sends something else: a field added, removed, or of another
  type or value, a header, the method or the URL.

``agenttape diff --verdict``, the re-recording guard and the drift report of the
pytest-recording drop-in all classify with this module, in the same words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from . import jsonpath
from .bodies import decode_body, is_sse, parse_json, parse_sse
from .matching.matcher import Matcher, show_change, show_value
from .models import Headers, Interaction, Request, Response

Kind = Literal["identical", "benign", "response shape changed", "request changed"]
IDENTICAL: Kind = "identical"
BENIGN: Kind = "benign"
RESPONSE: Kind = "response shape changed"
REQUEST: Kind = "request changed"
KINDS: tuple[Kind, ...] = (IDENTICAL, BENIGN, RESPONSE, REQUEST)
"""From least to most serious: an interaction's verdict is its most serious change."""
FAIL_ON: dict[str, Kind] = {"request": REQUEST, "response": RESPONSE, "benign": BENIGN}
"""The words ``--fail-on`` takes for the classes."""

_ID_VALUE = re.compile(
    r"(?i)^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # a uuid
    r"|(?:call|toolu|chatcmpl|msg|req|resp|run|thread|file|fc|rs|item|evt|event|sess|srvtoolu"
    r"|batch|cmpl|asst|step|ws|conv|span|trace)[-_][A-Za-z0-9_-]{6,}"  # a provider's id
    r"|[0-9a-f]{16,}|[0-9A-Za-z]{24,})$"  # a long hex or base62 token
)
_TIME_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_ID_KEYS = frozenset(
    {"id", "ids", "request_id", "requestid", "tool_call_id", "tool_use_id", "call_id",
     "idempotency_key", "nonce", "trace_id", "span_id", "system_fingerprint", "fingerprint",
     "response_id", "previous_response_id", "item_id", "event_id", "session_id"}
)  # fmt: skip
_TIME_KEYS = frozenset(
    {"created", "created_at", "createdat", "timestamp", "time", "date", "updated_at",
     "completed_at", "expires_at", "started_at", "finished_at", "processing_ms"}
)  # fmt: skip
_COUNT_KEYS = re.compile(r"(?i)(tokens?|token_count|usage|_count|count)$")
_OUTPUT_KEYS = frozenset({"content", "text", "arguments", "input", "thinking", "signature",
                          "refusal", "reasoning", "partial_json", "delta", "summary"})  # fmt: skip
_BENIGN_HEADERS = frozenset(
    {"user-agent", "date", "content-length", "host", "x-request-id", "request-id",
     "idempotency-key", "traceparent", "tracestate", "x-amz-date", "x-amz-security-token",
     "amz-sdk-invocation-id", "amz-sdk-request", "x-amzn-trace-id", "authorization",
     "x-api-key", "api-key", "cookie", "x-goog-api-client", "x-stainless-retry-count",
     "x-stainless-read-timeout", "x-stainless-timeout"}
)  # fmt: skip
_BENIGN_HEADER_PREFIXES = ("x-stainless-", "sentry-", "x-datadog-")


@dataclass(slots=True)
class Change:
    """One field behind a verdict: where (``request body.temperature``), of which kind, and
    what happened to it (``added``, ``removed``, ``0.2, now 0.7``)."""

    kind: Kind
    where: str
    what: str
    null: bool = False  # a field now sent as an explicit null: reported together
    reason: str = ""  # why a benign change is benign: one of ``_REASONS``

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass(slots=True)
class Verdict:
    """One interaction's verdict and the changes behind it."""

    index: int
    label: str
    changes: list[Change] = field(default_factory=list)

    @property
    def kind(self) -> Kind:
        return max((change.kind for change in self.changes), key=KINDS.index, default=IDENTICAL)

    def lines(self, shown: int = 8) -> list[str]:
        """The changes, most serious first; the benign ones in one line, the fields now sent
        as explicit nulls in one line."""
        return describe(self.changes, shown)


def describe(changes: list[Change], shown: int = 8) -> list[str]:
    """``changes`` as a verdict shows them (see ``Verdict.lines``)."""
    serious = [c for c in changes if c.kind in (REQUEST, RESPONSE)]
    serious.sort(key=lambda c: -KINDS.index(c.kind))
    lines = [f"{c.kind}: {c}" for c in serious[:shown]]
    if len(serious) > shown:
        lines.append(f"... and {len(serious) - shown} more")
    nulls = [c.where for c in changes if c.null]
    if nulls:
        lines.append(
            f"benign: {len(nulls)} field(s) now sent as explicit null where the recording "
            f"had none ({_names(nulls)})"
        )
    benign = [c for c in changes if c.kind == BENIGN and not c.null]
    if benign:
        reasons = ", ".join(sorted({c.reason or "values" for c in benign}, key=_REASONS.index))
        lines.append(f"benign ({reasons}): {_names([c.where for c in benign])}")
    return lines


_REASONS = ("ids", "timestamps", "token counts", "model output text", "values")


def _names(wheres: list[str], shown: int = 6) -> str:
    unique = list(dict.fromkeys(wheres))
    more = f", and {len(unique) - shown} more" if len(unique) > shown else ""
    return ", ".join(unique[:shown]) + more


# -- JSON, field by field ------------------------------------------------------------------


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "?"


def _key(path: str) -> str:
    """The last key of a path (``messages[0].tool_call_id`` gives ``tool_call_id``)."""
    return re.sub(r"\[\d+\]$", "", path.rpartition(".")[2]).lower()


def benign_reason(path: str, old: Any, new: Any, output: bool = False) -> str:
    """Why a changed value is one that changes on every run (``ids``, ``timestamps``,
    ``token counts``, ``model output text``); empty when it is not."""
    key = _key(path)
    strings = isinstance(old, str) and isinstance(new, str)
    if (
        key in _ID_KEYS
        or key.endswith("_id")
        or (strings and _ID_VALUE.match(old) and _ID_VALUE.match(new))
    ):
        return "ids"
    if key in _TIME_KEYS or (strings and _TIME_VALUE.match(old) and _TIME_VALUE.match(new)):
        return "timestamps"
    if output and strings:
        return "model output text"
    return ""


def _value_reason(path: str) -> str:
    """Why a value in an answer of the same shape changed, by its key."""
    key = _key(path)
    reason = benign_reason(path, None, None)
    if reason:
        return reason
    if _COUNT_KEYS.search(key):
        return "token counts"
    return "model output text" if key in _OUTPUT_KEYS else "values"


_MODEL_ROLES = frozenset({"assistant", "model"})
_MODEL_ITEMS = frozenset({"function_call", "reasoning"})


def _said_by_model(item: dict[str, Any]) -> bool:
    """Whether a message or input item sent back is the model's own output."""
    return item.get("role") in _MODEL_ROLES or (
        "role" not in item and item.get("type") in _MODEL_ITEMS
    )


def _walk(
    path: str, old: Any, new: Any, output: bool = False
) -> Iterator[tuple[str, str, Any, Any, bool]]:
    """Every difference: (path, ``added``/``removed``/``type``/``value``, old, new, whether
    the path is model output). Only what the model said is: an assistant's (Gemini: the
    model's) message, a Responses API function call or reasoning item, sent back. The user's
    message, the system prompt and a tool's result are what the code sends, whatever their
    key (``content`` too)."""
    if isinstance(old, dict) and isinstance(new, dict):
        output = output or (_said_by_model(old) and _said_by_model(new))
        for key in dict.fromkeys([*old, *new]):
            child = f"{path}.{key}"
            if key not in new:
                yield child, "removed", old[key], None, output
            elif key not in old:
                yield child, "added", None, new[key], output
            else:
                yield from _walk(child, old[key], new[key], output)
    elif isinstance(old, list) and isinstance(new, list):
        for index in range(max(len(old), len(new))):
            child = f"{path}[{index}]"
            if index >= len(new):
                yield child, "removed", old[index], None, output
            elif index >= len(old):
                yield child, "added", None, new[index], output
            else:
                yield from _walk(child, old[index], new[index], output)
    elif _type(old) != _type(new):
        yield path, "type", old, new, output
    elif old != new:
        yield path, "value", old, new, output


def request_json_changes(where: str, old: Any, new: Any) -> list[Change]:
    """What changed in a request's JSON: benign for ids, times and echoed model output, a
    request change for everything else; a field added as null is benign (``null=True``)."""
    changes = []
    for path, how, before, after, output in _walk(where, old, new):
        why = "model output text" if output else ""
        if how == "added" and after is None:
            changes.append(Change(BENIGN, path, "sent as null, absent before", null=True))
        elif how == "removed" and before is None:
            changes.append(Change(BENIGN, path, "no longer sent (was null)", null=True))
        elif how == "added":
            kind = BENIGN if output else REQUEST
            changes.append(Change(kind, path, f"added ({show_value(after, 60)})", reason=why))
        elif how == "removed":
            kind = BENIGN if output else REQUEST
            changes.append(
                Change(kind, path, f"removed (was {show_value(before, 60)})", reason=why)
            )
        elif how == "type":
            changes.append(
                Change(REQUEST, path, f"type {_type(before)}, now {_type(after)} "
                       f"({show_value(before, 40)}, now {show_value(after, 40)})")
            )  # fmt: skip
        else:
            why = benign_reason(path, before, after, output)
            changes.append(
                Change(
                    BENIGN if why else REQUEST,
                    path,
                    show_change(before, after),
                    reason=why,
                )
            )
    return changes


def _shape(document: Any, path: str, out: dict[str, set[str]]) -> None:
    """Every path (list items as ``[*]``) and the types seen there."""
    out.setdefault(path, set()).add(_type(document))
    if isinstance(document, dict):
        for key, value in document.items():
            _shape(value, f"{path}.{key}", out)
    elif isinstance(document, list):
        for item in document:
            _shape(item, f"{path}[*]", out)


def _shape_changes(where: str, old: Any, new: Any) -> list[Change]:
    """The provider's answer by shape: fields new or missing, a type another (null, and
    integer against float, count as values); values that differ in the same shape are
    benign."""
    before: dict[str, set[str]] = {}
    after: dict[str, set[str]] = {}
    _shape(old, where, before)
    _shape(new, where, after)
    changes: list[Change] = []
    for path in dict.fromkeys([*before, *after]):
        if _under(path, {change.where for change in changes}):
            continue
        if path not in after:
            changes.append(Change(RESPONSE, path, "missing"))
        elif path not in before:
            changes.append(Change(RESPONSE, path, "new"))
        else:
            was, now = before[path] - {"null"}, after[path] - {"null"}
            if was and now and was != now:
                changes.append(
                    Change(RESPONSE, path, f"type {'/'.join(sorted(was))}, now "
                           f"{'/'.join(sorted(now))}")
                )  # fmt: skip
    if not changes and old != new:
        changes = [
            Change(BENIGN, path, "value", reason=_value_reason(path))
            for path, *_rest in _walk(where, old, new)
        ]
    return changes


def _under(path: str, reported: set[str]) -> bool:
    """True below a path already reported (new, missing, of another type): a field is
    named once, not with everything inside it."""
    parent = path
    while True:
        cut = max(parent.rfind("."), parent.rfind("[*]"))
        if cut <= 0:
            return False
        parent = parent[:cut]
        if parent in reported:
            return True


def _decoded(headers: Headers, body: bytes) -> bytes:
    return decode_body(headers, body).data


def _response_changes(old: Response, new: Response) -> list[Change]:
    changes = []
    if old.status != new.status:
        changes.append(Change(RESPONSE, "status", f"{old.status}, now {new.status}"))
    kinds = [(first or "").split(";")[0].strip().lower() for first in (
        _header(old.headers, "content-type"), _header(new.headers, "content-type"))]  # fmt: skip
    if kinds[0] != kinds[1]:
        changes.append(Change(RESPONSE, "response content-type", f"{kinds[0]}, now {kinds[1]}"))
        return changes
    want, got = _decoded(old.headers, old.body), _decoded(new.headers, new.body)
    if want == got:
        return changes
    if is_sse(old.headers) and is_sse(new.headers):
        return changes + _stream_changes(want, got)
    (old_json, old_doc), (new_json, new_doc) = parse_json(want), parse_json(got)
    if old_json and new_json:
        return changes + _shape_changes("response body", old_doc, new_doc)
    return [*changes, Change(BENIGN, "response body", "text", reason="model output text")]


def _stream_changes(want: bytes, got: bytes) -> list[Change]:
    """A stream by its events' names and the shape of their data; the text is benign."""
    old_events, new_events = parse_sse(want), parse_sse(got)
    names = [sorted({e.event or "message" for e in events}) for events in (old_events, new_events)]
    changes = []
    if names[0] != names[1]:
        changes.append(
            Change(RESPONSE, "response events", f"{', '.join(names[0])}, now {', '.join(names[1])}")
        )

    def documents(events: list[Any]) -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for event in events:
            if not isinstance(event.data, str):
                found.setdefault(event.event or "message", []).append(event.data)
        return found

    old_docs, new_docs = documents(old_events), documents(new_events)
    for name in sorted(set(old_docs) & set(new_docs)):
        shape = _shape_changes(f"response event {name}", old_docs[name], new_docs[name])
        changes += [c for c in shape if c.kind == RESPONSE]
    if not changes:
        changes.append(
            Change(BENIGN, "response stream text", "model output", reason="model output text")
        )
    return changes


def _header(headers: Headers, name: str) -> str | None:
    lowered = name.lower()
    return next((value for key, value in headers if key.lower() == lowered), None)


# -- requests ----------------------------------------------------------------------------------


def _benign_header(name: str) -> bool:
    return name in _BENIGN_HEADERS or name.startswith(_BENIGN_HEADER_PREFIXES)


def request_changes(
    old: Request, new: Request, *, headers: bool = True, ignore: tuple[str, ...] = ()
) -> list[Change]:
    """What the code sends now against what it sent when recorded; ``headers=False`` leaves
    the headers out, ``ignore`` JSON paths of the bodies."""
    changes = []
    if old.method.upper() != new.method.upper():
        changes.append(Change(REQUEST, "method", f"{old.method}, now {new.method}"))
    before, after = urlsplit(old.url), urlsplit(new.url)
    if (before.scheme, before.netloc, before.path) != (after.scheme, after.netloc, after.path):
        changes.append(Change(REQUEST, "url", f"{show_value(old.url)}, now {show_value(new.url)}"))
    changes += _pairs_changes("query", parse_qsl(before.query, True), parse_qsl(after.query, True))
    if headers:
        changes += _header_changes(old.headers, new.headers)
    if old.body != new.body:
        changes += _body_changes(old, new, ignore)
    return changes


def _pairs_changes(
    where: str, old: list[tuple[str, str]], new: list[tuple[str, str]]
) -> list[Change]:
    was, now = dict(old), dict(new)
    changes = []
    for name in dict.fromkeys([*was, *now]):
        path = f"{where}.{name}"
        if name not in now:
            changes.append(Change(REQUEST, path, f"removed (was {show_value(was[name], 40)})"))
        elif name not in was:
            changes.append(Change(REQUEST, path, f"added ({show_value(now[name], 40)})"))
        elif was[name] != now[name]:
            why = benign_reason(path, was[name], now[name])
            changes.append(Change(BENIGN if why else REQUEST, path,
                                  show_change(was[name], now[name]), reason=why))  # fmt: skip
    return changes


def _header_changes(old: Headers, new: Headers) -> list[Change]:
    def table(headers: Headers) -> list[tuple[str, str]]:
        return [(k.lower(), v) for k, v in headers if not _benign_header(k.lower())]

    changes = _pairs_changes("header", table(old), table(new))
    for change in changes:
        if _key(change.where) in ("content-type",) and "boundary=" in change.what:
            change.kind, change.reason = BENIGN, "ids"  # a multipart boundary, drawn anew
    return changes


def _body_changes(old: Request, new: Request, ignore: tuple[str, ...] = ()) -> list[Change]:
    want = _decoded(old.headers, old.body)
    got = _decoded(new.headers, new.body)
    (old_json, old_doc), (new_json, new_doc) = parse_json(want), parse_json(got)
    if old_json and new_json:
        for path in ignore:
            jsonpath.delete(old_doc, path)
            jsonpath.delete(new_doc, path)
        return request_json_changes("request body", old_doc, new_doc)
    matcher = Matcher()
    if matcher.body_key(old.body) == matcher.body_key(new.body):
        return []  # the same parts under another multipart boundary, say
    lines = [line for line in matcher.differences(old, new) if line.startswith("body")]
    return [Change(REQUEST, f"request {line}".partition(": ")[0], line.partition(": ")[2])
            for line in lines] or [Change(REQUEST, "request body", "bytes differ")]  # fmt: skip


# -- interactions ------------------------------------------------------------------------------


def _outcome(interaction: Interaction) -> str:
    if interaction.response is not None:
        return f"status {interaction.response.status}"
    error = interaction.error
    return f"no answer: {error.kind}" if error is not None else "no answer"


def interaction_changes(old: Interaction, new: Interaction) -> list[Change]:
    """Everything that changed from ``old`` to ``new``, a recording of the same call."""
    changes = request_changes(old.request, new.request)
    if old.boundary != new.boundary:
        changes.append(Change(REQUEST, "boundary", f"{old.boundary}, now {new.boundary}"))
    if old.frames is not None or new.frames is not None:
        return changes + _frame_changes(old, new)
    if old.response is None or new.response is None:
        if _outcome(old) != _outcome(new):
            changes.append(Change(RESPONSE, "answer", f"{_outcome(old)}, now {_outcome(new)}"))
        return changes
    if (old.error is None) != (new.error is None):
        changes.append(Change(RESPONSE, "answer", "cut short by a transport error"
                              if new.error is not None else "now whole"))  # fmt: skip
    return changes + _response_changes(old.response, new.response)


def _frames(interaction: Interaction, direction: str) -> list[Any]:
    """One side's frames of a WebSocket session: JSON read, anything else as hex."""
    found = []
    for frame in interaction.frames or ():
        if frame.direction == direction and frame.opcode != "close":
            is_json, document = parse_json(frame.payload)
            found.append(document if is_json else frame.payload.hex())
    return found


def _frame_changes(old: Interaction, new: Interaction) -> list[Change]:
    """A WebSocket session: what the client sent as a request, what the server sent by
    shape."""
    changes = request_json_changes("client frames", _frames(old, "client"), _frames(new, "client"))
    return changes + _shape_changes("server frames", _frames(old, "server"), _frames(new, "server"))


def judge(old: list[Interaction], new: list[Interaction]) -> list[Verdict]:
    """One verdict per position: the old recording against the new one."""
    verdicts = []
    for index in range(max(len(old), len(new))):
        before = old[index] if index < len(old) else None
        after = new[index] if index < len(new) else None
        shown = after or before
        assert shown is not None
        verdict = Verdict(index, f"{shown.request.method} {shown.request.url}")
        if before is None:
            verdict.changes.append(Change(REQUEST, "interaction", "new: the code makes it now"))
        elif after is None:
            verdict.changes.append(Change(REQUEST, "interaction", "gone: no longer made"))
        else:
            verdict.changes = interaction_changes(before, after)
        verdicts.append(verdict)
    return verdicts


def worse(old: list[Interaction], new: list[Interaction]) -> list[int]:
    """Positions where the old recording holds an answer and the new one failed without
    any (a connection refused, a timeout): a re-recording made while the service was down."""
    return [
        index
        for index, (before, after) in enumerate(zip(old, new, strict=False))
        if before.response is not None and after.response is None and after.error is not None
    ]
