"""Secrets never reach the disk, and a replay made with another key still matches."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import agenttape
from agenttape._core import meta
from agenttape._core.redaction import Redactor
from agenttape._core.secrets import (
    CREDENTIAL_STARTS,
    SECRET_HEADERS,
    SECRET_PATTERNS,
    may_hold_secret,
    may_hold_secret_text,
    scrub_bytes,
    scrub_text,
    secret_bytes_regex,
    secret_regex,
)
from agenttape._core.wire import codec
from tests.servers import Reply, Seen, Server, json_reply

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


def test_a_replayed_request_that_misses_or_records_shows_no_secret_header(
    serve: Any, cassette_path: Path
) -> None:
    """Matching reads no header, so a matched request's headers are not redacted; a request
    that misses (the error shows it) or is recorded (new_episodes) is redacted whole."""
    server = serve(lambda seen: json_reply({"ok": True}))
    headers = {"Authorization": f"Bearer {FAKE_KEY}", "x-api-key": FAKE_KEY}
    with agenttape.use_cassette(cassette_path, mode="once"):
        httpx.get(f"{server.url}/a", headers=headers)
    with agenttape.use_cassette(cassette_path) as tape:
        assert httpx.get(f"{server.url}/a", headers=headers).json() == {"ok": True}
        with pytest.raises(agenttape.UnmatchedInteractionError) as missed:
            httpx.get(f"{server.url}/b", headers=headers)
    assert tape.all_played
    assert FAKE_KEY not in str(missed.value)
    assert missed.value.request is not None
    assert FAKE_KEY not in repr(missed.value.request.headers)
    assert ("Authorization", "<redacted>") in missed.value.request.headers
    with agenttape.use_cassette(cassette_path, mode="new_episodes") as tape:
        httpx.get(f"{server.url}/a", headers=headers)
        httpx.get(f"{server.url}/c", headers=headers)
    assert [i.request.url.rsplit("/", 1)[1] for i in tape.interactions] == ["a", "c"]
    assert FAKE_KEY.encode() not in cassette_path.read_bytes()


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
        assert scrub_text(text) == secret_regex().sub("<redacted>", text)
        assert not may_hold_secret(text.replace(anchor, "plain").encode())
        assert not may_hold_secret_text(text.replace(anchor, "plain"))


def test_credentials_found_by_the_probes_are_scrubbed() -> None:
    token = "ghp_" + "a" * 36
    body = f'{{"auth": "{token}", "aws": "AKIAABCDEFGHIJKLMNOP"}}'.encode()
    assert scrub_bytes(body) == b'{"auth": "<redacted>", "aws": "<redacted>"}'
    assert scrub_text(f"Bearer {'x' * 20}") == "<redacted>"


def literal_starts(items: list[Any]) -> set[str]:
    """The literals a match of ``items`` (a parsed pattern) may begin with, each as far as
    it is literal."""
    parser: Any = getattr(re, "_parser", None) or importlib.import_module("sre_parse")
    if not items:
        return {""}
    (op, argument), rest = items[0], list(items[1:])
    if op is parser.LITERAL:
        return {chr(argument) + tail for tail in literal_starts(rest)}
    if op is parser.BRANCH:
        return set().union(*(literal_starts([*branch, *rest]) for branch in argument[1]))
    if op is parser.SUBPATTERN:
        return literal_starts([*argument[-1], *rest])
    return {""}


@pytest.mark.parametrize("name", SECRET_PATTERNS)
def test_every_credential_pattern_begins_with_a_listed_start(name: str) -> None:
    """The scrub tries the patterns only where one of ``CREDENTIAL_STARTS`` stands."""
    parser: Any = getattr(re, "_parser", None) or importlib.import_module("sre_parse")
    starts = literal_starts(list(parser.parse(SECRET_PATTERNS[name])))
    assert starts and all(start.startswith(CREDENTIAL_STARTS) for start in starts), starts


CREDENTIAL_PIECES = [
    *CREDENTIAL_STARTS,
    "sk-ant-",
    "proj-",
    "a" * 20,
    "ABCDEFGHIJKLMNOP",
    "0123456789abcdefghijklmnopqrstuvwxyzAB",
    "b-",
    " ",
    "\n",
    ".",
    ".eyJ",
    "PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "%20",
    "\\n",
    "\\u0022",
    "flask-",
    "_",
    "=",
]


@given(
    pieces=st.lists(st.sampled_from(CREDENTIAL_PIECES) | st.text(max_size=4), max_size=30),
    padding=st.sampled_from(["", "QUJD" * 300]),
)
@example(pieces=["sk-", "sk-", "a" * 20], padding="")
@example(pieces=["AKIA", "AKIA", "ABCDEFGHIJKLMNOP"], padding="")
@example(pieces=["%20", "sk-", "a" * 20, "flask-", "sk-", "a" * 20], padding="")
def test_the_scrub_at_credential_starts_is_the_full_regex_scan(
    pieces: list[str], padding: str
) -> None:
    text = padding + "".join(pieces) + padding
    assert scrub_text(text) == secret_regex().sub("<redacted>", text)
    data = text.encode()
    assert scrub_bytes(data) == secret_bytes_regex().sub(b"<redacted>", data)


# -- credentials the default rules catch wherever a request (or a redirect) puts them -----

PEM_LINES = [
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
]
PEM = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END PRIVATE KEY-----\n"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1Xzc3MTAiLCJpYXQiOjE3MDAwMDAwMDB9"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def record_and_replay(path: Path, server: Server, call: Any, again: Any) -> agenttape.Cassette:
    """Records ``call()`` through a real server, then replays ``again()`` (the same call made
    with other credentials) offline; returns the cassette as stored."""
    with agenttape.use_cassette(path, mode="once"):
        call()
    server.stop()
    with agenttape.use_cassette(path) as tape:
        again()
    assert tape.all_played
    return agenttape.load(path)


def test_a_private_key_block_in_a_body_is_redacted_whole(serve: Any, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))

    def call(pem: str) -> None:
        httpx.post(f"{server.url}/v1/deploy", json={"name": "web", "pem": pem, "replicas": 3})

    other = PEM.replace(PEM_LINES[1], "A" * len(PEM_LINES[1]))
    record_and_replay(cassette_path, server, lambda: call(PEM), lambda: call(other))
    data = cassette_path.read_bytes()
    for line in PEM_LINES:
        assert line.encode() not in data
    (interaction,) = agenttape.load(cassette_path).interactions
    assert json.loads(interaction.request.body) == {
        "name": "web",
        "pem": "<redacted>\n",
        "replicas": 3,
    }


def test_a_key_in_a_gzip_request_body_is_redacted_and_the_body_stays_gzip(
    serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))

    def call(key: str) -> None:
        document = {"model": "m", "note": f"my key is {key}", "api": {"apiKey": "plain-9f8e"}}
        httpx.post(
            f"{server.url}/v1/batch",
            content=gzip.compress(json.dumps(document).encode()),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )

    stored = record_and_replay(
        cassette_path, server, lambda: call(FAKE_KEY), lambda: call(OTHER_KEY)
    )
    (interaction,) = stored.interactions
    body = interaction.request.body
    assert body[:2] == b"\x1f\x8b"  # still gzip, so a replayed client sends what it sent
    assert json.loads(gzip.decompress(body)) == {
        "model": "m",
        "note": "my key is <redacted>",
        "api": {"apiKey": "<redacted>"},
    }
    assert interaction.request.header("content-length") == str(len(body))
    assert b"plain-9f8e" not in cassette_path.read_bytes()


def test_a_jwt_in_a_custom_header_is_redacted(serve: Any, cassette_path: Path) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))

    def call(token: str) -> None:
        httpx.get(f"{server.url}/v1/me", headers={"x-session-token": token, "x-trace": "t-1"})

    other = JWT.replace("SflKx", "AAAAA")
    stored = record_and_replay(cassette_path, server, lambda: call(JWT), lambda: call(other))
    assert JWT.split(".")[1].encode() not in cassette_path.read_bytes()
    headers = stored.interactions[0].request.headers
    assert ("x-session-token", "<redacted>") in headers and ("x-trace", "t-1") in headers


def test_credential_fields_of_form_and_multipart_bodies_are_redacted(
    serve: Any, cassette_path: Path
) -> None:
    server = serve(lambda seen: json_reply({"ok": True}))
    avatar = b"\x89PNG\r\n\x1a\n" + bytes(range(256))

    def call(password: str, secret: str) -> None:
        form = {"grant_type": "password", "username": "ann", "password": password}
        httpx.post(f"{server.url}/oauth/token", data={**form, "client_secret": secret})
        httpx.post(
            f"{server.url}/v1/profile",
            data={"username": "ann", "password": password},
            files={"avatar": ("a.png", avatar, "image/png")},
            # A fixed boundary: a random one would make the two bodies differ anyway.
            headers={"Content-Type": "multipart/form-data; boundary=agenttape-test"},
        )

    stored = record_and_replay(
        cassette_path,
        server,
        lambda: call("hunter2-correct", "cs-9a8b7c6d5e"),
        lambda: call("another-pass", "cs-000000"),
    )
    data = cassette_path.read_bytes()
    assert b"hunter2-correct" not in data and b"cs-9a8b7c6d5e" not in data
    form, multipart = stored.interactions
    assert form.request.body == (
        b"grant_type=password&username=ann&password=<redacted>&client_secret=<redacted>"
    )
    assert form.request.header("content-length") == str(len(form.request.body))
    assert b'name="username"\r\n\r\nann\r\n' in multipart.request.body
    assert b'name="password"\r\n\r\n<redacted>\r\n' in multipart.request.body
    assert avatar in multipart.request.body  # a file part is data, kept byte for byte


def test_presigned_url_signatures_and_tokens_are_redacted(serve: Any, cassette_path: Path) -> None:
    server = serve(lambda seen: Reply(chunks=[b"object bytes"]))
    credential = "ASIAXXEXAMPLE0000000%2F20250101%2Fus-east-1%2Fs3%2Faws4_request"

    def call(token: str, signature: str) -> None:
        httpx.get(
            f"{server.url}/bucket/report.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential={credential}&X-Amz-Date=20250101T000000Z&X-Amz-Expires=900"
            f"&X-Amz-SignedHeaders=host&X-Amz-Security-Token={token}&X-Amz-Signature={signature}"
        )
        httpx.get(
            f"{server.url}/gcs/report.pdf?X-Goog-Algorithm=GOOG4-RSA-SHA256"
            f"&X-Goog-Signature={signature}"
        )

    stored = record_and_replay(
        cassette_path,
        server,
        lambda: call("IQoJb3JpZ2luX2VjEJr%2F%2F%2F%2FSESSION", "9c1f" * 16),
        lambda: call("IQoJb3JpZ2luX2VjOTHER", "0000" * 16),
    )
    data = cassette_path.read_bytes()
    assert b"IQoJb3JpZ2luX2VjEJr" not in data and b"9c1f9c1f" not in data
    s3, gcs = (interaction.request.url for interaction in stored.interactions)
    assert "X-Amz-Security-Token=<redacted>&X-Amz-Signature=<redacted>" in s3
    assert "X-Amz-Date=20250101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host" in s3
    assert gcs.endswith("X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=<redacted>")


def test_a_token_in_a_redirect_location_is_redacted(serve: Any, cassette_path: Path) -> None:
    def app(seen: Seen) -> Reply:
        if seen.path == "/login":
            target = f"/callback?state=s1&token=tok-{seen.query[0][1]}-0123456789&code={JWT}"
            return Reply(status=302, headers=[("Location", target)])
        return json_reply({"signed_in": True})

    server = serve(app)

    def call(user: str) -> None:
        response = httpx.get(f"{server.url}/login?user={user}", follow_redirects=True)
        assert response.json() == {"signed_in": True}

    stored = record_and_replay(cassette_path, server, lambda: call("ann"), lambda: call("ann"))
    data = cassette_path.read_bytes()
    assert b"tok-ann-0123456789" not in data and JWT.split(".")[1].encode() not in data
    redirect, landing = stored.interactions
    assert redirect.response is not None
    assert redirect.response.header("location") == (
        "/callback?state=s1&token=<redacted>&code=<redacted>"
    )
    assert landing.request.url.endswith("/callback?state=s1&token=<redacted>&code=<redacted>")


# -- a replayed body that is byte for byte a recorded one ----------------------------------

CREDENTIAL_PIECES = [
    FAKE_KEY,
    "ghp_" + "a" * 36,
    "AKIAABCDEFGHIJKLMNOP",
    JWT,
    PEM,
    "Bearer " + "b" * 20,
    "xoxb-" + "1" * 12,
    "<redacted>",
    " ",
    "=",
]


@given(
    fields=st.dictionaries(
        st.sampled_from(["api_key", "password", "client-secret", "token", "note", "n"]),
        st.lists(st.sampled_from(CREDENTIAL_PIECES) | st.text(max_size=6), max_size=3).map("".join),
        max_size=4,
    ),
    shape=st.sampled_from(["json", "json in a string", "form"]),
)
@example(fields={"note": FAKE_KEY + "<redacted>" + PEM}, shape="json")
def test_the_built_in_rules_leave_what_they_wrote_as_it_is(
    fields: dict[str, str], shape: str
) -> None:
    """Replay does not scan a request body again when it is byte for byte a recorded one:
    recorded bodies were redacted as they were stored, so redacting them again must change
    nothing."""
    if shape == "form":
        content_type, body = "application/x-www-form-urlencoded", urlencode(fields).encode()
    else:
        document: Any = fields if shape == "json" else {"arguments": json.dumps(fields)}
        content_type, body = "application/json", json.dumps(document).encode()
    request = agenttape.Request(
        "POST", "https://api.test/v1/x", [("Content-Type", content_type)], body
    )
    once = Redactor().request(request)
    assert Redactor().request(once) == once


def test_a_body_as_recorded_matches_without_being_scanned_again(
    serve: Any, cassette_path: Path
) -> None:
    """A request whose body is byte for byte a recorded one matches it, even when the recording
    holds a credential shape the rules would replace today (a cassette written by hand, or by
    an older version); with rules of the user's, every body is redacted before matching."""
    server = serve(lambda seen: json_reply({"ok": True}))
    body = json.dumps({"note": f"key is {FAKE_KEY}"}).encode()

    def call() -> Any:
        return httpx.post(
            f"{server.url}/v1/notes", content=body, headers={"Content-Type": "application/json"}
        ).json()

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert call() == {"ok": True}
    server.stop()
    (stored,) = agenttape.load(cassette_path).interactions
    assert FAKE_KEY.encode() not in stored.request.body
    unredacted = dataclasses.replace(stored.request, body=body)
    cassette_path.write_bytes(
        codec.encode(meta.new_header(), [dataclasses.replace(stored, request=unredacted)])
    )
    with agenttape.use_cassette(cassette_path) as tape:
        assert call() == {"ok": True}
    assert tape.all_played
    with (
        pytest.raises(agenttape.UnmatchedInteractionError, match="note"),
        agenttape.use_cassette(cassette_path, redact=["regex:(?!)"]),
    ):
        call()


