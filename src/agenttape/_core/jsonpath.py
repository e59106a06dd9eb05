"""The small JSON path dialect shared by ``ignore_json_fields`` and ``redact``.

``metadata.request_id``, ``messages[*].id``, ``messages[0].content``: dotted names, ``[N]``
for one list item and ``[*]`` for every item.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

Step = str | int | None  # a key, a list index, or None for every item

_NAME = r"[^.\[\]]+"
_INDEX = r"\[(?:\*|-?\d+)\]"
_PATH = re.compile(rf"{_NAME}(?:\.{_NAME}|{_INDEX})*")
_STEP = re.compile(rf"({_NAME})|\[(\*|-?\d+)\]")


@lru_cache(maxsize=256)
def parse(path: str) -> tuple[Step, ...]:
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        raise ValueError(f"not a JSON path: {path!r} (expected e.g. 'messages[*].id')")
    steps: list[Step] = []
    for name, index in _STEP.findall(path):
        if name:
            steps.append(name)
        else:
            steps.append(None if index == "*" else int(index))
    return tuple(steps)


def _apply(document: Any, steps: tuple[Step, ...], action: Callable[[Any, Any], bool]) -> bool:
    """Call ``action(container, key)`` on every place the path names; True if any was found."""
    if not steps:
        return False
    step, rest = steps[0], steps[1:]
    if isinstance(step, str):
        if not isinstance(document, dict) or step not in document:
            return False
        keys: list[Any] = [step]
    elif step is None:
        if not isinstance(document, list):
            return False
        keys = list(range(len(document)))
    else:
        if not isinstance(document, list) or not -len(document) <= step < len(document):
            return False
        keys = [step]
    found = False
    for key in reversed(keys):
        if rest:
            found = _apply(document[key], rest, action) or found
        else:
            found = action(document, key) or found
    return found


def delete(document: Any, path: str) -> bool:
    def remove(container: Any, key: Any) -> bool:
        del container[key]
        return True

    return _apply(document, parse(path), remove)


def replace(document: Any, path: str, value: Any) -> bool:
    def assign(container: Any, key: Any) -> bool:
        container[key] = value
        return True

    return _apply(document, parse(path), assign)
