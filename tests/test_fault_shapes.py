"""Faults through the real SDKs: each provider's error shape makes its SDK raise the exception
it raises in production, and the transport faults raise each client's own exception types.

Each test records a real exchange with a local stand-in (no key, no network), then replays it
with one fault; the exception is the SDK's, built by the SDK from the injected answer."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import boto3
import botocore.config
import botocore.exceptions
import httpx
import httpx2
import openai
import pytest
import requests
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from llm_standin import StandIn

import agenttape
from agenttape import fault
from agenttape._core.faults import inject
from agenttape._core.faults.shapes import provider_of
from agenttape._core.models import Request
from tests.servers import Seen, Server, chat_completion, json_reply

MESSAGES = [{"role": "user", "content": "Where is my order?"}]
GEMINI = {
    "candidates": [
        {
            "content": {"parts": [{"text": "It ships today."}], "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 4, "totalTokenCount": 8},
}
CONVERSE = {
    "output": {"message": {"role": "assistant", "content": [{"text": "It ships today."}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 4, "outputTokens": 4, "totalTokens": 8},
    "metrics": {"latencyMs": 12},
}


def app(seen: Seen) -> Any:
    """Gemini's generateContent, Bedrock's Converse, and a plain JSON API."""
    if "generateContent" in seen.path:
        return json_reply(GEMINI)
    if seen.path.endswith("/converse"):
        return json_reply(CONVERSE)
    return json_reply({"items": [1, 2, 3]})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One cassette per client, recorded against the local stand-ins, which are then stopped:
    everything after replays offline."""
    folder = tmp_path_factory.mktemp("faults")
    with StandIn() as llm:
        server = Server(app)
        calls = clients(llm.url, server.url)
        paths = {name: folder / f"{name}.msgpack" for name in calls}
        for name, call in calls.items():
            with agenttape.use_cassette(paths[name], mode="once"):
                call()
        server.stop()
    yield {"paths": paths, "calls": calls}


def clients(llm: str, other: str) -> dict[str, Callable[[], Any]]:
    """Each SDK's call, retries off so the first answer is the one the caller sees."""
    oa = openai.OpenAI(base_url=f"{llm}/v1", api_key="sk-test", max_retries=0)
    an = anthropic.Anthropic(base_url=llm, api_key="sk-ant-test", max_retries=0)
    gm = genai.Client(api_key="test", http_options=genai_types.HttpOptions(base_url=other))
    bedrock = boto3.client(
        "bedrock-runtime",
        endpoint_url=other,
        region_name="us-east-1",
        aws_access_key_id="AKIDTEST",
        aws_secret_access_key="secret",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )

    def plain() -> Any:
        answer = requests.get(f"{other}/api/items", timeout=5)
        answer.raise_for_status()
        return answer.json()

    def plain_httpx(module: Any = httpx) -> Any:
        answer = module.get(f"{other}/api/items", timeout=5)
        answer.raise_for_status()
        return answer.json()

    async def fetch() -> Any:
        async with aiohttp.ClientSession() as session, session.get(f"{other}/api/items") as got:
            got.raise_for_status()
            return await got.json()

    return {
        "openai": lambda: oa.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES),  # type: ignore[arg-type]
        "anthropic": lambda: an.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=MESSAGES,  # type: ignore[arg-type]
        ),
        "google": lambda: gm.models.generate_content(model="gemini-2.0-flash", contents="hi"),
        "bedrock": lambda: bedrock.converse(
            modelId="anthropic.claude-3-haiku",
            messages=[{"role": "user", "content": [{"text": "Where is my order?"}]}],
        ),
        "requests": plain,
        "httpx": plain_httpx,
        "httpx2": lambda: plain_httpx(httpx2),
        "aiohttp": lambda: asyncio.run(fetch()),
    }


def raised(recorded: dict[str, Any], client: str, item: agenttape.Fault) -> BaseException:
    with (
        agenttape.use_cassette(recorded["paths"][client], faults=[item]) as tape,
        pytest.raises(Exception) as caught,
    ):
        recorded["calls"][client]()
    assert [f.fault for f in tape.faults_fired] == [item]
    return caught.value


