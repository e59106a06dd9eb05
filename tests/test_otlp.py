"""A kept run as OpenTelemetry spans, as a real OTLP receiver decodes them."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

import agenttape
from agenttape._tools.otlp import SCHEMA_URL
from tests.cli_support import assert_one_line_error, cli
from tests.servers import OTLPReceiver, Server, json_reply, refused_port, span_attributes

STATUS_ERROR = 2


@agenttape.boundary("lookup_order")
def lookup_order(order: str) -> dict[str, str]:
    return {"order": order, "status": "shipped"}


def _record_run(tmp_path: Path, standin: Any, recorders: Callable[..., agenttape.Recorder]) -> Path:
    """A production run: an OpenAI chat, an Anthropic stream, a tool, a refused port."""
    store = tmp_path / "runs"
    recorder = recorders(store, keep="errors")
    with recorder.run(user_id="u_7710") as run, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = openai.OpenAI(base_url=f"{standin.url}/v1", api_key="sk-test-0123456789abcdef")
        client.chat.completions.create(
            model="gpt-4o-mini", temperature=0, messages=[{"role": "user", "content": "hi"}]
        )
        claude = anthropic.Anthropic(base_url=standin.url, api_key="sk-ant-test-0123456789abcd")
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            stream.until_done()
        lookup_order("A-1")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{refused_port()}/down")
    recorder.flush(timeout=10)
    return store / run.path


def test_export_otlp_sends_one_trace_per_run_that_a_receiver_decodes(
    tmp_path: Path,
    standin: Any,
    serve: Callable[..., Server],
    recorders: Callable[..., agenttape.Recorder],
) -> None:
    kept = _record_run(tmp_path, standin, recorders)
    run_id = agenttape.load(kept).metadata["run_id"]
    receiver = OTLPReceiver()
    server = serve(receiver)

    sent = cli("export", kept, "--format", "otlp", "--endpoint", server.url)
    assert sent.returncode == 0, sent.stderr
    assert f"sent 5 spans to {server.url}/v1/traces" in sent.stderr
    [request] = receiver.requests
    [resource] = request.resource_spans
    assert resource.schema_url == SCHEMA_URL
    root, chat, stream, tool, down = receiver.spans
    assert {span.trace_id.hex() for span in receiver.spans} == {run_id}  # the run id is the trace
    assert all(span.parent_span_id == root.span_id for span in (chat, stream, tool, down))

    assert root.name == "agenttape run" and root.status.code == STATUS_ERROR
    assert span_attributes(root)["agenttape.run_id"] == run_id
    assert span_attributes(root)["agenttape.tag.user_id"] == "u_7710"

    assert chat.name == "chat gpt-4o-mini"
    attributes = span_attributes(chat)
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.temperature"] == 0.0
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["http.response.status_code"] == 200
    assert stream.name == "chat claude-sonnet-4-5"
    assert span_attributes(stream)["gen_ai.provider.name"] == "anthropic"
    assert span_attributes(stream)["gen_ai.usage.output_tokens"] > 0
    assert tool.name == "execute_tool lookup_order"
    assert span_attributes(tool)["gen_ai.tool.name"] == "lookup_order"
    assert down.status.code == STATUS_ERROR
    assert span_attributes(down)["error.type"] == "ConnectError"
    assert chat.start_time_unix_nano < stream.start_time_unix_nano < down.end_time_unix_nano
    assert root.end_time_unix_nano >= down.end_time_unix_nano

    written = tmp_path / "trace.json"
    assert cli("export", kept, "--format", "otlp", "-o", written).returncode == 0
    document = json.loads(written.read_text())
    assert document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == run_id


def test_otlp_usage_errors_are_one_line(tmp_path: Path, session: Path) -> None:
    assert_one_line_error(cli("export", session, "--endpoint", "http://x"), "--format otlp")
    down = f"http://127.0.0.1:{refused_port()}"
    assert_one_line_error(
        cli("export", session, "--format", "otlp", "--endpoint", down), "could not send"
    )
    assert_one_line_error(
        cli("export", session, "--format", "otlp", "--endpoint", "ftp://x"), "not an http"
    )


def test_a_receiver_that_refuses_the_document_is_reported(
    session: Path, serve: Callable[..., Server]
) -> None:
    refusing = serve(lambda seen: json_reply({"error": "quota"}, status=429))
    result = cli("export", session, "--format", "otlp", "--endpoint", refusing.url)
    assert_one_line_error(result, "answered 429", "quota")


def test_recorder_otel_names_the_run_on_the_current_span(
    tmp_path: Path, serve: Callable[..., Server], recorders: Callable[..., agenttape.Recorder]
) -> None:
    """A service traced with the OpenTelemetry SDK, exporting over OTLP/HTTP: the request's
    span carries the run id and how to fetch it, and the fetched run replays."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    receiver = OTLPReceiver()
    collector = serve(receiver)
    api = serve(lambda seen: json_reply({"order": "A-1"}, status=500))
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{collector.url}/v1/traces"))
    )
    tracer = provider.get_tracer("service")
    store = tmp_path / "runs"
    recorder = recorders(store, keep="errors", otel=True)
    with tracer.start_as_current_span("POST /ask"), recorder.run() as run:
        httpx.get(f"{api.url}/orders/A-1")
    provider.shutdown()
    recorder.flush(timeout=10)

    [span] = receiver.spans
    attributes = span_attributes(span)
    assert attributes["agenttape.run_id"] == run.run_id
    assert attributes["agenttape.run.status"] == "failed" and attributes["agenttape.run.kept"]
    assert attributes["agenttape.run.path"] == run.path.as_posix()
    fetch = attributes["agenttape.fetch"].split()
    assert fetch[:4] == ["agenttape", "fetch", str(store), run.run_id]
    target = tmp_path / fetch[4]
    assert cli(*fetch[1:4], target).returncode == 0
    api.stop()
    with agenttape.use_cassette(target):
        assert httpx.get(f"{api.url}/orders/A-1").status_code == 500


def test_otel_without_the_api_installed_is_a_clear_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import agenttape\n"
        "try:\n"
        f"    agenttape.Recorder({str(tmp_path / 'runs')!r}, otel=True)\n"
        "except agenttape.AgentTapeError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "pip install 'agenttape-recorder[otel]'" in result.stdout, result.stderr
