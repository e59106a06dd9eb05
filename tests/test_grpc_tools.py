"""show, view, diff, export and audit on gRPC calls: messages decoded from the protobuf wire
format (else hex), status and trailers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("grpc_tools")

import agenttape  # noqa: E402
from agenttape._tools.cli import main  # noqa: E402
from tests.grpc_support import GrpcServer, stubs  # noqa: E402

pb, services = stubs()


def _record(folder: Path) -> tuple[Path, Path]:
    paths = folder / "a.msgpack", folder / "b.msgpack"
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        for path, limit in zip(paths, (2, 3), strict=True):
            with agenttape.use_cassette(path, mode="all"):
                stub.Search(
                    pb.SearchRequest(collection="docs", limit=limit),
                    metadata=[("authorization", "Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123")],
                )
                with pytest.raises(grpc.RpcError):
                    stub.Search(pb.SearchRequest(collection="full"))
                list(stub.Scroll(pb.ScrollRequest(collection="k", count=2)))
    return paths


def run(*argv: str | Path) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(arg) for arg in argv], out)
    return code, out.getvalue()


def test_every_tool_reads_grpc_calls(tmp_path: Path) -> None:
    a, b = _record(tmp_path)

    code, table = run("show", a)
    assert code == 0
    assert "vectors.v1.Vectors/Search" in table and "grpc RESOURCE_EXHAUSTED" in table
    assert "grpc OK" in table

    code, one = run("show", a, "-i", "1")
    assert "Request body (grpc; " in one and '"1": "full"' in one
    assert "grpc-status: 8" in one
    assert "status RESOURCE_EXHAUSTED (8): quota exceeded: 10/min ✓" in one
    code, scroll = run("show", a, "-i", "2")
    assert "Response body (grpc; " in scroll and '"1": "k-1"' in scroll

    code, as_json = run("show", a, "-i", "1", "--json")
    document = json.loads(as_json)
    assert document["grpc"]["status_name"] == "RESOURCE_EXHAUSTED"
    assert ["grpc-status", "8"] in document["response"]["trailers"]

    code, difference = run("diff", a, b)
    # Field names where this process knows the message class, else field numbers.
    assert "request body.messages[0].limit: expected 2, got 3" in difference or (
        "request body.messages[0].3: expected 2, got 3" in difference
    )

    exported = tmp_path / "a.json"
    code, _ = run("export", a, "--format", "json", "-o", exported)
    entries = json.loads(exported.read_text())["interactions"]
    assert entries[0]["request"]["body"]["decoded"]["kind"] == "grpc"
    assert entries[0]["request"]["body"]["decoded"]["value"][0]["fields"]["1"] == "docs"
    assert entries[1]["grpc"]["details"] == "quota exceeded: 10/min ✓"

    code, audit = run("audit", a)
    assert code == 0, audit

    page = tmp_path / "a.html"
    code, _ = run("view", a, "-o", page)
    text = page.read_text()
    assert code == 0
    assert '"kind": "grpc"' in text or '"kind":"grpc"' in text
    assert "RESOURCE_EXHAUSTED" in text


def test_audit_finds_a_secret_left_in_a_trailer(tmp_path: Path) -> None:
    from agenttape._core.models import Interaction, Request, Response
    from agenttape._core.wire.codec import encode

    leaked = Interaction(
        Request("POST", "grpc://h:443/s.S/M", [("content-type", "application/grpc")], b""),
        Response(
            200,
            http_version="HTTP/2",
            headers=[("content-type", "application/grpc")],
            trailers=[("grpc-status", "0"), ("x-api-key", "sk-ant-api03-" + "a" * 40)],
        ),
    )
    path = tmp_path / "leak.msgpack"
    path.write_bytes(encode({}, [leaked]))
    code, out = run("audit", path)
    assert code == 1, out