def test_openai_rate_limit_is_its_rate_limit_error(recorded: dict[str, Any]) -> None:
    error = raised(recorded, "openai", fault("rate_limit", retry_after=30))
    assert isinstance(error, openai.RateLimitError)
    assert error.code == "rate_limit_exceeded"
    assert error.status_code == 429
    headers = error.response.headers
    assert headers["retry-after"] == "30"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-request-id"].startswith("req_")


def test_anthropic_overloaded_is_its_overloaded_error(recorded: dict[str, Any]) -> None:
    error = raised(recorded, "anthropic", fault("overloaded"))
    assert isinstance(error, anthropic.OverloadedError)
    assert error.status_code == 529
    assert isinstance(error.body, dict)
    assert error.body["error"]["type"] == "overloaded_error"
    assert error.response.headers["request-id"].startswith("req_")


def test_anthropic_rate_limit(recorded: dict[str, Any]) -> None:
    error = raised(recorded, "anthropic", fault("rate_limit", retry_after=5))
    assert isinstance(error, anthropic.RateLimitError)
    assert error.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert error.response.headers["anthropic-ratelimit-requests-remaining"] == "0"


@pytest.mark.parametrize(
    ("kind", "error_type", "code", "status"),
    [
        ("rate_limit", genai_errors.ClientError, 429, "RESOURCE_EXHAUSTED"),
        ("overloaded", genai_errors.ServerError, 503, "UNAVAILABLE"),
        ("server_error", genai_errors.ServerError, 500, "INTERNAL"),
    ],
)
def test_google_genai_errors(
    recorded: dict[str, Any], kind: str, error_type: type, code: int, status: str
) -> None:
    error = raised(recorded, "google", fault(kind))  # type: ignore[arg-type]
    assert type(error) is error_type
    assert (error.code, error.status) == (code, status)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kind", "code", "status"),
    [
        ("rate_limit", "ThrottlingException", 429),
        ("overloaded", "ServiceUnavailableException", 503),
        ("server_error", "InternalServerException", 500),
    ],
)
def test_bedrock_errors_are_botocore_client_errors(
    recorded: dict[str, Any], kind: str, code: str, status: int
) -> None:
    error = raised(recorded, "bedrock", fault(kind))  # type: ignore[arg-type]
    assert isinstance(error, botocore.exceptions.ClientError)
    assert error.response["Error"]["Code"] == code
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_bedrock_invoke_model_throttled(tmp_path: Path, serve: Callable[..., Server]) -> None:
    server = serve(lambda seen: json_reply({"content": [{"type": "text", "text": "hi"}]}))
    bedrock = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id="AKIDTEST",
        aws_secret_access_key="secret",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )

    def invoke() -> Any:
        body = '{"messages": [], "max_tokens": 8}'
        return bedrock.invoke_model(modelId="anthropic.claude-3-haiku", body=body)

    with agenttape.use_cassette(tmp_path / "invoke.msgpack", mode="once"):
        invoke()
    server.stop()
    with (
        agenttape.use_cassette(tmp_path / "invoke.msgpack", faults=[fault("rate_limit")]),
        pytest.raises(botocore.exceptions.ClientError) as caught,
    ):
        invoke()
    assert caught.value.response["Error"]["Code"] == "ThrottlingException"
    assert type(caught.value).__name__ == "ThrottlingException"  # the modelled class


def test_a_plain_api_status_is_requests_http_error(recorded: dict[str, Any]) -> None:
    error = raised(recorded, "requests", fault("status", status=502))
    assert isinstance(error, requests.HTTPError)
    assert error.response is not None
    assert error.response.status_code == 502
    assert error.response.json()["error"]["status"] == 502


