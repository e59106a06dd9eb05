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

# Literal pieces every pattern above contains: a cheap substring test skips the regex for
# the common body that holds no credential at all.
_TEXT_ANCHORS = (
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
    "earer",
    "PRIVATE KEY",
)
_ANCHORS = tuple(anchor.encode() for anchor in _TEXT_ANCHORS)

SECRET_REGEX = re.compile("|".join(f"(?:{p})" for p in SECRET_PATTERNS.values()))
_SECRET_BYTES_REGEX = re.compile(SECRET_REGEX.pattern.encode())
_REDACTED_BYTES = REDACTED.encode()


def may_hold_secret(data: bytes) -> bool:
    return any(anchor in data for anchor in _ANCHORS)


def scrub_bytes(data: bytes) -> bytes:
    """``data`` with every credential-shaped run replaced; the same object when there is none."""
    if not may_hold_secret(data):
        return data
    return _SECRET_BYTES_REGEX.sub(_REDACTED_BYTES, data)


def scrub_text(text: str) -> str:
    if not any(anchor in text for anchor in _TEXT_ANCHORS):
        return text
    return SECRET_REGEX.sub(REDACTED, text)
