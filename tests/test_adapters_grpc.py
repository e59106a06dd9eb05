"""grpcio calls recorded against a real grpcio server on 127.0.0.1, the server stopped, then
replayed: every call shape byte-exact, metadata, status and errors, strict matching."""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("grpc_tools")

import agenttape  # noqa: E402
from agenttape._core.wire import grpc as grpc_wire  # noqa: E402
from tests.grpc_support import GrpcServer, stubs  # noqa: E402

pb, services = stubs()


def _calls(stub: Any) -> list[Any]:
    """One call of each shape and an error, as comparable values (messages as bytes)."""
    out: list[Any] = []
    reply, call = stub.Search.with_call(
        pb.SearchRequest(collection="docs", vector=[0.25, 0.5], limit=2),
        metadata=[("authorization", "Bearer sk-live-123"), ("x-trace-bin", b"\x01\x02\xff")],
    )
    out.append(
        (
            reply.SerializeToString(),
            tuple(call.initial_metadata()),
            tuple(call.trailing_metadata()),
            call.code(),
            call.details(),
        )
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub.Search(pb.SearchRequest(collection="full"))
    error = caught.value
    out.append((error.code(), error.details(), tuple(error.trailing_metadata())))
    stream = stub.Scroll(pb.ScrollRequest(collection="k", count=3))
    out.append([point.SerializeToString() for point in stream])
    out.append((stream.code(), tuple(stream.trailing_metadata())))
    out.append(stub.Upsert(iter([pb.Point(id="a", vector=[1]), pb.Point(id="b")])).stored)
    chat = stub.Chat(iter([pb.ChatMessage(text="hi", turn=1), pb.ChatMessage(text="yo", turn=2)]))
    out.append([message.SerializeToString() for message in chat])
    with pytest.raises(grpc.RpcError) as broken:
        list(stub.Chat(iter([pb.ChatMessage(text="boom")])))
    out.append((broken.value.code(), broken.value.details()))
    return out


def _assert_ping_pong_recorded(path: Path, turns: int, answers: list[bytes]) -> None:
    """Each ping was answered in turn, and the cassette holds the pings and the answers."""
    expected = [
        pb.ChatMessage(text=f"PING {t}", turn=t + 1).SerializeToString() for t in range(turns)
    ]
    assert answers == expected
    (interaction,) = agenttape.load(path).interactions
    sent = [pb.ChatMessage(text=f"ping {t}", turn=t).SerializeToString() for t in range(turns)]
    assert interaction.request.body == grpc_wire.frames(sent)
    assert interaction.response is not None
    assert interaction.response.body == grpc_wire.frames(expected)


def test_a_bidi_ping_pong_gets_each_answer_as_it_comes_while_recording(tmp_path: Path) -> None:
    """The client sends its next message only once the answer to the last one arrived: a
    recording passes each answer on as the server sends it, so every turn is taken well
    within the call's deadline (held answers would end it with DEADLINE_EXCEEDED)."""
    turns = 4
    answered = threading.Semaphore(0)

    def ping_pong() -> Iterator[Any]:
        for turn in range(turns):
            yield pb.ChatMessage(text=f"ping {turn}", turn=turn)
            if not answered.acquire(timeout=10):
                return  # no answer came: the client gives up, the test fails below

    path = tmp_path / "chat.msgpack"
    with GrpcServer() as server, grpc.insecure_channel(server.target) as channel:
        stub = services.VectorsStub(channel)
        with agenttape.use_cassette(path, mode="all"):
            answers = []
            for answer in stub.Chat(ping_pong(), timeout=5):
                answers.append(answer.SerializeToString())
                answered.release()
    _assert_ping_pong_recorded(path, turns, answers)


async def _aio_ping_pong(
    target: str, turns: int, by_writes: bool, texts: list[str] | None = None
) -> list[bytes]:
    """A ping-pong on a grpc.aio channel: each message written (``write``, or yielded by an
    async iterator) only once the answer to the last one arrived, each answer awaited for
    at most 5 s."""
    texts = texts or [f"ping {turn}" for turn in range(turns)]
    answered = asyncio.Event()
    answers: list[bytes] = []

    async def pings() -> AsyncIterator[Any]:
        for turn, text in enumerate(texts):
            yield pb.ChatMessage(text=text, turn=turn)
            await answered.wait()
            answered.clear()

    async with grpc.aio.insecure_channel(target) as channel:
        stub = services.VectorsStub(channel)
        if by_writes:
            call = stub.Chat(timeout=30)
            for turn, text in enumerate(texts):
                await call.write(pb.ChatMessage(text=text, turn=turn))
                answer = await asyncio.wait_for(call.read(), 5)
                answers.append(answer.SerializeToString())
            await call.done_writing()
            assert await asyncio.wait_for(call.read(), 5) is grpc.aio.EOF
            assert await call.code() is grpc.StatusCode.OK
        else:
            responses = stub.Chat(pings(), timeout=30).__aiter__()
            for _turn in texts:
                answer = await asyncio.wait_for(responses.__anext__(), 5)
                answers.append(answer.SerializeToString())
                answered.set()
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(responses.__anext__(), 5)
    return answers


@pytest.mark.parametrize("by_writes", [True, False], ids=["write", "async-iterator"])
def test_a_grpc_aio_ping_pong_gets_each_answer_as_it_comes_while_recording(
    tmp_path: Path, by_writes: bool
) -> None:
    turns = 3
    path = tmp_path / "chat.msgpack"
    with GrpcServer() as server, agenttape.use_cassette(path, mode="all"):
        answers = asyncio.run(
            asyncio.wait_for(_aio_ping_pong(server.target, turns, by_writes), timeout=20)
        )
    _assert_ping_pong_recorded(path, turns, answers)


def _sync_ping_pong(stub: Any, texts: list[str]) -> list[bytes]:
    """A ping-pong on a sync channel: message i+1 is sent only once answer i arrived, each
    answer (and the call itself) awaited for at most 5 s."""
    pings: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        while (message := pings.get()) is not None:
            yield message

    answers = []
    pool = ThreadPoolExecutor(2)
    try:
        call = pool.submit(stub.Chat, requests(), timeout=30)
        for turn, text in enumerate(texts):
            pings.put(pb.ChatMessage(text=text, turn=turn))
            responses = call.result(timeout=5)
            answers.append(pool.submit(next, responses).result(timeout=5).SerializeToString())
        pings.put(None)
        assert pool.submit(list, responses).result(timeout=5) == []
        assert responses.code() is grpc.StatusCode.OK
    finally:
        pings.put(None)  # a client that gave up ends its requests
        pool.shutdown(wait=True)
    return answers


def _record_ping_pongs(path: Path, *conversations: list[str]) -> str:
    """Records ping-pongs against a real server (each answered in turn); returns its target,
    the server stopped."""
    with GrpcServer() as server, grpc.insecure_channel(server.target) as channel:
        stub = services.VectorsStub(channel)
        with agenttape.use_cassette(path, mode="all"):
            for texts in conversations:
                answers = _sync_ping_pong(stub, texts)
                assert answers == [
                    pb.ChatMessage(text=text.upper(), turn=turn + 1).SerializeToString()
                    for turn, text in enumerate(texts)
                ]
    target: str = server.target
    return target


def test_a_bidi_ping_pong_replays_each_answer_as_its_message_arrives(tmp_path: Path) -> None:
    """Replayed with the server stopped, answer i comes once message i was sent, before
    message i+1 is: a replay that waited for the whole request stream would leave the
    client waiting for its first answer."""
    path = tmp_path / "chat.msgpack"
    first, second = ["ping 0", "ping 1", "ping 2"], ["ping 0", "other 1"]
    target = _record_ping_pongs(path, first, second)
    # Each message is kept with when it was sent: after the answer to the one before.
    recorded = agenttape.load(path).interactions[0]
    assert recorded.response is not None
    sent = [offset for _size, offset in recorded.request.chunks]
    arrived = [offset for _size, offset in recorded.response.chunks]
    assert len(sent) == len(arrived) == 3
    assert sent[0] < arrived[0] < sent[1] < arrived[1] < sent[2] < arrived[2]
    assert [size for size, _offset in recorded.request.chunks] == [
        len(frame) for frame in _framed(recorded.request.body)
    ]
    stub = services.VectorsStub(grpc.insecure_channel(target))
    with agenttape.use_cassette(path, mode="none") as tape:
        # Both recorded calls begin alike: the second message tells them apart.
        assert _sync_ping_pong(stub, second) == [
            pb.ChatMessage(text="PING 0", turn=1).SerializeToString(),
            pb.ChatMessage(text="OTHER 1", turn=2).SerializeToString(),
        ]
        assert len(_sync_ping_pong(stub, first)) == 3
        assert tape.all_played


def _framed(body: bytes) -> list[bytes]:
    return [grpc_wire.frame(message) for message in grpc_wire.split(body)]


def test_a_bidi_ping_pong_recorded_without_send_times_replays_an_answer_a_message(
    tmp_path: Path,
) -> None:
    """A cassette written before send times were kept (or by hand): each answer comes once
    as many messages as it has answers before it were sent."""
    from agenttape._core import files
    from agenttape._core.wire import codec

    path = tmp_path / "chat.msgpack"
    target = _record_ping_pongs(path, ["ping 0", "ping 1", "ping 2"])
    tape = agenttape.load(path)
    (interaction,) = tape.interactions
    unstamped = dataclasses.replace(
        interaction, request=dataclasses.replace(interaction.request, chunks=())
    )
    files.write_atomic(path, codec.encode(tape.metadata, [unstamped]))
    assert agenttape.load(path).interactions[0].request.chunks == ()
    stub = services.VectorsStub(grpc.insecure_channel(target))
    with agenttape.use_cassette(path, mode="none") as replay:
        assert len(_sync_ping_pong(stub, ["ping 0", "ping 1", "ping 2"])) == 3
        assert replay.all_played


def test_a_changed_message_of_a_bidi_stream_misses_as_it_is_sent(tmp_path: Path) -> None:
    path = tmp_path / "chat.msgpack"
    target = _record_ping_pongs(path, ["ping 0", "ping 1", "ping 2"])
    stub = services.VectorsStub(grpc.insecure_channel(target))
    pings: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        while (message := pings.get()) is not None:
            yield message

    pool = ThreadPoolExecutor(2)
    try:
        with agenttape.use_cassette(path, mode="none"):
            responses = pool.submit(stub.Chat, requests(), timeout=30).result(timeout=5)
            for turn, text in enumerate(["ping 0", "ping 1"]):
                pings.put(pb.ChatMessage(text=text, turn=turn))
                assert pool.submit(next, responses).result(timeout=5).text == text.upper()
            pings.put(pb.ChatMessage(text="pong 2", turn=2))
            with pytest.raises(agenttape.UnmatchedInteractionError) as caught:
                pool.submit(next, responses).result(timeout=5)
    finally:
        pings.put(None)
        pool.shutdown(wait=True)
    message = str(caught.value)
    assert "vectors.v1.Vectors/Chat" in message
    assert "body.messages[2].text: expected 'ping 2', got 'pong 2'" in message


@pytest.mark.parametrize("by_writes", [True, False], ids=["write", "async-iterator"])
def test_a_grpc_aio_bidi_ping_pong_replays_each_answer_as_its_message_arrives(
    tmp_path: Path, by_writes: bool
) -> None:
    path = tmp_path / "chat.msgpack"
    with GrpcServer() as server, agenttape.use_cassette(path, mode="all"):
        recorded = asyncio.run(_aio_ping_pong(server.target, 3, by_writes))
    with agenttape.use_cassette(path, mode="none") as tape:
        assert asyncio.run(_aio_ping_pong(server.target, 3, by_writes)) == recorded
        assert tape.all_played


@pytest.mark.parametrize("by_writes", [True, False], ids=["write", "async-iterator"])
def test_a_changed_message_of_a_grpc_aio_bidi_stream_misses_as_it_is_sent(
    tmp_path: Path, by_writes: bool
) -> None:
    path = tmp_path / "chat.msgpack"
    with GrpcServer() as server, agenttape.use_cassette(path, mode="all"):
        asyncio.run(_aio_ping_pong(server.target, 3, by_writes))
    texts = ["ping 0", "ping 1", "pong 2"]
    with (
        agenttape.use_cassette(path, mode="none"),
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
    ):
        asyncio.run(_aio_ping_pong(server.target, 3, by_writes, texts))
    assert "body.messages[2].text: expected 'ping 2', got 'pong 2'" in str(caught.value)


def test_every_call_shape_replays_byte_exact_with_the_server_stopped(tmp_path: Path) -> None:
    path = tmp_path / "vectors.msgpack"
    server = GrpcServer()
    stub = services.VectorsStub(grpc.insecure_channel(server.target))  # made before the cassette
    with agenttape.use_cassette(path, mode="all"):
        recorded = _calls(stub)
    seen = list(server.servicer.seen)
    server.stop()
    with agenttape.use_cassette(path, mode="none") as tape:
        replayed = _calls(stub)
        assert tape.all_played
    assert replayed == recorded
    assert recorded[1][0] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert recorded[1][1] == "quota exceeded: 10/min ✓"
    assert ("quota-bin", b"\x00\x01\xfe") in recorded[1][2]
    assert recorded[6][0] is grpc.StatusCode.INVALID_ARGUMENT

    interactions = agenttape.load(path).interactions
    assert [i.request.url.rsplit("/", 1)[-1] for i in interactions] == [
        "Search",
        "Search",
        "Scroll",
        "Upsert",
        "Chat",
        "Chat",
    ]
    search = interactions[0]
    assert search.request.url == f"grpc://{server.target}/vectors.v1.Vectors/Search"
    assert search.request.method == "POST"
    # The request body is the messages as sent, each with gRPC's five-byte prefix.
    assert search.request.body == grpc_wire.frame(seen[0][1].SerializeToString())
    assert search.response is not None
    assert search.response.body == grpc_wire.frame(recorded[0][0])
    assert ("grpc-status", "0") in search.response.trailers
    scroll = interactions[2]
    assert scroll.response is not None
    assert len(scroll.response.chunks) == 3  # one chunk per message, with its offset
    assert grpc_wire.split(scroll.response.body) == recorded[2]
    upsert = interactions[3]
    assert grpc_wire.split(upsert.request.body) == [p.SerializeToString() for p in seen[3][1]]


def test_metadata_secrets_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets.msgpack"
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        with agenttape.use_cassette(path, mode="all"):
            stub.Search(
                pb.SearchRequest(collection="docs"),
                metadata=[("x-api-key", "qd-secret-key-1"), ("authorization", "Bearer abc123")],
            )
    data = path.read_bytes()
    assert b"qd-secret-key-1" not in data and b"abc123" not in data
    headers = agenttape.load(path).interactions[0].request.headers
    assert ("x-api-key", "<redacted>") in headers
    # Replay with another key matches: the key is redacted before matching too.
    stub = services.VectorsStub(grpc.insecure_channel(server.target))
    with agenttape.use_cassette(path, mode="none"):
        stub.Search(pb.SearchRequest(collection="docs"), metadata=[("x-api-key", "other")])


def test_a_changed_request_names_the_protobuf_field(tmp_path: Path) -> None:
    path = tmp_path / "miss.msgpack"
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        with agenttape.use_cassette(path, mode="all"):
            stub.Search(pb.SearchRequest(collection="docs", limit=2))
        # The server is still up: a call no cassette serves never reaches it.
        with (
            agenttape.use_cassette(path, mode="none"),
            pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        ):
            stub.Search(pb.SearchRequest(collection="docs", limit=3))
        assert len(server.servicer.seen) == 1
    message = str(caught.value)
    assert "grpc://" in message and "vectors.v1.Vectors/Search" in message
    assert "body.messages[0].limit: expected 2, got 3" in message


def test_a_message_that_is_not_protobuf_shows_the_differing_bytes(tmp_path: Path) -> None:
    path = tmp_path / "raw.msgpack"
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "raw.Echo",
                {"Call": grpc.unary_unary_rpc_method_handler(lambda request, _c: request[::-1])},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    echo = channel.unary_unary("/raw.Echo/Call")
    with agenttape.use_cassette(path, mode="all"):
        assert echo(b"\xff\xfe\x00abc") == b"cba\x00\xfe\xff"
    server.stop(None).wait()
    with agenttape.use_cassette(path, mode="none"):
        assert echo(b"\xff\xfe\x00abc") == b"cba\x00\xfe\xff"
        with pytest.raises(agenttape.UnmatchedInteractionError) as caught:
            echo(b"\xff\xfe\x00abd")
    assert (
        "body.messages[0]: expected 6 bytes ff fe 00 61 62 63, got 6 bytes ff fe 00 61 62 64"
        in (str(caught.value))
    )


def test_a_recorded_deadline_replays_as_deadline_exceeded(tmp_path: Path) -> None:
    path = tmp_path / "deadline.msgpack"
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        with (
            agenttape.use_cassette(path, mode="all"),
            pytest.raises(grpc.RpcError) as live,
        ):
            stub.Search(pb.SearchRequest(collection="slow"), timeout=0.1)
    assert live.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    with agenttape.use_cassette(path, mode="none"), pytest.raises(grpc.RpcError) as replayed:
        stub.Search(pb.SearchRequest(collection="slow"), timeout=0.1)
    assert replayed.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert replayed.value.details() == live.value.details()


def test_realtime_paces_streamed_messages_at_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "paced.msgpack"
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        with agenttape.use_cassette(path, mode="all"):
            assert (
                len(list(stub.Scroll(pb.ScrollRequest(collection="p", count=3, pause_ms=150)))) == 3
            )

    def arrivals(**options: Any) -> list[float]:
        with agenttape.use_cassette(path, mode="none", **options):
            started = time.perf_counter()
            return [
                time.perf_counter() - started
                for _ in stub.Scroll(pb.ScrollRequest(collection="p", count=3, pause_ms=150))
            ]

    paced = arrivals(realtime=True)
    assert paced[0] >= 0.12 and paced[2] >= 0.40
    assert arrivals()[2] < 0.1


def test_intercepted_channels_futures_and_threads(tmp_path: Path) -> None:
    path = tmp_path / "intercepted.msgpack"

    class AddsTenant(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            metadata = [*(details.metadata or ()), ("x-tenant", "t_3")]
            return continuation(details._replace(metadata=metadata), request)

    import collections

    Details = collections.namedtuple(
        "Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    )
    del Details

    def run(target: str) -> list[Any]:
        channel = grpc.intercept_channel(grpc.insecure_channel(target), AddsTenant())
        stub = services.VectorsStub(channel)
        future = stub.Search.future(pb.SearchRequest(collection="f", limit=1))
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            threaded = pool.submit(stub.Search, pb.SearchRequest(collection="t", limit=3)).result()
        return [future.result().SerializeToString(), threaded.SerializeToString()]

    with GrpcServer() as server:
        with agenttape.use_cassette(path, mode="all"):
            recorded = run(server.target)
        assert all(seen[2].get("x-tenant") == "t_3" for seen in server.servicer.seen)
    with agenttape.use_cassette(
        path, mode="none", match_on=("method", "url", "body", "headers:x-tenant")
    ):
        assert run(server.target) == recorded
        # A replayed channel reports itself ready without connecting.
        grpc.channel_ready_future(grpc.insecure_channel(server.target)).result(timeout=2)


def test_no_cassette_leaves_grpc_alone() -> None:
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        assert stub.Search(pb.SearchRequest(collection="x", limit=1)).hits[0].id == "p0"
        with pytest.raises(grpc.RpcError) as caught:
            stub.Search(pb.SearchRequest(collection="full"))
        assert type(caught.value).__module__ == "grpc._channel"


async def _aio_calls(target: str) -> list[Any]:
    out: list[Any] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = services.VectorsStub(channel)
        call = stub.Search(
            pb.SearchRequest(collection="docs", limit=2), metadata=[("x-api-key", "k1")]
        )
        reply = await call
        out.append(
            (
                reply.SerializeToString(),
                tuple(await call.initial_metadata()),
                tuple(await call.trailing_metadata()),
                await call.code(),
            )
        )
        try:
            await stub.Search(pb.SearchRequest(collection="full"))
        except grpc.aio.AioRpcError as error:
            out.append((error.code(), error.details(), tuple(error.trailing_metadata())))
        out.append(
            [
                p.SerializeToString()
                async for p in stub.Scroll(pb.ScrollRequest(collection="a", count=2))
            ]
        )

        async def points() -> Any:
            for name in ("x", "y", "z"):
                yield pb.Point(id=name)

        out.append((await stub.Upsert(points())).stored)
        chat = stub.Chat()
        await chat.write(pb.ChatMessage(text="one", turn=1))
        await chat.write(pb.ChatMessage(text="two", turn=2))
        await chat.done_writing()
        out.append([m.SerializeToString() async for m in chat])
    return out


def test_grpc_aio_every_call_shape(tmp_path: Path) -> None:
    path = tmp_path / "aio.msgpack"
    server = GrpcServer()
    with agenttape.use_cassette(path, mode="all"):
        recorded = asyncio.run(_aio_calls(server.target))
    server.stop()
    with agenttape.use_cassette(path, mode="none"):
        replayed = asyncio.run(_aio_calls(server.target))
    assert replayed == recorded
    assert recorded[1][0] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert recorded[4] == [
        pb.ChatMessage(text="ONE", turn=2).SerializeToString(),
        pb.ChatMessage(text="TWO", turn=3).SerializeToString(),
    ]
    # In-process sync and asyncio channels write one form: the sync stub replays it too.
    stub = services.VectorsStub(grpc.insecure_channel(server.target))
    with agenttape.use_cassette(path, mode="none"):
        assert (
            stub.Search(pb.SearchRequest(collection="docs", limit=2)).SerializeToString()
            == recorded[0][0]
        )


def test_grpc_retry_policy_waits_take_no_time_on_replay(tmp_path: Path) -> None:
    """grpc's retryPolicy retries inside grpcio's core: the call is recorded with its final
    answer, and replays without the backoff waits."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    attempts: list[bytes] = []

    def flaky(request: bytes, context: Any) -> bytes:
        attempts.append(request)
        if len(attempts) < 3:
            context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        return b"ready:" + request

    server = grpc.server(ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "raw.Flaky", {"Call": grpc.unary_unary_rpc_method_handler(flaky)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    policy = {
        "methodConfig": [
            {
                "name": [{"service": "raw.Flaky"}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.3s",
                    "maxBackoff": "0.6s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}",
        options=[("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(policy))],
    )
    call = channel.unary_unary("/raw.Flaky/Call")
    path = tmp_path / "retries.msgpack"
    with agenttape.use_cassette(path, mode="all"):
        assert call(b"x") == b"ready:x"
    assert len(attempts) == 3
    server.stop(None).wait()
    [interaction] = agenttape.load(path).interactions
    with agenttape.use_cassette(path, mode="none"):
        started = time.perf_counter()
        assert call(b"x") == b"ready:x"
        assert time.perf_counter() - started < 0.1
    assert interaction.duration is not None


def test_internals_it_does_not_know_never_break_the_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from agenttape import _adapters

    monkeypatch.setattr(_adapters, "_installed", set())
    monkeypatch.setattr(_adapters, "_off", {})
    for library in ("grpc._channel", "grpc.aio._channel"):
        module = types.ModuleType(library)
        channel = type("Channel", (), {"__init__": None})
        module.Channel = channel  # type: ignore[attr-defined]
        module.UnaryUnaryMultiCallable = 42  # type: ignore[attr-defined]
        with pytest.warns(agenttape.AgentTapeWarning, match="cannot intercept grpcio"):
            _adapters._install(library, module)
        assert library in _adapters._off
        assert set(vars(channel)) == set(vars(type("Channel", (), {"__init__": None})))


def test_a_stream_cut_mid_way_replays_its_status_with_the_note(tmp_path: Path) -> None:
    """A stream whose connection broke after its first message, as the recording proxy
    writes it (a transport failure, no status): replayed, the first message comes, then
    UNAVAILABLE, saying it was replayed, from the cassette."""
    from agenttape._core import files
    from agenttape._core.models import Failure
    from agenttape._core.wire import codec

    path = tmp_path / "scroll.msgpack"
    with GrpcServer() as server:
        stub = services.VectorsStub(grpc.insecure_channel(server.target))
        with agenttape.use_cassette(path, mode="all"):
            assert len(list(stub.Scroll(pb.ScrollRequest(collection="k", count=3)))) == 3
    tape = agenttape.load(path)
    (interaction,) = tape.interactions
    response = interaction.response
    assert response is not None
    size = response.chunks[0][0]
    cut = dataclasses.replace(
        interaction,
        response=dataclasses.replace(
            response, body=response.body[:size], chunks=response.chunks[:1], trailers=()
        ),
        error=Failure("read_error", "ConnectionResetError", "Connection reset by peer"),
    )
    files.write_atomic(path, codec.encode(tape.metadata, [cut]))

    stub = services.VectorsStub(grpc.insecure_channel(server.target))
    with agenttape.use_cassette(path):
        stream = stub.Scroll(pb.ScrollRequest(collection="k", count=3))
        assert next(stream).id == "k-0"
        with pytest.raises(grpc.RpcError) as caught:
            next(stream)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    (note,) = caught.value.__notes__
    assert note.startswith(f"agenttape: replayed from cassette {path}, interaction 0 (POST ")
    assert "this read error happened while recording, not now." in note

    async def scroll() -> BaseException:
        async with grpc.aio.insecure_channel(server.target) as channel:
            call = services.VectorsStub(channel).Scroll(pb.ScrollRequest(collection="k", count=3))
            assert (await call.read()).id == "k-0"
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.read()
            return caught.value

    with agenttape.use_cassette(path):
        failed = asyncio.run(scroll())
    assert failed.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert [n[:40] for n in failed.__notes__] == [note[:40]]
