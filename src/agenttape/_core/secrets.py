"""Shapes and names of credentials, shared by default redaction and by ``agenttape audit``:
what one removes the other looks for, so the two never disagree."""

from __future__ import annotations

import functools
import re
from typing import Any, AnyStr

REDACTED = "<redacted>"

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-amz-security-token",
        "x-auth-token",
        "x-access-token",
        "private-token",
        "x-vault-token",
        "ocp-apim-subscription-key",
        "x-functions-key",
    }
)

SECRET_QUERY_NAMES = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "key",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
        "password",
        "secret",
        "sig",
        "signature",
        "x-amz-security-token",
        "x-amz-signature",
        "x-goog-signature",
    }
)
"""Query parameters, and the fields of form-encoded and multipart bodies (the same
``name=value`` pairs), whose values are credentials whatever they look like: API keys,
OAuth tokens and client secrets, passwords, and the signatures and session tokens of
presigned S3 and GCS URLs and Azure SAS URLs."""

SECRET_JSON_KEYS = (
    "password",
    "passwd",
    "client_secret",
    "secret",
    "api_key",
    "api_secret",
    "access_token",
    "refresh_token",
    "id_token",
    "session_token",
    "auth_token",
    "private_key",
    "secret_key",
    "secret_access_key",
    "aws_secret_access_key",
)
"""JSON object keys whose string values are credentials, compared without case, ``_`` or
``-`` (``clientSecret``, ``client-secret``): these names mean a credential in any API.
Bare ``key`` and ``token`` are left out, since in JSON they name ordinary things too (a
log-probability's token, a sort key)."""


def _word(head: str) -> str:
    """``head`` (a literal) where a credential can begin: not inside a longer word, so that
    ``flask-api-…`` is no ``sk-…`` key. A percent escape (``%20``) or a JSON escape (``\\n``,
    ``\\u0022``) before it stands for a separator. The look-behind follows the literal, so
    the regex engine still finds the literal by its fast scan."""
    escaped = re.escape(head)
    return (
        f"{escaped}(?:(?<![A-Za-z0-9_\\-]{escaped})|(?<=%[0-9A-Fa-f]{{2}}{escaped})"
        f"|(?<=\\\\[nrtbf]{escaped})|(?<=\\\\u[0-9A-Fa-f]{{4}}{escaped}))"
    )


def _heads(*heads: str) -> str:
    return "(?:" + "|".join(_word(head) for head in heads) + ")"


_PEM_BODY = r"(?:[A-Za-z0-9+/=\s:,\-]|\\[nrt]|%[0-9A-Fa-f]{2})"
_PEM_BEGIN = r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"
_PEM_END = r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----"

