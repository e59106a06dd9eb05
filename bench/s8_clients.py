"""Scenario 8: the same replay through requests, through urllib3 directly and through the
openai SDK (on httpx2), each against its own floor, so a slow adapter shows."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import chat_reply, chat_request, item_body, item_path
from bench._harness import Scenario, serve
from bench._replay import Call, httpx_calls

GETS = 2000
CHATS = 500
TARGET = 1.3


def requests_adapter_present() -> bool:
    from agenttape._adapters import LIBRARIES

    return "urllib3" in LIBRARIES or "requests.adapters" in LIBRARIES


def requests_floor(interactions: list[Any]) -> Any:
    """requests' own cheapest path: a transport adapter answering from memory with urllib3
    responses, as requests builds them from the wire."""
    import requests
    import urllib3

    table = {i.request.url: i.response for i in interactions}

    class FloorAdapter(requests.adapters.HTTPAdapter):
        def send(self, request: Any, **kwargs: Any) -> Any:
            recorded = table[request.url]
            raw = urllib3.HTTPResponse(
                body=io.BytesIO(recorded.body),
                headers=recorded.headers,
                status=recorded.status,
                reason=recorded.reason,
                preload_content=False,
                decode_content=False,
            )
            return self.build_response(request, raw)

    session = requests.Session()
    session.mount("http://", FloorAdapter())
    return session


def requests_calls(urls: list[str], floor_from: Path | None = None) -> _peers.Calls:
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "session" not in state:
            import requests

            state["session"] = (
                requests_floor(_peers.agenttape_interactions(floor_from))
                if floor_from is not None
                else requests.Session()
            )
        get = state["session"].get
        return [get(url).content for url in urls]

    return run


def _answer(pool: Any, table: dict[str, Any], method: str, url: str, **kwargs: Any) -> Any:
    """The recorded response for ``url`` on ``pool``, as the urllib3 response it builds from
    the wire; ``kwargs`` are the call's own (the body options, and what else it hands on)."""
    import urllib3

    recorded = table[f"{pool.scheme}://{pool.host}:{pool.port}{url}"]
    return urllib3.HTTPResponse(
        body=io.BytesIO(recorded.body),
        headers=recorded.headers,
        status=recorded.status,
        reason=recorded.reason,
        preload_content=kwargs.get("preload_content", True),
        decode_content=kwargs.get("decode_content", True),
        request_method=method,
        request_url=url,
        pool=pool,
        connection=kwargs.get("response_conn"),
        retries=kwargs.get("retries"),
    )


