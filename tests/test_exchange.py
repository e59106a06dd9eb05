"""The exchange seam: a failure replayed from a cassette says where it came from."""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx
import pytest
import requests
import urllib3

import agenttape
from tests.servers import RawServer, Reply, Server, read_head, refused_port


def _note(exc: BaseException) -> str:
    notes = [n for n in getattr(exc, "__notes__", ()) if n.startswith("agenttape:")]
    assert len(notes) == 1, notes
    return notes[0]


def _record_refused(path: Path, call: Callable[[], object]) -> None:
    with agenttape.use_cassette(path, mode="once") as tape, pytest.raises(Exception) as live:
        call()
    assert "__notes__" not in vars(live.value)  # the live failure carries no note
    assert tape.interactions[0].error is not None
    assert tape.interactions[0].error.kind == "connect_error"


def test_a_replayed_connect_error_says_it_was_replayed_and_from_where(
    cassette_path: Path,
) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather?i=0"
    _record_refused(cassette_path, lambda: httpx.get(url))
    recorded = agenttape.load(cassette_path).interactions[0].started
    with (
        pytest.raises(httpx.ConnectError) as caught,
        agenttape.use_cassette(cassette_path, mode="once"),
    ):
        httpx.get(url)
    assert _note(caught.value) == (
        f"agenttape: replayed from cassette {cassette_path}, interaction 0 (GET {url}), "
        f"recorded {recorded:%Y-%m-%d %H:%M:%S} UTC: this connect error happened while "
        "recording, not now. To record it again against the live service: AGENTTAPE_MODE=all "
        "(or mode='all', pytest --agenttape-record, agenttape run --mode all)."
    )
    printed = "".join(traceback.format_exception(caught.value))
    assert printed.rstrip().endswith(_note(caught.value))


def _aws(url: str) -> object:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=url.rsplit("/", 1)[0],
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=Config(retries={"max_attempts": 1}),
    )
    return client.list_buckets()


def _sdk(name: str, url: str) -> object:
    """The SDK ``name``'s model list; ``async-`` before it runs its async client."""
    import anthropic
    import openai

    sdk = name.removeprefix("async-")
    base = url.rsplit("/", 1)[0] + ("/v1" if sdk == "openai" else "")
    options = {"base_url": base, "api_key": "sk-test", "max_retries": 0}
    if name.startswith("async-"):
        client_class = openai.AsyncOpenAI if sdk == "openai" else anthropic.AsyncAnthropic

        async def listed() -> object:
            return await client_class(**options).models.list()  # type: ignore[arg-type]

        return asyncio.run(listed())
    sync_class = openai.OpenAI if sdk == "openai" else anthropic.Anthropic
    return sync_class(**options).models.list()  # type: ignore[arg-type]


def _aiohttp(url: str) -> object:
    async def fetch() -> None:
        async with aiohttp.ClientSession() as session:
            await session.get(url)

    return asyncio.run(fetch())


def _caught_type(name: str) -> type[BaseException]:
    import anthropic
    import botocore.exceptions
    import openai

    return {
        "httpx": httpx.ConnectError,
        "urllib3": urllib3.exceptions.NewConnectionError,
        "aiohttp": aiohttp.ClientConnectorError,
        "requests": requests.ConnectionError,
        "botocore": botocore.exceptions.EndpointConnectionError,
        "openai": openai.APIConnectionError,
        "async-openai": openai.APIConnectionError,
        "anthropic": anthropic.APIConnectionError,
        "async-anthropic": anthropic.APIConnectionError,
    }[name]


CALLS: dict[str, Callable[[str], object]] = {
    "httpx": httpx.get,
    "urllib3": lambda url: urllib3.PoolManager().request("GET", url, retries=False),
    "aiohttp": _aiohttp,
    "requests": requests.get,
    "botocore": _aws,
    "openai": functools.partial(_sdk, "openai"),
    "async-openai": functools.partial(_sdk, "async-openai"),
    "anthropic": functools.partial(_sdk, "anthropic"),
    "async-anthropic": functools.partial(_sdk, "async-anthropic"),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_the_exception_the_caller_catches_carries_the_note(name: str, tmp_path: Path) -> None:
    """Each library's own outermost error, the one its caller catches (requests'
    ConnectionError around urllib3's, botocore's around urllib3's, the SDKs' around httpx's),
    carries the note, and only it: a printed traceback says it once."""
    url = f"http://127.0.0.1:{refused_port()}/weather"
    path = tmp_path / f"{name}.msgpack"
    call = functools.partial(CALLS[name], url)
    _record_refused(path, call)
    with pytest.raises(_caught_type(name)) as caught, agenttape.use_cassette(path):
        call()
    assert f"replayed from cassette {path}, interaction " in _note(caught.value)
    printed = "".join(traceback.format_exception(caught.value))
    assert printed.count("agenttape: replayed from") == 1, printed


def test_a_miss_carries_no_replay_note(cassette_path: Path) -> None:
    url = f"http://127.0.0.1:{refused_port()}/weather"
    _record_refused(cassette_path, lambda: httpx.get(url))
    with (
        pytest.raises(agenttape.UnmatchedInteractionError) as caught,
        agenttape.use_cassette(cassette_path),
    ):
        httpx.get(url + "?other=1")
    assert not getattr(caught.value, "__notes__", ())


# -- a body cut short mid-stream --------------------------------------------------------------
#
# The server sends the head and part of the body, then either closes the connection (the body
# ends short of its Content-Length: a protocol error) or resets it (a read error). Recorded
# live, replayed with the server stopped: each library raises its own exception, as it did
# live, and that exception says it came from the cassette.

PART = b'{"choices": [{"delta": "Hel'
PROMISED = 100


def _reset_after_part(connection: socket.socket) -> None:
    """Answers with a head promising ``PROMISED`` bytes and ``PART`` of them, then resets the
    connection (RST)."""
    read_head(connection)
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {PROMISED}\r\n\r\n"
    )
    connection.sendall(head.encode() + PART)
    time.sleep(0.3)  # the client has read the part and waits for the rest
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _httpx(url: str) -> bytes:
    with httpx.Client() as client:
        return client.get(url).content