@pytest.mark.parametrize(
    ("client", "item", "expected"),
    [
        ("requests", fault("timeout"), requests.exceptions.ReadTimeout),
        ("requests", fault("timeout", connect=True), requests.exceptions.ConnectTimeout),
        ("requests", fault("reset"), requests.exceptions.ConnectionError),
        ("requests", fault("refused"), requests.exceptions.ConnectionError),
        ("requests", fault("cut_stream"), requests.exceptions.ChunkedEncodingError),
        ("google", fault("timeout"), httpx2.ReadTimeout),
        ("aiohttp", fault("timeout"), aiohttp.SocketTimeoutError),
        ("aiohttp", fault("timeout", connect=True), aiohttp.ConnectionTimeoutError),
        ("aiohttp", fault("refused"), aiohttp.ClientConnectorError),
        ("aiohttp", fault("cut_stream"), aiohttp.ClientPayloadError),
        ("openai", fault("timeout"), openai.APITimeoutError),
        ("openai", fault("reset"), openai.APIConnectionError),
        ("anthropic", fault("timeout"), anthropic.APITimeoutError),
        ("bedrock", fault("timeout"), botocore.exceptions.ReadTimeoutError),
        ("bedrock", fault("refused"), botocore.exceptions.EndpointConnectionError),
    ],
)
def test_transport_faults_are_each_clients_own_exceptions(
    recorded: dict[str, Any], client: str, item: agenttape.Fault, expected: type
) -> None:
    error = raised(recorded, client, item)
    assert isinstance(error, expected), repr(error)


def test_the_note_says_the_failure_was_injected(recorded: dict[str, Any]) -> None:
    error = raised(recorded, "requests", fault("reset"))
    inner: BaseException | None = error
    notes: list[str] = []
    while inner is not None:
        notes += getattr(inner, "__notes__", [])
        inner = inner.__cause__ or inner.__context__
    assert any("injected fault reset" in note for note in notes), notes


def injected_note(path: Path, item: agenttape.Fault) -> str:
    """The note the exception built from ``item``'s answer to the cassette's request carries."""
    request = agenttape.load(path).interactions[0].request
    url = request.url.partition("?")[0]
    return (
        f"agenttape: injected fault: {item.describe()}, fired on {request.method} {url}; "
        "the service did not fail this way."
    )


@pytest.mark.parametrize(
    ("client", "item", "expected"),
    [
        ("openai", fault("rate_limit", retry_after=3), openai.RateLimitError),
        ("anthropic", fault("overloaded"), anthropic.OverloadedError),
        ("google", fault("rate_limit"), genai_errors.ClientError),
        ("google", fault("server_error"), genai_errors.ServerError),
        ("bedrock", fault("rate_limit"), botocore.exceptions.ClientError),
        ("requests", fault("status", status=503), requests.HTTPError),
        ("httpx", fault("server_error"), httpx.HTTPStatusError),
        ("httpx2", fault("status", status=404), httpx2.HTTPStatusError),
        ("aiohttp", fault("rate_limit", on="GET /api/*"), aiohttp.ClientResponseError),
    ],
)
def test_a_status_error_the_sdk_builds_carries_the_fault_note(
    recorded: dict[str, Any], client: str, item: agenttape.Fault, expected: type
) -> None:
    """The exception is made by the SDK from the injected answer, after the exchange; the
    one the agent catches inside the cassette already says the failure was injected."""
    error = raised(recorded, client, item)
    assert isinstance(error, expected), repr(error)
    assert getattr(error, "__notes__", []) == [injected_note(recorded["paths"][client], item)]


def test_aiohttp_retries_a_get_once_on_a_reset_as_it_does_live(recorded: dict[str, Any]) -> None:
    """aiohttp (3.9 on) sends an idempotent request again, once, when the connection is reset
    or dropped before the answer (live too): one ``reset`` is answered by its retry, from the
    cassette; a reset on the retry as well is raised."""
    with agenttape.use_cassette(
        recorded["paths"]["aiohttp"], faults=[fault("reset", times=1)]
    ) as tape:
        assert recorded["calls"]["aiohttp"]() == {"items": [1, 2, 3]}
    assert len(tape.faults_fired) == 1
    with (
        agenttape.use_cassette(recorded["paths"]["aiohttp"], faults=[fault("reset")]) as tape,
        pytest.raises(aiohttp.ClientOSError),
    ):
        recorded["calls"]["aiohttp"]()
    assert len(tape.faults_fired) == 2


def test_malformed_json_fails_where_the_client_parses(recorded: dict[str, Any]) -> None:
    error = raised(recorded, "requests", fault("malformed"))
    assert isinstance(error, requests.exceptions.JSONDecodeError)