# name -> pattern; each names a credential a provider issues, so a hit is worth a look.
# Ordered from the most specific: ``audit`` reports overlapping shapes by the first name.
SECRET_PATTERNS: dict[str, str] = {
    "anthropic-key": _word("sk-ant-") + r"[A-Za-z0-9_\-]{20,}",
    "openai-key": _word("sk-") + r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "aws-access-key-id": _heads("AKIA", "ASIA") + r"[0-9A-Z]{16}(?![0-9A-Za-z])",
    "google-api-key": _word("AIza") + r"[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])",
    "github-token": _heads("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    + r"[A-Za-z0-9]{36,}|"
    + _word("github_pat_")
    + r"[A-Za-z0-9_]{22,}",
    "slack-token": _word("xox") + r"[abposr]-[A-Za-z0-9\-]{10,}",
    "bearer-token": _heads("Bearer", "bearer") + r"\s+[A-Za-z0-9._~+/\-]{16,}=*",
    "jwt": _word("eyJ") + r"[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*",
    # The whole block, up to its END line; a block cut short, up to where its text stops.
    "private-key": f"{_PEM_BEGIN}(?:{_PEM_BODY}{{0,65536}}?{_PEM_END}|{_PEM_BODY}*)",
}

# Literal pieces every pattern above contains: a cheap scan skips the full regex for the common
# text that holds no credential at all. Pieces sharing a literal head are folded into one regex
# led by that head, which the regex engine scans for in C: seven scans instead of fifteen.
_PROBES = (
    "sk-",
    "A(?:KIA|SIA|Iza)",
    "g(?:h[pousr]|ithub_pat)_",
    "xox",
    "earer",
    "PRIVATE KEY",
    "eyJ",
)
_TEXT_PROBES = tuple(re.compile(probe).search for probe in _PROBES)
_BYTES_PROBES = tuple(re.compile(probe.encode()).search for probe in _PROBES)
_ANY_TEXT_PROBE = re.compile("|".join(_PROBES)).search
_SHORT_TEXT = 512

SECRET_PATTERN = "|".join(f"(?:{p})" for p in SECRET_PATTERNS.values())
"""Every credential shape in one alternation; compiled only once a probe has found a head
(most processes never need it, and compiling it costs milliseconds at start-up)."""


@functools.cache
def secret_regex() -> re.Pattern[str]:
    return re.compile(SECRET_PATTERN)


@functools.cache
def secret_bytes_regex() -> re.Pattern[bytes]:
    return re.compile(SECRET_PATTERN.encode())


_REDACTED_BYTES = REDACTED.encode()

# Where a credential can begin: every pattern above starts with one of these literals (its
# ``_word`` head, or the key block's first line; tests/test_redaction.py holds each pattern
# to it). The alternation has no literal of its own to scan for, so ``sub`` tries it at every
# character: on a long body that a probe let through (a base64 image holds ``eyJ`` by
# chance) a scan per literal, then a try where one stands, costs a small part of that.
CREDENTIAL_STARTS = (
    "sk-",
    "AKIA",
    "ASIA",
    "AIza",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "Bearer",
    "bearer",
    "eyJ",
    "-----BEGIN ",
)
_BYTES_STARTS = tuple(start.encode() for start in CREDENTIAL_STARTS)


def _replaced(
    data: AnyStr, regex: re.Pattern[AnyStr], starts: tuple[AnyStr, ...], replacement: AnyStr
) -> AnyStr:
    """``regex.sub(replacement, data)``, the regex tried only where one of ``starts`` stands:
    the same result wherever every match begins with one of them."""
    found: set[int] = set()
    for start in starts:
        at = data.find(start)
        while at >= 0:
            found.add(at)
            at = data.find(start, at + 1)
    pieces: list[AnyStr] = []
    end = 0
    for at in sorted(found):
        if at < end:
            continue
        match = regex.match(data, at)
        if match is not None:
            pieces += (data[end:at], replacement)
            end = match.end()
    if not pieces:
        return data
    pieces.append(data[end:])
    return data[:0].join(pieces)


def may_hold_secret(data: bytes) -> bool:
    return any(probe(data) for probe in _BYTES_PROBES)


def may_hold_secret_text(text: str) -> bool:
    # On short text (URLs, query values, header values) one alternation beats seven scans; on
    # long text the seven scans for literal heads are faster. Both find the same pieces.
    if len(text) < _SHORT_TEXT:
        return _ANY_TEXT_PROBE(text) is not None
    return any(probe(text) for probe in _TEXT_PROBES)


def scrub_bytes(data: bytes) -> bytes:
    """``data`` with every credential-shaped run replaced; the same object when there is none."""
    if not may_hold_secret(data):
        return data
    return _replaced(data, secret_bytes_regex(), _BYTES_STARTS, _REDACTED_BYTES)


def scrub_text(text: str) -> str:
    if not may_hold_secret_text(text):
        return text
    return _replaced(text, secret_regex(), CREDENTIAL_STARTS, REDACTED)


_KEY_NAMES = frozenset(key.replace("_", "") for key in SECRET_JSON_KEYS)


def secret_key(name: str) -> bool:
    """True when a JSON key or a tag of this name holds a credential (``SECRET_JSON_KEYS``,
    compared without case, ``_`` or ``-``)."""
    return name.lower().replace("_", "").replace("-", "") in _KEY_NAMES


# A JSON key (also one escaped inside a JSON string): led by a quote, so the regex engine
# scans for quotes in C and most text costs nothing.
_JSON_KEY = re.compile(rb'"([A-Za-z_\-]{2,40})\\?"\s*:')


def _key_pattern(key: str) -> str:
    """``key`` in any case, its ``_`` written as ``_``, ``-`` or nothing."""
    return "[_-]?".join(re.escape(part) for part in key.split("_"))


_KEYS = "|".join(_key_pattern(key) for key in sorted(SECRET_JSON_KEYS, key=len, reverse=True))
_ASSIGNED = re.compile(rf"(?i:\b(?:{_KEYS})\b)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&)]+)")


def scrub_note(text: str) -> str:
    """Free text written beside the exchanges (a run's reasons and flags, tag values) with
    credential shapes replaced, and the value after a credential's name (``password=…``,
    ``api_key: …``)."""
    return _ASSIGNED.sub(_assigned, scrub_text(text))


def _assigned(match: re.Match[str]) -> str:
    """The name and separator of a ``name=value`` match, the value replaced."""
    return match.group()[: match.end(1) - match.start()] + REDACTED


def scrub_tags(value: Any) -> Any:
    """Tags as a header stores them: the values of credential-named keys (``secret_key``)
    replaced, and credentials in any text (``scrub_note``), at any depth."""
    if isinstance(value, str):
        return scrub_note(value)
    if isinstance(value, bytes):
        return scrub_bytes(value)
    if isinstance(value, dict):
        return {
            key: REDACTED if isinstance(key, str) and secret_key(key) else scrub_tags(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_tags(item) for item in value)
    return value


# A credential key and its string value, in JSON or in JSON inside a JSON string (a tool
# call's arguments): ``"password": "..."`` or ``\"password\": \"...\"``.
JSON_SECRET_REGEX = re.compile(
    (
        rf'(?i:"(?:{_KEYS})"\s*:\s*")((?:[^"\\]|\\.)*)"'
        rf'|(?i:\\"(?:{_KEYS})\\"\s*:\s*\\")((?:[^"\\]|\\[^"])*)\\"'
    ).encode()
)


def _spellings(key: str) -> set[bytes]:
    """``key`` lowercased, its words joined by ``_``, ``-`` or nothing."""
    spelled = {""}
    for index, word in enumerate(key.split("_")):
        joins = ("",) if index == 0 else ("_", "-", "")
        spelled = {done + join + word for done in spelled for join in joins}
    return {spelling.encode() for spelling in spelled}


_KEY_SPELLINGS = frozenset().union(*(_spellings(key) for key in SECRET_JSON_KEYS))


def may_hold_json_field(data: bytes) -> bool:
    """A cheap look for a key of ``SECRET_JSON_KEYS`` in JSON text."""
    return any(key.lower() in _KEY_SPELLINGS for key in _JSON_KEY.findall(data))


def json_field_replacement(match: re.Match[bytes]) -> bytes:
    """A match of ``JSON_SECRET_REGEX`` with its value replaced (kept when already done)."""
    group = 1 if match.group(1) is not None else 2
    if match.group(group) == _REDACTED_BYTES:
        return match.group()
    start, end = match.span(group)
    whole, offset = match.group(), match.start()
    return whole[: start - offset] + _REDACTED_BYTES + whole[end - offset :]


def scrub_json_fields(data: bytes) -> bytes:
    """``data`` with the string values of credential keys (``SECRET_JSON_KEYS``) replaced,
    wherever JSON text holds them; the same object when there is none. The text around them
    is left byte for byte: nothing is parsed and written again."""
    if not may_hold_json_field(data):
        return data
    return JSON_SECRET_REGEX.sub(json_field_replacement, data)