@given(
    user=st.sampled_from(["", "ann@", "ann:pw@", "ann:<redacted>@", f"ann:{FAKE_KEY}@"]),
    pairs=st.lists(
        st.tuples(
            st.sampled_from(["api_key", "token", "sig", "note", "n", "x-api-key"]),
            st.lists(
                st.sampled_from([*CREDENTIAL_PIECES, "%2F", "+", "%20", "&", "#"])
                | st.text(max_size=4),
                max_size=3,
            ).map("".join),
        ),
        max_size=4,
    ),
    encode=st.booleans(),
)
@example(user="", pairs=[("note", f"Bearer%20{'b' * 20}")], encode=False)
def test_the_built_in_rules_leave_a_url_they_wrote_as_it_is(
    user: str, pairs: list[tuple[str, str]], encode: bool
) -> None:
    """Replay does not redact a request URL again when it is exactly a recorded one: recorded
    URLs were redacted as they were stored, so redacting them again must change nothing."""
    query = urlencode(pairs) if encode else "&".join(f"{name}={value}" for name, value in pairs)
    request = agenttape.Request("GET", f"https://{user}api.test/v1/x?{query}", [], b"")
    once = Redactor().request(request)
    assert Redactor().request(once) == once


def test_a_url_as_recorded_matches_without_being_redacted_again(
    serve: Any, cassette_path: Path
) -> None:
    """A request whose URL is exactly a recorded one matches it, even when the recording holds
    a credential shape the rules would replace today (a cassette written by hand, or by an
    older version); with rules of the user's that read URLs, every URL is redacted first."""
    server = serve(lambda seen: json_reply({"ok": True}))
    url = f"{server.url}/v1/notes?note={FAKE_KEY}&sig=s1"

    with agenttape.use_cassette(cassette_path, mode="once"):
        assert httpx.get(url).json() == {"ok": True}
    server.stop()
    (stored,) = agenttape.load(cassette_path).interactions
    assert FAKE_KEY not in stored.request.url
    unredacted = dataclasses.replace(stored.request, url=url)
    cassette_path.write_bytes(
        codec.encode(meta.new_header(), [dataclasses.replace(stored, request=unredacted)])
    )
    with agenttape.use_cassette(cassette_path) as tape:
        assert httpx.get(url).json() == {"ok": True}
    assert tape.all_played
    for rules in (["query:note"], ["regex:(?!)"]):
        with (
            pytest.raises(agenttape.UnmatchedInteractionError, match="note"),
            agenttape.use_cassette(cassette_path, redact=rules),
        ):
            httpx.get(url)