def test_openai_stream_cut_mid_iteration(tmp_path: Path, standin: StandIn) -> None:
    client = openai.OpenAI(base_url=f"{standin.url}/v1", api_key="sk-test", max_retries=0)

    def stream() -> Iterator[Any]:
        return iter(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))  # type: ignore[arg-type]

    path = tmp_path / "stream.msgpack"
    with agenttape.use_cassette(path, mode="once"):
        whole = list(stream())
    got: list[Any] = []
    with (
        agenttape.use_cassette(path, faults=[fault("cut_stream", after_chunks=3)]),
        pytest.raises(openai.APIConnectionError),
    ):
        for event in stream():
            got.append(event)
    assert 0 < len(got) < len(whole)


def test_anthropic_stream_cut_mid_iteration(tmp_path: Path, standin: StandIn) -> None:
    client = anthropic.Anthropic(base_url=standin.url, api_key="sk-ant-test", max_retries=0)
    path = tmp_path / "stream.msgpack"

    def events() -> Iterator[Any]:
        with client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:  # type: ignore[arg-type]
            yield from stream

    with agenttape.use_cassette(path, mode="once"):
        whole = list(events())
    got: list[Any] = []
    with (
        agenttape.use_cassette(path, faults=[fault("cut_stream", after_chunks=3)]),
        pytest.raises(httpx2.RemoteProtocolError) as caught,
    ):
        for event in events():
            got.append(event)
    assert 0 < len(got) < len(whole)
    assert any("injected fault cut_stream" in note for note in caught.value.__notes__)


def _waits(caplog: pytest.LogCaptureFixture, logger: str) -> list[float]:
    """The retry waits the SDK computed and passed to its sleep (as it logs them)."""
    pattern = re.compile(r"Retrying request (?:to \S+ )?in ([0-9.]+) seconds")
    return [
        float(found.group(1))
        for record in caplog.records
        if record.name.startswith(logger) and (found := pattern.match(record.getMessage()))
    ]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdk_retry_honours_retry_after_and_fast_retries_skips_it(
    recorded: dict[str, Any], caplog: pytest.LogCaptureFixture, sdk: str
) -> None:
    """The SDK reads the injected 30-second retry-after and retries; the wait it computed is
    replaced by zero (fast_retries), so the retry is served from the cassette at once."""
    caplog.set_level(logging.INFO)
    path = recorded["paths"][sdk]
    url = agenttape.load(path).interactions[0].request.url
    item = fault("rate_limit", nth=1, retry_after=30)
    client: Any
    if sdk == "openai":
        client = openai.OpenAI(
            base_url=url.rsplit("/chat/", 1)[0], api_key="sk-test", max_retries=2
        )
        call = lambda: client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # noqa: E731
    else:
        client = anthropic.Anthropic(
            base_url=url.rsplit("/v1/", 1)[0], api_key="sk-ant-test", max_retries=2
        )
        call = lambda: client.messages.create(  # noqa: E731
            model="claude-test",
            max_tokens=64,
            messages=MESSAGES,
        )
    with agenttape.use_cassette(path, faults=[item]) as tape:
        call()
    assert len(tape.faults_fired) == 1 and tape.all_played
    assert _waits(caplog, sdk) == [0.0]
    # What the SDK reads from the injected answer, before fast_retries replaces the wait.
    request = agenttape.load(path).interactions[0].request
    injected = inject(item, request, None, realtime=False).response
    assert injected is not None and injected.status == 429
    assert client._parse_retry_after_header(httpx2.Headers(list(injected.headers))) == 30.0