def urllib3_floor(interactions: list[Any]) -> Any:
    """urllib3's own cheapest path: a pool answering ``urlopen`` from memory with the
    responses urllib3 builds from the wire."""
    import urllib3

    table = {i.request.url: i.response for i in interactions}

    class FloorPool(urllib3.HTTPConnectionPool):
        def urlopen(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            return _answer(
                self,
                table,
                method,
                url,
                preload_content=kwargs.get("preload_content", True),
                decode_content=kwargs.get("decode_content", True),
            )

    manager = urllib3.PoolManager()
    manager.pool_classes_by_scheme = {"http": FloorPool}
    return manager


def pool_floor(interactions: list[Any]) -> type:
    """A urllib3 pool whose one wire exchange (``_make_request``) answers from memory: all of
    urllib3's own work around it runs (connection checkout and return, Retry, timeouts, the
    response's release), as it must under an adapter that keeps them as live."""
    import urllib3

    table = {i.request.url: i.response for i in interactions}

    class PoolFloor(urllib3.HTTPConnectionPool):
        def _make_request(self, conn: Any, method: str, url: str, **kwargs: Any) -> Any:
            return _answer(self, table, method, url, **kwargs)

    return PoolFloor


def requests_pool_calls(urls: list[str], floor_from: Path) -> _peers.Calls:
    """requests' own adapter over ``pool_floor``."""
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "session" not in state:
            import requests

            adapter = requests.adapters.HTTPAdapter()
            pool = pool_floor(_peers.agenttape_interactions(floor_from))
            adapter.poolmanager.pool_classes_by_scheme = {"http": pool}
            session = state["session"] = requests.Session()
            session.mount("http://", adapter)
        get = state["session"].get
        return [get(url).content for url in urls]

    return run


def urllib3_calls(
    urls: list[str], floor_from: Path | None = None, pool_only: bool = False
) -> _peers.Calls:
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "manager" not in state:
            import urllib3

            if floor_from is None:
                manager = urllib3.PoolManager()
            elif pool_only:
                manager = urllib3.PoolManager()
                pool = pool_floor(_peers.agenttape_interactions(floor_from))
                manager.pool_classes_by_scheme = {"http": pool}
            else:
                manager = urllib3_floor(_peers.agenttape_interactions(floor_from))
            state["manager"] = manager
        request = state["manager"].request
        return [request("GET", url).data for url in urls]

    return run


def chat_messages(i: int) -> list[dict[str, str]]:
    return json.loads(chat_request(i))["messages"]  # type: ignore[no-any-return]


def openai_calls(base: str, picked: list[int], floor_from: Path | None = None) -> _peers.Calls:
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "client" not in state:
            import httpx2
            import openai

            # A plain client for every contestant, so the floor differs in its transport alone
            # (the SDK's own default client costs more per request than a plain one).
            http_client = httpx2.Client()
            if floor_from is not None:
                table = {
                    i.request.body: i.response for i in _peers.agenttape_interactions(floor_from)
                }

                def handler(request: Any) -> Any:
                    recorded = table[request.content]
                    return httpx2.Response(
                        recorded.status, headers=recorded.headers, content=recorded.body
                    )

                http_client = httpx2.Client(transport=httpx2.MockTransport(handler))
            state["client"] = openai.OpenAI(
                api_key="sk-bench", base_url=base + "/v1", max_retries=0, http_client=http_client
            )
        create = state["client"].chat.completions.with_raw_response.create
        return [
            create(
                model="gpt-4o-mini", messages=chat_messages(i), user=f"user-{i}"
            ).http_response.content
            for i in picked
        ]

    return run


def main() -> None:
    scenario = Scenario(
        8,
        "Replay through requests, urllib3 and the openai SDK",
        "µs/request",
        "floor",
        "bench.s8_clients",
        processes=2,
    )
    work = scenario.dir
    gets = [Call("GET", item_path(i)) for i in range(GETS)]
    if not scenario.is_worker:
        with serve() as base:
            make = httpx_calls(base, gets)
            _peers.record_agenttape(work / "gets.msgpack", make)
            _peers.record_cassetter(work / "gets.cassetter.yaml", make)
            chats = openai_calls(base, list(range(CHATS)))
            _peers.record_agenttape(work / "chats.msgpack", chats)
            _peers.record_cassetter(work / "chats.cassetter.yaml", chats)
        for name in ("gets", "chats"):
            _peers.write_vcrpy(
                work / f"{name}.vcrpy.yaml", _peers.agenttape_interactions(work / f"{name}.msgpack")
            )
        (work / "base").write_text(base)
    base = (work / "base").read_text()
    urls = [base + call.path for call in gets]
    expected = [item_body(i) for i in range(GETS)]
    sample = slice(None, None, GETS // 20)
    has_adapter = requests_adapter_present()
    plan: list[tuple[str, Any, _peers.Calls, list[bytes], str]] = [
        (
            "requests floor",
            _peers.no_cassette,
            requests_calls(urls, floor_from=work / "gets.msgpack"),
            expected,
            "",
        ),
        (
            "requests pool floor",
            _peers.no_cassette,
            requests_pool_calls(urls, floor_from=work / "gets.msgpack"),
            expected,
            "requests' adapter and urllib3's pool, answered at the wire exchange",
        ),
        (
            "requests agenttape",
            _peers.agenttape_opener(work / "gets.msgpack"),
            requests_calls(urls),
            expected,
            "",
        ),
        (
            "requests cassetter",
            _peers.cassetter_opener(work / "gets.cassetter.yaml"),
            requests_calls(urls),
            expected,
            "",
        ),
        (
            "requests vcrpy",
            _peers.vcrpy_opener(work / "gets.vcrpy.yaml"),
            requests_calls(urls[sample]),
            expected[sample],
            "20 requests spread over the cassette",
        ),
    ]
    plan += [
        (
            "urllib3 floor",
            _peers.no_cassette,
            urllib3_calls(urls, floor_from=work / "gets.msgpack"),
            expected,
            "",
        ),
        (
            "urllib3 pool floor",
            _peers.no_cassette,
            urllib3_calls(urls, floor_from=work / "gets.msgpack", pool_only=True),
            expected,
            "urllib3's pool, answered at the wire exchange",
        ),
        (
            "urllib3 agenttape",
            _peers.agenttape_opener(work / "gets.msgpack"),
            urllib3_calls(urls),
            expected,
            "",
        ),
        (
            "urllib3 cassetter",
            _peers.cassetter_opener(work / "gets.cassetter.yaml"),
            urllib3_calls(urls),
            expected,
            "",
        ),
        (
            "urllib3 vcrpy",
            _peers.vcrpy_opener(work / "gets.vcrpy.yaml"),
            urllib3_calls(urls[sample]),
            expected[sample],
            "20 requests spread over the cassette",
        ),
    ]
    chats_all = list(range(CHATS))
    chats_sample = chats_all[:: CHATS // 10]
    plan += [
        (
            "openai floor",
            _peers.no_cassette,
            openai_calls(base, chats_all, floor_from=work / "chats.msgpack"),
            [chat_reply(i) for i in chats_all],
            "",
        ),
        (
            "openai agenttape",
            _peers.agenttape_opener(work / "chats.msgpack"),
            openai_calls(base, chats_all),
            [chat_reply(i) for i in chats_all],
            "",
        ),
        (
            "openai cassetter",
            _peers.cassetter_opener(work / "chats.cassetter.yaml", body=True),
            openai_calls(base, chats_all),
            [chat_reply(i) for i in chats_all],
            "",
        ),
        (
            "openai vcrpy",
            _peers.vcrpy_opener(work / "chats.vcrpy.yaml", body=True),
            openai_calls(base, chats_sample),
            [chat_reply(i) for i in chats_sample],
            f"{len(chats_sample)} requests spread over the cassette",
        ),
    ]
    for name, opener, calls, want, note in plan:
        if name in ("requests agenttape", "urllib3 agenttape") and not has_adapter:
            scenario.missing(name, "n/a (adapter missing)")
            continue
        report = work / f"{name.replace(' ', '-')}.exact.json"
        scenario.time(
            name,
            _peers.timed(opener, calls, want, report),
            per=len(want),
            note=note,
            processes=1 if name.endswith("vcrpy") else None,
        )
    if scenario.is_worker:
        return
    for row in scenario.result.rows:
        exact = _peers.exactness(work / f"{row.name.replace(' ', '-')}.exact.json")
        row.note = "; ".join(part for part in (row.note, exact) if part)
    labels = {
        "requests": "requests (urllib3)",
        "urllib3": "urllib3 directly",
        "openai": "openai SDK (httpx2)",
    }
    for client, label in (("requests", "8a"), ("openai", "8b"), ("urllib3", "8c")):
        cells = scenario.ratios(
            {c: f"{client} {c}" for c in ("agenttape", "cassetter", "vcrpy")}, f"{client} floor"
        )
        holds = scenario.check(f"{client}: agenttape / floor", cells["agenttape"], TARGET)
        target = f"≤ {TARGET}x floor (bar of scenario 1)"
        mine, theirs = cells["agenttape"], cells["cassetter"]
        if client != "openai":
            target += ", under cassetter"
            ahead = scenario.check(
                f"{client}: agenttape / cassetter",
                mine / theirs if mine is not None and theirs else None,
                1.0,
            )
            holds = None if holds is None or ahead is None else holds and ahead
        floor = scenario.result.value(f"{client} floor")
        scenario.line(
            label,
            f"Replay through {labels[client]}",
            f"floor {floor * 1e6:.0f} µs/request" if floor else "floor failed",
            cells,
            target,
            holds,
        )
    parts = {
        "requests": "the transport adapter, connection checkout, Retry and timeouts",
        "urllib3": "connection checkout, Retry and timeouts",
    }
    for client in ("requests", "urllib3"):
        pool, floor = (
            scenario.result.value(f"{client} {name}") for name in ("pool floor", "floor")
        )
        if pool and floor:
            scenario.note(
                f"{client}: its own work above the wire exchange ({parts[client]}, run by the "
                "pool floor, a pool whose `_make_request` answers from memory, as under any "
                f"adapter that keeps them as live) is {pool / floor:.2f}x the floor, which "
                "skips them."
            )
    if not has_adapter:
        scenario.note("requests: this build of agenttape has no urllib3 adapter yet.")
    scenario.finish()


if __name__ == "__main__":
    main()
