"""Shapes of credentials, shared by default redaction and by ``agenttape audit``."""

from __future__ import annotations

import re

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
    }
)

SECRET_QUERY_NAMES = frozenset({"api_key", "key", "token", "access_token"})

# name -> pattern; each names a credential a provider issues, so a hit is worth a look.
SECRET_PATTERNS: dict[str, str] = {
    "anthropic-key": r"sk-ant-[A-Za-z0-9_\-]{20,}",
    "openai-key": r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "aws-access-key-id": r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    "google-api-key": r"AIza[0-9A-Za-z_\-]{35}",
    "github-token": r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    "slack-token": r"xox[abposr]-[A-Za-z0-9\-]{10,}",
    "bearer-token": r"[Bb]earer\s+[A-Za-z0-9._~+/\-]{16,}=*",
    "private-key": r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----",
}

# Literal pieces every pattern above contains: a cheap scan skips the full regex for the common
# text that holds no credential at all. Pieces sharing a literal head are folded into one regex
# led by that head, which the regex engine scans for in C: six scans instead of thirteen.
_PROBES = ("sk-", "A(?:KIA|SIA|Iza)", "g(?:h[pousr]|ithub_pat)_", "xox", "earer", "PRIVATE KEY")
_TEXT_PROBES = tuple(re.compile(probe).search for probe in _PROBES)
_BYTES_PROBES = tuple(re.compile(probe.encode()).search for probe in _PROBES)
_ANY_TEXT_PROBE = re.compile("|".join(_PROBES)).search
_SHORT_TEXT = 512

SECRET_REGEX = re.compile("|".join(f"(?:{p})" for p in SECRET_PATTERNS.values()))
_SECRET_BYTES_REGEX = re.compile(SECRET_REGEX.pattern.encode())
_REDACTED_BYTES = REDACTED.encode()


def may_hold_secret(data: bytes) -> bool:
    return any(probe(data) for probe in _BYTES_PROBES)


def may_hold_secret_text(text: str) -> bool:
    # On short text (URLs, query values, header values) one alternation beats six scans; on
    # long text the six scans for literal heads are faster. Both find the same pieces.
    if len(text) < _SHORT_TEXT:
        return _ANY_TEXT_PROBE(text) is not None
    return any(probe(text) for probe in _TEXT_PROBES)


def scrub_bytes(data: bytes) -> bytes:
    """``data`` with every credential-shaped run replaced; the same object when there is none."""
    if not may_hold_secret(data):
        return data
    return _SECRET_BYTES_REGEX.sub(_REDACTED_BYTES, data)


def scrub_text(text: str) -> str:
    if not may_hold_secret_text(text):
        return text
    return SECRET_REGEX.sub(REDACTED, text)
