"""Secrets never reach the disk, and a replay made with another key still matches."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import agenttape
from agenttape._core.redaction import Redactor
from agenttape._core.secrets import (
    SECRET_REGEX,
    may_hold_secret,
    may_hold_secret_text,
    scrub_bytes,
    scrub_text,
)
from tests.servers import Reply, json_reply

FAKE_KEY = "sk-agenttapeFAKEkey0123456789abcdefXYZ"
OTHER_KEY = "sk-anotherFAKEkey9876543210zyxwvuABC"


def test_fake_key_appears_nowhere_in_the_cassette(serve: Any, cassette_path: Path) -> None:
    server = serve(
        lambda seen: Reply(
            headers=[("Set-Cookie", f"session={FAKE_KEY}"), ("Content-Type", "application/json")],
            chunks=[b'{"ok": true}'],
        )
    )

    def call(key: str) -> Any:
        return httpx.post(
            f"{server.url}/v1/chat?api_key={key}&page=1",
            headers={"Authorization": f"Bearer {key}", "x-api-key": key, "Cookie": f"k={key}"},
            json={"model": "m", "note": f"key is {key}"},
        ).json()

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert call(FAKE_KEY) == {"ok": True}
    data = cassette_path.read_bytes()
    assert FAKE_KEY.encode() not in data
    assert b"agenttapeFAKEkey" not in data
    assert data.count(b"<redacted>") >= 6
    server.stop()
    with agenttape.use_cassette(cassette_path) as tape:
        assert call(OTHER_KEY) == {"ok": True}
    assert tape.all_played
    stored = tape.interactions[0]
    assert ("Authorization", "<redacted>") in stored.request.headers
    assert "api_key=<redacted>&page=1" in stored.request.url
    assert stored.response is not None
    assert stored.response.body == b'{"ok": true}'


def test_user_rules_redact_headers_query_json_and_patterns(serve: Any, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    rules = ["header:X-Org", "query:sig", "json:user.email", "regex:acct_[0-9]+"]
    with agenttape.use_cassette(cassette_path, mode="once", redact=rules):
        httpx.post(
            f"{server.url}/charge?sig=s3cret&plain=1",
            headers={"X-Org": "org-secret"},
            json={"user": {"email": "a@b.test", "name": "Ann"}, "account": "acct_12345"},
        )
    data = cassette_path.read_bytes()
    for secret in (b"org-secret", b"s3cret", b"a@b.test", b"acct_12345"):
        assert secret not in data
    assert b"Ann" in data and b"plain=1" in data


def test_bad_rules_are_rejected() -> None:
    with pytest.raises(ValueError, match="redact rule"):
        Redactor.from_rules(["headers:x"])
    with pytest.raises(ValueError, match="bad regex"):
        Redactor.from_rules(["regex:("])
    with pytest.raises(ValueError, match="not a JSON path"):
        Redactor.from_rules(["json:a..b"])


def test_redaction_leaves_ordinary_requests_byte_identical() -> None:
    request = agenttape.Request(
        "POST",
        "https://api.test/v1/x?q=ok",
        [("Content-Type", "application/json"), ("Accept", "*/*")],
        b'{"text": "nothing secret, only a skeleton key and tokens of thanks"}',
    )
    assert Redactor().request(request) == request


def test_deeply_nested_json_body_is_recorded_not_refused() -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    request = agenttape.Request("POST", "https://api.test/", [], body)
    assert Redactor.from_rules(["json:a.b"]).request(request).body == body


def test_a_header_list_seen_again_is_redacted_the_same_and_handed_out_fresh() -> None:
    redactor = Redactor.from_rules(["header:x-org", "regex:acct_[0-9]+"])
    headers = [("Authorization", "Bearer abcdefghijklmnopqrstuv"), ("X-Org", "o"), ("A", "acct_42")]
    first = redactor.request(agenttape.Request("GET", "https://api.test/", list(headers)))
    first.headers.append(("Mutated", "by the caller"))
    second = redactor.request(agenttape.Request("GET", "https://api.test/", list(headers)))
    assert second.headers == [
        ("Authorization", "<redacted>"),
        ("X-Org", "<redacted>"),
        ("A", "<redacted>"),
    ]
    assert second.headers is not first.headers


def test_query_names_are_compared_decoded() -> None:
    redactor = Redactor.from_rules(["query:sig value"])
    url = "https://api.test/x?api%5Fkey=1&sig+value=2&sig%20value=3&Key=4&ok=5&flag&=6"
    redacted = redactor.request(agenttape.Request("GET", url)).url
    assert redacted == (
        "https://api.test/x?api%5Fkey=<redacted>&sig+value=<redacted>&sig%20value=<redacted>"
        "&Key=<redacted>&ok=5&flag&=6"
    )
    plain = "https://api.test/x?ok=5&flag&=6#frag"
    assert redactor.request(agenttape.Request("GET", plain)).url == plain


QUERY_NAMES = ["key", "Key", "API_KEY", "monkey", "token", "access_token", "ok", "İ", "%6Bey"]
QUERY_VALUES = ["1", "sk-" + "a" * 24, "sk%2D" + "a" * 24, "Bearer+" + "b" * 20, "", "\u017f"]


@given(
    pairs=st.lists(
        st.tuples(
            st.sampled_from(QUERY_NAMES) | st.text(max_size=6),
            st.sampled_from(QUERY_VALUES) | st.text(max_size=6),
        ),
        max_size=5,
    ),
    fragment=st.sampled_from(["", "#top", "#key=1"]),
)
@example(pairs=[("ok", "sk%2D" + "a" * 24)], fragment="")
@example(pairs=[("%6Bey", "1"), ("monkey", "2")], fragment="")
@example(pairs=[("Key", "1"), ("İ", "2")], fragment="#top")
def test_the_quick_look_at_a_query_agrees_with_the_full_scan(
    pairs: list[tuple[str, str]], fragment: str
) -> None:
    """Most URLs skip the per-value scan; a user pattern (one that never matches) makes the
    redactor scan every URL in full, and both must give the same URL."""
    query = "&".join(f"{name}={value}" for name, value in pairs)
    url = f"https://api.test/x?{query}{fragment}"
    full_scan = Redactor(patterns=(re.compile("(?!)"),))
    assert Redactor()._url(url) == full_scan._url(url)


@pytest.mark.parametrize(
    "anchor",
    [
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
    ],
)
def test_every_credential_anchor_sends_text_to_the_full_scan(anchor: str) -> None:
    for padding in ("padding", "x" * 600):  # short text and long text take different scans
        text = f"{padding} {anchor} {padding}"
        assert may_hold_secret(text.encode())
        assert may_hold_secret_text(text)
        assert scrub_text(text) == SECRET_REGEX.sub("<redacted>", text)
        assert not may_hold_secret(text.replace(anchor, "plain").encode())
        assert not may_hold_secret_text(text.replace(anchor, "plain"))


def test_credentials_found_by_the_probes_are_scrubbed() -> None:
    token = "ghp_" + "a" * 36
    body = f'{{"auth": "{token}", "aws": "AKIAABCDEFGHIJKLMNOP"}}'.encode()
    assert scrub_bytes(body) == b'{"auth": "<redacted>", "aws": "<redacted>"}'
    assert scrub_text(f"Bearer {'x' * 20}") == "<redacted>"
