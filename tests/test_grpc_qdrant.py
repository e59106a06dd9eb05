"""An official client that speaks gRPC: qdrant-client (``prefer_grpc=True``) against a local
stand-in built from qdrant-client's own generated servicers, recorded, the stand-in stopped,
replayed; its API key, sent as metadata, never reaches the file."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

grpc = pytest.importorskip("grpc")
qdrant_client = pytest.importorskip("qdrant_client")

from qdrant_client import grpc as qdrant_grpc  # noqa: E402
from qdrant_client.grpc import (  # noqa: E402
    collections_service_pb2_grpc,
    points_service_pb2_grpc,
)

import agenttape  # noqa: E402


class Collections(collections_service_pb2_grpc.CollectionsServicer):  # type: ignore[misc]
    def List(self, request: Any, context: Any) -> Any:
        return qdrant_grpc.ListCollectionsResponse(
            collections=[qdrant_grpc.CollectionDescription(name="docs")], time=0.001
        )


class Points(points_service_pb2_grpc.PointsServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.queries: list[Any] = []

    def Query(self, request: Any, context: Any) -> Any:
        self.queries.append(request)
        if request.limit > 10:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "limit over quota")
        points = [
            qdrant_grpc.ScoredPoint(id=qdrant_grpc.PointId(num=n), score=1.0 / n, version=1)
            for n in range(1, request.limit + 1)
        ]
        return qdrant_grpc.QueryResponse(result=points, time=0.002)


def _agent(port: int) -> list[Any]:
    client = qdrant_client.QdrantClient(
        host="127.0.0.1",
        grpc_port=port,
        prefer_grpc=True,
        https=False,
        api_key="qd-live-secret-7",
        check_compatibility=False,
    )
    out: list[Any] = [[c.name for c in client.get_collections().collections]]
    hits = client.query_points("docs", query=[0.1, 0.2, 0.3], limit=3).points
    out.append([(hit.id, hit.score) for hit in hits])
    with pytest.raises(Exception) as caught:
        client.query_points("docs", query=[0.1, 0.2, 0.3], limit=50)
    error = caught.value
    out.append((isinstance(error, grpc.RpcError), error.code(), error.details()))
    client.close()
    return out


def test_qdrant_client_over_grpc_replays_with_the_server_stopped(tmp_path: Path) -> None:
    points = Points()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    collections_service_pb2_grpc.add_CollectionsServicer_to_server(Collections(), server)
    points_service_pb2_grpc.add_PointsServicer_to_server(points, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    cassette = tmp_path / "qdrant.msgpack"
    with agenttape.use_cassette(cassette, mode="all"):
        recorded = _agent(port)
    server.stop(None).wait()
    with agenttape.use_cassette(cassette, mode="none") as tape:
        replayed = _agent(port)
        assert tape.all_played
    assert replayed == recorded
    assert recorded[0] == ["docs"] and [point for point, _ in recorded[1]] == [1, 2, 3]
    assert recorded[2][1] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert b"qd-live-secret-7" not in cassette.read_bytes()
    urls = [i.request.url for i in agenttape.load(cassette).interactions]
    assert urls[0] == f"grpc://127.0.0.1:{port}/qdrant.Collections/List"
    assert urls[1] == f"grpc://127.0.0.1:{port}/qdrant.Points/Query"
