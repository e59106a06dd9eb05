"""Python values crossing a function boundary, stored as JSON the matcher already understands.

Boundary arguments and results are held to what msgpack can carry (dict, list, str, bytes,
int, float, bool, None, datetime) and written as JSON so that matching, ``ignore_json_fields``,
JSON redaction rules and the field-by-field miss report work on them unchanged. The few values
JSON lacks travel as one-key tagged objects: ``{"$bytes": base64}``, ``{"$datetime": iso}``, and
``{"$map": [[key, value], ...]}`` for a dict whose keys are not all strings (or that could be
mistaken for a tag).
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
from typing import Any

ALLOWED = "dict, list, tuple, str, bytes, int, float, bool, None or datetime"
_TAGS = frozenset({"$bytes", "$datetime", "$map"})
_INT_RANGE = (-(2**63), 2**64 - 1)


def to_json(value: Any, what: str) -> Any:
    """``value`` as a JSON document; TypeError naming ``what`` and the path of an unfit part."""
    return _encode(value, what, "")


def _encode(value: Any, what: str, path: str) -> Any:
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise TypeError(f"{what}{_at(path)} is an int too large for msgpack (64 bits): {value}")
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [_encode(item, what, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value) and not (
            len(value) == 1 and next(iter(value)) in _TAGS
        ):
            return {key: _encode(item, what, f"{path}.{key}") for key, item in value.items()}
        return {
            "$map": [
                [_encode(key, what, f"{path}.<key>"), _encode(item, what, f"{path}.{key!r}")]
                for key, item in value.items()
            ]
        }
    kind = type(value)
    raise TypeError(
        f"{what}{_at(path)} is a {kind.__module__}.{kind.__qualname__}, which a cassette cannot "
        f"hold; boundaries record {ALLOWED} values (pass plain data, or put the boundary around "
        "a function that takes and returns plain data)"
    )


def _at(path: str) -> str:
    return f" at {path.lstrip('.')}" if path else ""


def from_json(document: Any) -> Any:
    """The Python value ``to_json`` wrote (tuples come back as lists, as msgpack gives them)."""
    if isinstance(document, list):
        return [from_json(item) for item in document]
    if isinstance(document, dict):
        if len(document) == 1:
            ((tag, payload),) = document.items()
            if tag == "$bytes":
                return base64.b64decode(payload)
            if tag == "$datetime":
                return _dt.datetime.fromisoformat(payload)
            if tag == "$map":
                return {_hashable(from_json(k)): from_json(v) for k, v in payload}
        return {key: from_json(item) for key, item in document.items()}
    return document


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def dumps(document: Any) -> bytes:
    """Compact JSON keeping dict order: a replayed dict iterates as the recorded one did (the
    matcher compares JSON canonically, so order never decides a match)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def loads(data: bytes) -> Any:
    return from_json(json.loads(data)) if data else None
