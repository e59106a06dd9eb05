"""One instrumentation beside agenttape, in a process of its own (the order of installation
matters only before agenttape's first cassette):

    python -m tests.instrumentation_support INSTRUMENTATION ORDER FOLDER

ORDER ``before``: the instrumentation is installed, then agenttape's first cassette opens;
``after``: a first cassette opens and closes, then the instrumentation is installed. Then a
request is recorded from a real server on 127.0.0.1, the server stops, the request is
replayed. Prints JSON: the status each client span (or Sentry breadcrumb) carries, recording
and replaying; the answers; whether the instrumentation's wrappers are still in place.
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agenttape
from agenttape._adapters import ledger
from tests.servers import Server, json_reply

STATUS = 201
ANSWER = {"made": True}


class Spans:
    """OpenTelemetry's client spans, kept in memory."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def taken(self) -> list[Any]:
        """The status code of each client span made since the last call."""
        from opentelemetry.trace import SpanKind

        spans = [
            span for span in self.exporter.get_finished_spans() if span.kind is SpanKind.CLIENT
        ]
        self.exporter.clear()
        return [
            span.attributes.get(
                "http.response.status_code", span.attributes.get("http.status_code")
            )
            for span in spans
        ]


class Breadcrumbs:
    """sentry-sdk's httpx integration's breadcrumbs, as its client hands them over."""

    def __init__(self) -> None:
        self.crumbs: list[dict[str, Any]] = []

    def keep(self, crumb: dict[str, Any], hint: Any) -> dict[str, Any]:
        self.crumbs.append(crumb)
        return crumb

    def taken(self) -> list[Any]:
        from sentry_sdk.consts import SPANDATA

        found = [crumb["data"][SPANDATA.HTTP_STATUS_CODE] for crumb in self.crumbs]
        self.crumbs.clear()
        return found


def httpx_get(url: str) -> Any:
    import httpx

    with httpx.Client() as client:
        response = client.get(url)
    return response.status_code, response.json()


def httpx_get_async(url: str) -> Any:
    import httpx

    async def get() -> Any:
        async with httpx.AsyncClient() as client:
            response = await client.get(url)
        return response.status_code, response.json()

    return asyncio.run(get())


def httpx2_get(url: str) -> Any:
    import httpx2

    with httpx2.Client() as client:
        response = client.get(url)
    return response.status_code, response.json()


def requests_get(url: str) -> Any:
    import requests

    response = requests.get(url)
    return response.status_code, response.json()


def aiohttp_get(url: str) -> Any:
    import aiohttp

    async def get() -> Any:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, await response.json()

    return asyncio.run(get())


Read = Callable[[], Any]


def instrument(name: str) -> tuple[Callable[[str], Any], Read, Callable[[], list[Any]]]:
    """Installs ``name``: the request to make, what reads the attributes it wrapped, what
    it saw."""
    if name == "sentry-httpx":
        import httpx
        import sentry_sdk
        from sentry_sdk.integrations.httpx import HttpxIntegration

        crumbs = Breadcrumbs()
        sentry_sdk.init(
            dsn="http://key@127.0.0.1:9/1",
            integrations=[HttpxIntegration()],
            default_integrations=False,
            before_breadcrumb=crumbs.keep,
            transport=lambda envelope: None,
        )
        return httpx_get, lambda: vars(httpx.Client)["send"], crumbs.taken
    spans = Spans()
    if name in ("httpx", "httpx-async", "httpx-client"):
        import httpx
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        if name == "httpx-client":
            # One client instrumented: the wrapper sits on that client's transport.
            client = httpx.Client()
            HTTPXClientInstrumentor.instrument_client(client, tracer_provider=spans.provider)

            def get(url: str) -> Any:
                response = client.get(url)
                return response.status_code, response.json()

            return get, lambda: vars(client._transport)["handle_request"], spans.taken
        HTTPXClientInstrumentor().instrument(tracer_provider=spans.provider)

        def read() -> Any:
            return (
                vars(httpx.HTTPTransport)["handle_request"],
                vars(httpx.AsyncHTTPTransport)["handle_async_request"],
            )

        return (httpx_get if name == "httpx" else httpx_get_async), read, spans.taken
    if name == "httpx2":
        import httpx2
        from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor

        HTTPX2ClientInstrumentor().instrument(tracer_provider=spans.provider)
        return httpx2_get, lambda: vars(httpx2.HTTPTransport)["handle_request"], spans.taken
    if name == "requests":
        import requests
        from opentelemetry.instrumentation.requests import RequestsInstrumentor

        RequestsInstrumentor().instrument(tracer_provider=spans.provider)
        return requests_get, lambda: vars(requests.Session)["send"], spans.taken
    if name == "aiohttp":
        import aiohttp
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

        AioHttpClientInstrumentor().instrument(tracer_provider=spans.provider)
        return aiohttp_get, lambda: vars(aiohttp.ClientSession)["__init__"], spans.taken
    raise SystemExit(f"unknown instrumentation {name}")


def _kept(then: Any, now: Any) -> bool:
    """The instrumentation's wrappers still stand, or stand under one of ours (a wrapper of
    agenttape's on the same attribute calls theirs: ``ledger.chain``)."""
    pairs = zip(then, now, strict=True) if isinstance(then, tuple) else [(then, now)]
    return all(
        any(link is before for link in ledger.chain(after))
        and all(ledger.owned(link) is not None for link in _above(after, before))
        for before, after in pairs
    )


def _above(value: Any, stop: Any) -> list[Any]:
    links = []
    for link in ledger.chain(value):
        if link is stop:
            break
        links.append(link)
    return links


def main(name: str, order: str, folder: Path) -> dict[str, Any]:
    # The clients imported first, as an application would have them.
    import aiohttp  # noqa: F401
    import httpx  # noqa: F401
    import httpx2  # noqa: F401
    import requests  # noqa: F401

    warnings.simplefilter("ignore")  # the first cassette records nothing
    if order == "after":
        with agenttape.use_cassette(folder / "first.msgpack", mode="all"):
            pass
    get, read, taken = instrument(name)
    wrappers = read()
    server = Server(lambda seen: json_reply(ANSWER, status=STATUS))
    url = f"{server.url}/items"
    cassette = folder / "tape.msgpack"
    with agenttape.use_cassette(cassette, mode="once"):
        recorded = get(url)
    recording_seen = taken()
    server.stop()
    with agenttape.use_cassette(cassette) as tape:
        replayed = get(url)
        played = tape.play_count
    replay_seen = taken()
    return {
        "recorded": list(recorded),
        "replayed": list(replayed),
        "played": played,
        "stored": len(agenttape.load(cassette).interactions),
        "recording_seen": recording_seen,
        "replay_seen": replay_seen,
        "wrappers_kept": _kept(wrappers, read()),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))))
