"""HTTPS through every adapter: recorded from a real TLS server on 127.0.0.1 (certificate from
a local test CA), replayed offline with the server stopped and no TLS handshake at all."""

from __future__ import annotations

import ssl
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
import trustme
import urllib3

import agenttape
from tests.servers import HALF_JSON, App, Reply, Server, aws_app, gzip_reply


@pytest.fixture(scope="module")
def ca(upstream_ca: tuple[trustme.CA, Path]) -> trustme.CA:
    """The test CA that signs the certificates of ``serve_tls``'s servers (conftest)."""
    return upstream_ca[0]


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def rate_limited(seen: Any) -> Reply:
    if seen.path == "/gz":
        return gzip_reply(b'{"ok": true}')
    return Reply(status=429, headers=[("retry-after", "7")], chunks=[HALF_JSON])


def test_requests_and_urllib3_over_https(
    serve_tls: Callable[[App], Server], ca_file: str, cassette_path: Path
) -> None:
    server = serve_tls(rate_limited)
    assert server.url.startswith("https://")

    def run() -> list[Any]:
        limited = requests.get(f"{server.url}/v1", verify=ca_file, timeout=5)
        with urllib3.PoolManager(ca_certs=ca_file) as http:
            gz = http.request("GET", f"{server.url}/gz")
        return [(limited.status_code, limited.content), (gz.status, gz.data)]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    server.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no InsecureRequestWarning for a replayed HTTPS call
        with agenttape.use_cassette(cassette_path) as tape:
            replayed = run()
            assert tape.all_played
    assert replayed == live == [(429, HALF_JSON), (200, b'{"ok": true}')]
    assert agenttape.load(cassette_path).interactions[0].request.url == f"{server.url}/v1"


def test_botocore_over_https(
    serve_tls: Callable[[App], Server], ca_file: str, cassette_path: Path
) -> None:
    import boto3

    server = serve_tls(aws_app())

    def run() -> Any:
        client = boto3.client(
            "dynamodb",
            endpoint_url=server.url,
            region_name="eu-west-1",
            aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
            aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            verify=ca_file,
        )
        return client.list_tables()["TableNames"]

    with agenttape.use_cassette(cassette_path, mode="once"):
        live = run()
    server.stop()
    with agenttape.use_cassette(cassette_path):
        assert run() == live == ["orders", "users"]


async def test_aiohttp_over_https(
    serve_tls: Callable[[App], Server], ca: trustme.CA, cassette_path: Path
) -> None:
    server = serve_tls(rate_limited)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)

    async def run() -> list[Any]:
        out = []
        async with aiohttp.ClientSession() as session:
            for path in ("/v1", "/gz"):
                async with session.get(f"{server.url}{path}", ssl=client_context) as response:
                    out.append((response.status, await response.read()))
        return out

    async with agenttape.use_cassette(cassette_path, mode="once"):
        live = await run()
    server.stop()
    async with agenttape.use_cassette(cassette_path):
        replayed = await run()
    assert replayed == live == [(429, HALF_JSON), (200, b'{"ok": true}')]
