"""httplib2 and the Google API client on it: ``Http.request`` recorded against a real server
and replayed with the server stopped, byte for byte (the cassette holds the gzip bytes sent;
the caller gets what httplib2 gives live, decoded), its own exceptions for replayed failures,
and nothing reaching the network in mode none."""

from __future__ import annotations

import json
import socket
import warnings
from pathlib import Path
from typing import Any

import pytest

import agenttape
from tests.servers import (
    Reply,
    Seen,
    Serve,
    assert_a_miss_stays_off_the_network,
    failing_urls,
    gzip_reply,
    json_reply,
    late_reply,
    record_then_replay,
)

httplib2 = pytest.importorskip("httplib2")

GZIPPED = b'{"results": ["alpha", "beta"]}'


def app(seen: Seen) -> Reply:
    if seen.path == "/gzip":
        return gzip_reply(GZIPPED)
    if seen.path == "/slow":
        return late_reply()
    if seen.path == "/moved":
        return Reply(status=302, headers=[("Location", "/landed")])
    if seen.path.startswith("/tools/v1/items/"):
        return json_reply({"id": seen.path.rsplit("/", 1)[1], "q": dict(seen.query)})
    return Reply(
        status=201,
        reason="Made",
        headers=[("X-Dup", "1"), ("Content-Type", "text/plain"), ("X-Dup", "2")],
        chunks=[seen.method.encode() + b" " + seen.body],
    )


def test_requests_record_and_replay_byte_exact(serve: Serve, cassette_path: Path) -> None:
    server = serve(app)

    def run() -> list[Any]:
        http = httplib2.Http(timeout=5)
        got: list[Any] = []
        for method, path, body in (("GET", "/gzip", None), ("POST", "/made", b"q=1")):
            response, content = http.request(server.url + path, method, body=body)
            got += [response.status, response.reason, sorted(response.items()), content]
        response, content = http.request(server.url + "/moved")
        got += [response.status, content, response.previous.status]
        return got

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[3] == GZIPPED  # httplib2 decoded it, live and replayed
    assert live[4:6] == [201, "Made"]
    assert live[8:] == [201, b"GET ", 302]  # httplib2 followed the redirect itself
    interactions = agenttape.load(cassette_path).interactions
    assert [i.request.url for i in interactions] == [
        f"{server.url}/gzip",
        f"{server.url}/made",
        f"{server.url}/moved",
        f"{server.url}/landed",
    ]
    gzipped, made = (i.response for i in interactions[:2])
    assert gzipped is not None and made is not None
    assert gzipped.body[:2] == b"\x1f\x8b"  # the bytes on the wire, still gzip
    assert ("Content-Encoding", "gzip") in gzipped.headers
    assert made.headers[:3] == [("X-Dup", "1"), ("Content-Type", "text/plain"), ("X-Dup", "2")]
    assert made.body == b"POST q=1"
    assert interactions[1].request.body == b"q=1"


def test_failures_replay_as_httplib2_raises_them(serve: Serve, cassette_path: Path) -> None:
    server = serve(app)

    def run() -> list[tuple[type[BaseException], str]]:
        got = []
        for url, timeout in failing_urls(server.url):
            with pytest.raises(Exception) as caught:
                httplib2.Http(timeout=timeout).request(url)
            got.append((type(caught.value), str(caught.value)))
        return got

    with agenttape.use_cassette(cassette_path, mode="all"):
        live = run()
    server.stop()
    with agenttape.use_cassette(cassette_path, match_on=("method", "path")) as tape:
        replayed = run()
        assert tape.all_played
    assert replayed == live
    assert [kind for kind, _ in live] == [
        socket.timeout,
        ConnectionRefusedError,
        httplib2.ServerNotFoundError,
    ]


def test_a_miss_is_unmatched_and_mode_none_stays_off_the_network(
    serve: Serve, cassette_path: Path
) -> None:
    server = serve(app)
    assert_a_miss_stays_off_the_network(
        cassette_path, server, lambda url: httplib2.Http(timeout=5).request(url)
    )


def test_recording_accounts_for_its_connections(serve: Serve, cassette_path: Path) -> None:
    """httplib2's own ``connect`` opens the socket the recorded request goes out on: the audit
    of unaccounted connections says nothing about it."""
    server = serve(app)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with agenttape.use_cassette(cassette_path, mode="all"):
            httplib2.Http(timeout=5).request(server.url + "/made")
    assert [str(w.message) for w in said if w.category is agenttape.AgentTapeWarning] == []
    assert len(agenttape.load(cassette_path).interactions) == 1


DISCOVERY = {
    "kind": "discovery#restDescription",
    "discoveryVersion": "v1",
    "id": "tools:v1",
    "name": "tools",
    "version": "v1",
    "protocol": "rest",
    "servicePath": "tools/v1/",
    "batchPath": "batch/tools/v1",
    "parameters": {},
    "schemas": {},
    "resources": {
        "items": {
            "methods": {
                "get": {
                    "id": "tools.items.get",
                    "path": "items/{id}",
                    "httpMethod": "GET",
                    "parameters": {
                        "id": {"type": "string", "required": True, "location": "path"},
                        "view": {"type": "string", "location": "query"},
                    },
                    "parameterOrder": ["id"],
                }
            }
        }
    },
}


def test_google_api_client_records_and_replays(serve: Serve, cassette_path: Path) -> None:
    discovery = pytest.importorskip("googleapiclient.discovery")
    server = serve(app)
    document = {**DISCOVERY, "rootUrl": server.url + "/"}

    def run() -> Any:
        service = discovery.build_from_document(document, http=httplib2.Http(timeout=5))
        return service.items().get(id="42", view="full").execute()

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert json.loads(live) == {"id": "42", "q": {"view": "full"}}
    (interaction,) = agenttape.load(cassette_path).interactions
    assert interaction.request.url.startswith(f"{server.url}/tools/v1/items/42?")