@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(["Content-Type", "X-Note", "Set-Cookie", "Authorization", "X-Id"]),
            st.lists(
                st.sampled_from([*CREDENTIAL_PIECES, "sk", "-", "\n", "ear", "er", "eyJ"])
                | st.text(max_size=5),
                max_size=3,
            ).map("".join),
        ),
        max_size=6,
    )
)
def test_response_headers_are_looked_at_whole_and_redacted_value_by_value(
    headers: list[tuple[str, str]],
) -> None:
    """All values are probed for credential shapes at once; the result is what redacting
    each value on its own gives, even for a shape split across two values."""
    expected = [
        (name, "<redacted>" if name.lower() in SECRET_HEADERS else scrub_text(value))
        for name, value in headers
    ]
    assert Redactor().response_headers(headers) == expected
    # Judged again by a redactor that has met these names and others before: what it keeps
    # of names already judged gives the same answer.
    assert _SHARED.response_headers(headers) == expected
    assert _SHARED.response_headers(headers) == expected


_SHARED = Redactor()


def test_a_response_header_met_again_is_redacted_again() -> None:
    """A server repeats its header names: a name judged once is not judged again, and a
    secret header is still redacted every time, beside a value that takes a credential's
    shape under a name met before as plain."""
    redactor = Redactor()
    plain = [("Date", "Mon, 30 Nov 2026 00:00:00 GMT"), ("Server", "fake")]
    secret = [*plain, ("X-Api-Key", "abc"), ("Location", "https://h/cb?token=t0k3n")]
    shaped = [*plain, ("X-Note", "key sk-" + "a" * 24)]
    redactor.response_headers([*plain, ("X-Note", "plain")])
    for _ in range(2):
        assert redactor.response_headers(plain) is plain
        assert redactor.response_headers(secret) == [
            *plain,
            ("X-Api-Key", "<redacted>"),
            ("Location", "https://h/cb?token=<redacted>"),
        ]
        assert redactor.response_headers(shaped) == [*plain, ("X-Note", "key <redacted>")]
