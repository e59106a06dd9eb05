"""botocore's own level: a replayed call whose head is known is served at
``URLLib3Session.send``, and must come out as live did, parsed and raw."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3.connectionpool

from tests.servers import App, Server, aws_app, record_then_replay
from tests.test_adapters_urllib3 import aws_client

Serve = Callable[[App], Server]


@pytest.fixture
def urlopens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The target of every ``urlopen`` call that reaches urllib3's pools."""
    called: list[str] = []
    urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        called.append(url)
        return urlopen(self, method, url, *args, **kwargs)

    monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "urlopen", counted)
    yield called


def _raw(response: dict[str, Any]) -> tuple[Any, ...]:
    metadata = response["ResponseMetadata"]
    return metadata["HTTPStatusCode"], sorted(metadata["HTTPHeaders"].items())


def test_a_known_head_is_replayed_at_send_as_live(
    serve: Serve, cassette_path: Path, urlopens: list[str]
) -> None:
    server = serve(aws_app())

    def run() -> list[Any]:
        s3, dynamodb = aws_client("s3", server), aws_client("dynamodb", server)
        out: list[Any] = []
        for n in range(3):
            buckets = s3.list_buckets()
            out.append(([b["Name"] for b in buckets["Buckets"]], _raw(buckets)))
            tables = dynamodb.list_tables()
            out.append((tables["TableNames"], _raw(tables)))
            got = s3.get_object(Bucket="tapes", Key=f"k{n}")  # a streamed body
            out.append((got["Body"].read(), got["ContentType"], _raw(got)))
        return out

    live, replayed = record_then_replay(cassette_path, server, run)
    assert replayed == live
    assert live[0][0] == ["alpha", "beta"] and live[1][0] == ["orders", "users"]
    # Live, every call reached urllib3's urlopen; replayed, only the first call of each kind
    # (ListBuckets, ListTables, GetObject: heads of their own): the others were served at send.
    assert len(urlopens) == 9 + 3
