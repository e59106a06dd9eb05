"""Faults as one line of text: the form ``agenttape run --fault`` and ``agenttape proxy
--fault`` take on the command line, and ``agenttape faults`` proposes. (Child processes get
them as JSON in ``AGENTTAPE_FAULTS``: ``faults.fault_to_json``.)

The text form, every part but the kind optional::

    [METHOD] PATTERN[#N]=KIND[:NAME=VALUE,NAME=VALUE...]

- ``PATTERN`` is the request pattern ``agenttape.fault(on=...)`` takes: a URL glob matched
  against ``host/path``, or against the path when it starts with ``/``; ``*`` for any request.
- ``#N`` fires on the Nth matching request (``nth=N``).
- ``KIND`` is a fault kind (``rate_limit``, ``cut_stream``, ``close``, ``grpc_status``...).
- After ``:``, comma-separated ``NAME=VALUE`` pairs: the kind's options (``retry_after=30``,
  ``after_chunks=3``, ``code=UNAVAILABLE``) and the other selectors (``host=api.example.com``,
  ``index=4``, ``every=3``, ``times=1``, ``probability=0.2``, ``seed=7``). Numbers are read as
  numbers, ``true`` and ``false``
  as yes and no, anything else as text.

So ``POST api.openai.com/v1/chat/completions#2=rate_limit:retry_after=30`` is
``agenttape.fault("rate_limit", on="POST api.openai.com/v1/chat/completions", nth=2,
retry_after=30)``, and ``timeout:host=api.search.example,probability=0.2,seed=7`` a timeout on
one request in five to that host, the same ones on every run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import FAULT_KINDS as KINDS
from . import Fault, fault
from .sessions import check

SELECTORS = ("on", "host", "index", "nth", "every", "times", "probability", "seed")
"""The arguments of ``agenttape.fault`` that choose requests, in the order the text form
writes them."""

SYNTAX = "[METHOD] PATTERN[#N]=KIND[:NAME=VALUE,...]"

_KIND = "|".join(sorted(KINDS, key=len, reverse=True))
_KIND_AT = re.compile(rf"(?:^|=)(?P<kind>{_KIND})(?=:|$)")
_NTH = re.compile(r"#(?P<nth>[^#]*)$")
_NAME = re.compile(r"[a-z_]+")


class FaultSpecError(ValueError):
    """A fault written as text or JSON that cannot be read: the message says what is wrong
    and shows the form."""


def parse_fault(text: str) -> Fault:
    """The fault ``text`` describes (module docstring). Raises FaultSpecError."""
    spec = text.strip()
    if not spec:
        raise FaultSpecError(f"empty fault; write {SYNTAX}, e.g. {_EXAMPLE}")
    found = _KIND_AT.search(spec)  # the first kind word after '=' ending at ':' or the end
    if found is None:
        raise FaultSpecError(_no_kind(spec))
    selector = spec[: found.start()].strip()
    arguments: dict[str, Any] = {}
    options_text = spec[found.end() + 1 :] if found.end() < len(spec) else ""
    if found.end() < len(spec) and not options_text.strip():
        raise FaultSpecError(f"fault {text!r}: nothing after ':'; write NAME=VALUE pairs")
    if selector:
        nth = _NTH.search(selector)
        if nth is not None:
            arguments["nth"] = _positive(nth.group("nth"), text, "#N")
            selector = selector[: nth.start()].strip()
        if selector and selector != "*":
            arguments["on"] = selector
    for name, value in _options(options_text, text):
        if name in arguments:
            raise FaultSpecError(f"fault {text!r}: {name} given twice")
        arguments[name] = value
    return _build(found.group("kind"), arguments, text)


def _no_kind(spec: str) -> str:
    words = re.findall(r"=([A-Za-z_]+)(?::|$)", spec) or re.findall(r"^([A-Za-z_]+)(?::|$)", spec)
    unknown = f" ({words[0]!r} is not one)" if words else ""
    return (
        f"fault {spec!r} names no kind{unknown}; write {SYNTAX}, e.g. {_EXAMPLE}; kinds: "
        + ", ".join(KINDS)
    )


def _options(text: str, spec: str) -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = []
    if not text:
        return pairs
    for part in text.split(","):
        name, separator, value = part.partition("=")
        name = name.strip()
        if not separator or not _NAME.fullmatch(name) or not value.strip():
            raise FaultSpecError(
                f"fault {spec!r}: {part.strip()!r} is not NAME=VALUE (e.g. retry_after=30)"
            )
        pairs.append((name, _value(value.strip())))
    return pairs


def _value(text: str) -> object:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _positive(text: str, spec: str, what: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise FaultSpecError(f"fault {spec!r}: {what} must be a whole number from 1, not {text!r}")
    return number


def _build(kind: str, arguments: Mapping[str, Any], source: object) -> Fault:
    try:
        item = fault(kind, **arguments)  # type: ignore[arg-type]
        check(item)
        return item
    except (TypeError, ValueError) as exc:
        raise FaultSpecError(f"fault {source!r}: {exc}") from None


_EXAMPLE = "'POST api.openai.com/v1/chat/completions#2=rate_limit:retry_after=30'"


def fault_to_text(item: Fault) -> str:
    """``item`` in the text form ``parse_fault`` reads back (for ``--fault``)."""
    selector = item.on or ""
    if item.nth is not None:
        selector = f"{selector or '*'}#{item.nth}"
    pairs = [
        (name, getattr(item, name))
        for name in SELECTORS
        if name not in ("on", "nth") and getattr(item, name) is not None
    ]
    pairs.extend(item.options.items())
    options = ",".join(f"{name}={_text(value)}" for name, value in pairs)
    text = f"{selector}={item.kind}" if selector else item.kind
    return f"{text}:{options}" if options else text


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fault_to_python(item: Fault) -> str:
    """``item`` as the ``agenttape.fault(...)`` call that makes it."""
    arguments = [repr(item.kind)]
    for name in SELECTORS:
        value = getattr(item, name)
        if value is not None:
            arguments.append(f"{name}={value!r}")
    arguments.extend(f"{name}={value!r}" for name, value in item.options.items())
    return f"agenttape.fault({', '.join(arguments)})"