@pytest.mark.parametrize(
    ("request_", "provider"),
    [
        (Request("POST", "https://api.openai.com/v1/chat/completions"), "openai"),
        (Request("POST", "https://x.openai.azure.com/openai/deployments/d"), "openai"),
        (Request("POST", "https://api.anthropic.com/v1/messages"), "anthropic"),
        (Request("POST", "https://generativelanguage.googleapis.com/v1beta/m"), "google"),
        (Request("POST", "https://us-central1-aiplatform.googleapis.com/v1/m"), "google"),
        (Request("POST", "https://bedrock-runtime.us-east-1.amazonaws.com/m"), "bedrock"),
        (Request("POST", "https://api.mistral.ai/v1/chat/completions"), "mistral"),
        (Request("POST", "https://api.cohere.com/v2/chat"), "cohere"),
        (Request("POST", "http://gw.local/x", [("anthropic-version", "2023-06-01")]), "anthropic"),
        (Request("POST", "http://gw.local/x", [("X-Stainless-Lang", "python")]), "openai"),
        (Request("POST", "http://gw.local/x", [("x-goog-api-client", "genai")]), "google"),
        (Request("POST", "http://gw.local/x", [("X-Amz-Date", "20260101T000000Z")]), "bedrock"),
        (
            Request("POST", "http://gw.local/x", [("User-Agent", "mistral-client-python")]),
            "mistral",
        ),
        (Request("POST", "http://gw.local/x", [("X-Fern-SDK-Name", "cohere")]), "cohere"),
        (Request("POST", "http://127.0.0.1:8000/v1/messages"), "anthropic"),
        (Request("POST", "http://127.0.0.1:8000/v1/chat/completions"), "openai"),
        (Request("POST", "http://127.0.0.1:8000/v1beta/models/g:generateContent"), "google"),
        (Request("POST", "http://127.0.0.1:8000/model/m/converse"), "bedrock"),
        (Request("GET", "http://127.0.0.1:8000/api/items"), "json"),
    ],
)
def test_the_provider_comes_from_the_host_else_the_request(
    request_: Request, provider: str
) -> None:
    assert provider_of(request_) == provider


COHERE_CHAT = {
    "id": "c1",
    "finish_reason": "COMPLETE",
    "message": {"role": "assistant", "content": [{"type": "text", "text": "It ships today."}]},
    "usage": {"tokens": {"input_tokens": 4, "output_tokens": 4}},
}
MISTRAL_CHAT = chat_completion("It ships today.", id="m1", model="mistral-small", tokens=4)


def test_mistral_and_cohere_errors(tmp_path: Path, serve: Callable[..., Server]) -> None:
    """Behind a local stand-in (no provider host), the SDK's own headers choose the shape:
    Mistral's ``SDKError`` keeps its error object, Cohere's classes come from the status."""
    cohere = pytest.importorskip("cohere")
    mistral_client = pytest.importorskip("mistralai.client")

    def chat(seen: Seen) -> Any:
        return json_reply(COHERE_CHAT if seen.path.startswith("/v2/") else MISTRAL_CHAT)

    server = serve(chat)
    mistral = mistral_client.Mistral(api_key="test", server_url=server.url)
    co = cohere.ClientV2(api_key="test", base_url=server.url)
    calls = {
        "mistral": lambda: mistral.chat.complete(model="mistral-small", messages=MESSAGES),
        "cohere": lambda: co.chat(model="command-r", messages=MESSAGES),
    }
    for name, call in calls.items():
        with agenttape.use_cassette(tmp_path / f"{name}.msgpack", mode="once"):
            call()
    server.stop()
    caught: dict[str, BaseException] = {}
    for name, call in calls.items():
        for kind in ("rate_limit", "overloaded"):
            with (
                agenttape.use_cassette(tmp_path / f"{name}.msgpack", faults=[fault(kind)]),
                pytest.raises(Exception) as error,
            ):
                call()
            caught[f"{name} {kind}"] = error.value
    limited = caught["mistral rate_limit"]
    assert type(limited).__name__ == "SDKError"
    assert limited.status_code == 429  # type: ignore[attr-defined]
    assert '"type":"rate_limited"' in limited.body  # type: ignore[attr-defined]
    assert caught["mistral overloaded"].status_code == 503  # type: ignore[attr-defined]
    assert isinstance(caught["cohere rate_limit"], cohere.errors.TooManyRequestsError)
    assert isinstance(caught["cohere overloaded"], cohere.errors.ServiceUnavailableError)
    for name, kind in (("mistral", "rate_limit"), ("cohere", "overloaded")):
        expected = injected_note(tmp_path / f"{name}.msgpack", fault(kind))  # type: ignore[arg-type]
        assert caught[f"{name} {kind}"].__notes__ == [expected]
