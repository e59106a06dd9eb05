"""Credentials never reach the cassette under default redaction, wherever the request puts
them: any header, the query string, a JSON body at any depth, the password of a URL; and
Set-Cookie values."""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import agenttape
from agenttape._core.secrets import SECRET_HEADERS, SECRET_QUERY_NAMES
from tests.reliability.scale import properties
from tests.servers import Reply, Seen, Server

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
TOKEN_CHARS = ALNUM + "._~+/-"


def chars(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=low, max_size=high)


@dataclass
class Secret:
    """A credential as a client sends it, and the part of it that must never be stored."""

    text: str
    hidden: str


def shaped(prefix: str, body: st.SearchStrategy[str]) -> st.SearchStrategy[Secret]:
    return body.map(lambda b: Secret(prefix + b, b))


api_keys = st.one_of(
    shaped("sk-", chars(ALNUM + "_-", 20, 60)),
    shaped("sk-proj-", chars(ALNUM + "_-", 40, 80)),
    shaped("sk-ant-api03-", chars(ALNUM + "_-", 40, 90)),
    shaped("AKIA", chars(UPPER, 16, 16)),
    shaped("AIza", chars(ALNUM + "_-", 35, 35)),
    shaped("ghp_", chars(ALNUM, 36, 40)),
    shaped("github_pat_", chars(ALNUM + "_", 22, 60)),
    shaped("xoxb-", chars(ALNUM + "-", 10, 40)),
)
bearer_tokens = shaped("Bearer ", chars(TOKEN_CHARS, 16, 60))
plain_tokens = chars(ALNUM, 16, 40).map(lambda t: Secret(t, t))  # no shape at all

header_names = st.text(st.sampled_from(ALNUM + "-"), min_size=1, max_size=16).filter(
    lambda n: n.lower() not in {"host", "content-length", "transfer-encoding", "connection"}
)
query_names = st.text(st.sampled_from(ALNUM + "_"), min_size=1, max_size=10)
padding = st.sampled_from(["", "key=", "token: ", "x,", "(", "prefix "])


@st.composite
def json_with(draw: st.DrawFn, secret: str) -> Any:
    """A JSON document with ``secret`` somewhere inside, at any depth."""
    leaf: Any = draw(padding) + secret + draw(st.sampled_from(["", " ", "\n", "."]))
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            leaf = {draw(st.text(ALNUM, min_size=1, max_size=8)): leaf, "other": 1}
        else:
            leaf = [draw(st.integers()), leaf]
    return {"model": "m", "input": leaf}


@dataclass
class Leaky:
    headers: list[tuple[str, str]]
    params: list[tuple[str, str]]
    body: bytes | None
    password: str | None
    secrets: list[Secret]

    def url(self, base: str) -> str:
        if self.password is None:
            return f"{base}/v1/endpoint"
        return base.replace("://", f"://user:{self.password}@") + "/v1/endpoint"


@st.composite
def leaky_requests(draw: st.DrawFn) -> Leaky:
    secrets: list[Secret] = []
    headers = []
    for _ in range(draw(st.integers(0, 3))):
        secret = draw(api_keys | bearer_tokens)
        headers.append((draw(header_names), draw(padding) + secret.text))
        secrets.append(secret)
    for _ in range(draw(st.integers(0, 2))):
        secret = draw(plain_tokens)
        name = draw(st.sampled_from(sorted(SECRET_HEADERS)))
        headers.append((draw(st.sampled_from([name, name.upper(), name.title()])), secret.text))
        secrets.append(secret)
    params = []
    for _ in range(draw(st.integers(0, 3))):
        secret = draw(api_keys | bearer_tokens)
        params.append((draw(query_names), secret.text))
        secrets.append(secret)
    for _ in range(draw(st.integers(0, 2))):
        secret = draw(plain_tokens | chars(TOKEN_CHARS, 16, 40).map(lambda t: Secret(t, t)))
        params.append((draw(st.sampled_from(sorted(SECRET_QUERY_NAMES))), secret.text))
        secrets.append(secret)
    body = None
    if draw(st.booleans()):
        secret = draw(api_keys | bearer_tokens)
        body = json.dumps(draw(json_with(secret.text))).encode()
        secrets.append(secret)
    password = None
    if draw(st.booleans()):
        secret = draw(plain_tokens)
        password = secret.text
        secrets.append(secret)
    return Leaky(headers, params, body, password, secrets)


class CookieServer:
    """Answers each request with a fresh Set-Cookie value, remembered to look for later."""

    def __init__(self) -> None:
        self.cookies: list[str] = []
        self.serial = itertools.count()
        self.server = Server(self.app)

    def app(self, seen: Seen) -> Reply:
        cookie = f"session{next(self.serial)}x{hash(seen.path) & 0xFFFFFFFF:08x}QZ"
        self.cookies.append(cookie)
        return Reply(
            headers=[("Set-Cookie", f"sid={cookie}; HttpOnly"), ("Content-Type", "text/plain")],
            chunks=[b"ok"],
        )


@pytest.fixture(scope="module")
def cookie_server() -> Iterator[CookieServer]:
    server = CookieServer()
    yield server
    server.server.stop()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as shared:
        yield shared


@pytest.fixture(scope="module")
def vocabulary(
    cookie_server: CookieServer, client: httpx.Client, tmp_path_factory: pytest.TempPathFactory
) -> bytes:
    """A cassette of a request that holds no secret: the words every cassette contains."""
    path = tmp_path_factory.mktemp("vocabulary") / "tape.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        client.get(f"{cookie_server.server.url}/v1/endpoint")
    return path.read_bytes()


def windows(text: str, width: int = 12) -> set[str]:
    if len(text) <= width:
        return {text}
    return {text[i : i + width] for i in range(len(text) - width + 1)}


@properties(80, 800)
@given(leaky=leaky_requests())
def test_generated_credentials_never_reach_the_cassette(
    leaky: Leaky,
    cookie_server: CookieServer,
    client: httpx.Client,
    vocabulary: bytes,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    body = (leaky.body or b"").decode()
    for secret in leaky.secrets:
        body = body.replace(secret.text, "")
    # A password in the URL makes the client send an Authorization header of its own.
    sent_names = ["Authorization"] if leaky.password is not None else []
    innocent = " ".join(
        [n for n, _ in leaky.headers] + [n for n, _ in leaky.params] + sent_names + [body]
    )
    # A generated name, or the cassette's own field names, may spell out part of a key by
    # chance; that is not a leak.
    hidden = {w for secret in leaky.secrets for w in windows(secret.hidden)}
    assume(not any(w in innocent or w.encode() in vocabulary for w in hidden))
    path = tmp_path_factory.mktemp("secrets") / "tape.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        response = client.request(
            "POST" if leaky.body is not None else "GET",
            leaky.url(cookie_server.server.url),
            headers=leaky.headers,
            params=leaky.params,
            content=leaky.body,
        )
        assert response.status_code == 200
    stored = path.read_bytes()
    for secret in leaky.secrets:
        for window in windows(secret.hidden):
            assert window.encode() not in stored, (secret.text, window)
    assert cookie_server.cookies[-1].encode() not in stored
    # Redaction happens before matching: the same request made with other keys replays.
    with agenttape.use_cassette(path, mode="none") as tape:
        client.request(
            "POST" if leaky.body is not None else "GET",
            leaky.url(cookie_server.server.url),
            headers=leaky.headers,
            params=leaky.params,
            content=leaky.body,
        )
        assert tape.all_played
