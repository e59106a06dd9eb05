"""A grpc-js (Node) client through the recording proxy: HTTP/2 with trailers towards the
client and the grpcio server, recorded, the server stopped, replayed; and the cassette it
wrote replays in-process to a Python stub, one form."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("grpc_tools")
pytest.importorskip("h2")

import agenttape  # noqa: E402
from tests.grpc_support import PROTO, GrpcServer, record_vector_calls, stubs  # noqa: E402
from tests.proxy_support import NODE, NODE_CACHE, ProxyProcess, npm_installed  # noqa: E402

CLIENT = Path(__file__).resolve().parent / "grpc_node" / "client.js"
GRPC_JS = ("@grpc/grpc-js@^1.10", "@grpc/proto-loader@^0.7")


def grpc_js() -> Path:
    """``node_modules`` holding @grpc/grpc-js from the npm registry, installed once."""
    return npm_installed(NODE_CACHE / "grpc", "@grpc/grpc-js/package.json", *GRPC_JS)


def run_node(modules: Path, target: str, proxy: ProxyProcess, proto: Path) -> dict[str, object]:
    env = {
        **os.environ,
        "NODE_PATH": str(modules),
        "grpc_proxy": proxy.url,  # grpc-js tunnels through it with CONNECT, then h2c
        "no_grpc_proxy": "",
    }
    result = subprocess.run(
        [str(NODE), str(CLIENT), target, str(proto)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, object] = json.loads(result.stdout)
    return document


def written_proto(folder: Path) -> Path:
    """The service's .proto, where the Node client loads it from."""
    proto = folder / "vectors.proto"
    proto.write_text(PROTO)
    return proto


def test_grpc_js_records_and_replays_through_the_proxy(
    tmp_path: Path, start_proxy: Callable[..., ProxyProcess]
) -> None:
    modules, proto = grpc_js(), written_proto(tmp_path)
    cassette = tmp_path / "node.msgpack"
    server = GrpcServer()
    recording = start_proxy("--cassette", cassette, "--mode", "all")
    live = run_node(modules, server.target, recording, proto)
    assert recording.stop() == 0, recording.stderr
    server.stop()
    replaying = start_proxy("--cassette", cassette)
    replayed = run_node(modules, server.target, replaying, proto)
    assert replaying.stop() == 0, replaying.stderr
    assert "replayed 3 of 3" in replaying.stderr

    assert replayed == live
    assert live["exhausted"] == {
        "code": 8,
        "details": "quota exceeded: 10/min ✓",
        "trailing": {"retry-after-ms": "250", "quota-bin": {"type": "Buffer", "data": [0, 1, 254]}},
    }
    assert [p["id"] for p in live["scroll"]["points"]] == ["k-0", "k-1", "k-2"]  # type: ignore[index]

    interactions = agenttape.load(cassette).interactions
    assert interactions[0].request.url == f"grpc://{server.target}/vectors.v1.Vectors/Search"
    assert ("authorization", "<redacted>") in interactions[0].request.headers
    assert b"node-secret-9" not in cassette.read_bytes()
    assert interactions[1].response is not None
    assert ("grpc-status", "8") in interactions[1].response.trailers

    # One form: the Node recording replays in-process to grpcio's stub.
    pb, services = stubs()
    stub = services.VectorsStub(grpc.insecure_channel(server.target))
    with agenttape.use_cassette(cassette, mode="none"):
        reply = stub.Search(pb.SearchRequest(collection="docs", vector=[0.25], limit=2))
        assert [hit.id for hit in reply.hits] == ["p0", "p1"]
        with pytest.raises(grpc.RpcError) as caught:
            stub.Search(pb.SearchRequest(collection="full"))
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert [p.id for p in stub.Scroll(pb.ScrollRequest(collection="k", count=3))] == [
            "k-0",
            "k-1",
            "k-2",
        ]


def test_an_in_process_recording_replays_to_grpc_js(
    tmp_path: Path, start_proxy: Callable[..., ProxyProcess]
) -> None:
    modules, proto = grpc_js(), written_proto(tmp_path)
    cassette = tmp_path / "python.msgpack"
    target = record_vector_calls(cassette)
    replaying = start_proxy("--cassette", cassette)
    replayed = run_node(modules, target, replaying, proto)
    assert replaying.stop() == 0, replaying.stderr
    assert replayed["exhausted"]["code"] == 8  # type: ignore[index]
    assert [h["id"] for h in replayed["search"]["reply"]["hits"]] == ["p0", "p1"]  # type: ignore[index]
    assert replayed["scroll"]["trailing"] == {"x-scrolled": "3"}  # type: ignore[index]