def _httpx_async(url: str) -> bytes:
    async def get() -> bytes:
        async with httpx.AsyncClient() as client:
            return (await client.get(url)).content

    return asyncio.run(get())


def _httpx_stream(url: str) -> bytes:
    with httpx.Client() as client, client.stream("GET", url) as response:
        return b"".join(response.iter_raw())


def _requests(url: str) -> bytes:
    return requests.get(url, timeout=10).content


def _urllib3(url: str) -> bytes:
    return urllib3.PoolManager().request("GET", url, retries=False).data  # type: ignore[no-any-return]


def _urllib3_stream(url: str) -> bytes:
    response = urllib3.PoolManager().request("GET", url, retries=False, preload_content=False)
    return b"".join(response.stream(8))


def _aiohttp(url: str) -> bytes:
    async def get() -> bytes:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return await response.read()

    return asyncio.run(get())


def _urllib_request(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()  # type: ignore[no-any-return]


READERS: dict[str, Callable[[str], bytes]] = {
    "httpx": _httpx,
    "httpx-async": _httpx_async,
    "httpx-stream": _httpx_stream,
    "requests": _requests,
    "urllib3": _urllib3,
    "urllib3-stream": _urllib3_stream,
    "aiohttp": _aiohttp,
    "urllib.request": _urllib_request,
}


def _failure(read: Callable[[str], bytes], url: str) -> BaseException:
    try:
        read(url)
    except Exception as exc:
        return exc
    raise AssertionError("a body cut short was read without an error")


def _notes_in_chain(exc: BaseException) -> list[str]:
    notes: list[str] = []
    current: BaseException | None = exc
    while current is not None:
        notes += [n for n in getattr(current, "__notes__", ()) if n.startswith("agenttape:")]
        current = current.__cause__ or current.__context__
    return notes


@pytest.mark.parametrize("ending", ["closed", "reset"])
@pytest.mark.parametrize("name", list(READERS))
def test_a_body_cut_mid_stream_replays_with_the_note(
    name: str, ending: str, tmp_path: Path, serve: Callable[..., Server]
) -> None:
    read = READERS[name]
    server: Server | RawServer
    if ending == "closed":
        server = serve(lambda seen: Reply(chunks=[PART], length=PROMISED))
    else:
        server = RawServer(_reset_after_part)
    url = f"{server.url}/v1/chat?stream=1"
    path = tmp_path / f"{name}-{ending}.msgpack"
    try:
        with agenttape.use_cassette(path, mode="once"):
            live = _failure(read, url)
    finally:
        server.stop()
    assert not _notes_in_chain(live)
    (interaction,) = agenttape.load(path).interactions
    assert interaction.response is not None
    if ending == "closed":
        assert interaction.response.body == PART
    else:  # what the library had handed over when the reset came; the rest it dropped
        assert PART.startswith(interaction.response.body)
    assert interaction.error is not None
    recorded = interaction.started

    with agenttape.use_cassette(path) as tape:
        replayed = _failure(read, url)
        assert tape.all_played
    assert type(replayed) is type(live)
    what = interaction.error.kind.replace("_", " ")
    note = (
        f"agenttape: replayed from cassette {path}, interaction 0 (GET {url}), "
        f"recorded {recorded:%Y-%m-%d %H:%M:%S} UTC: this {what} happened while recording, "
        "not now. To record it again against the live service: AGENTTAPE_MODE=all (or "
        "mode='all', pytest --agenttape-record, agenttape run --mode all)."
    )
    printed = "".join(traceback.format_exception(replayed))
    assert printed.count("agenttape: replayed from") == 1, printed
    # requests wraps urllib3's error in its own: the note is on requests' own, which the
    # caller catches, and only there.
    assert replayed.__notes__ == [note]
    assert _notes_in_chain(replayed) == [note]
