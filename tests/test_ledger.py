"""The patch ledger: all or nothing, originals exact, other wrappers kept in either order."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import subprocess
import sys
import textwrap
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import agenttape
from agenttape import _adapters
from agenttape._adapters import ledger
from agenttape._core import runtime


def _library() -> types.ModuleType:
    """A library of our own making, patched as an adapter patches a real one."""
    module = types.ModuleType("fakelib_ledger")

    class Base:
        def inherited(self, value: int) -> str:
            return f"base {value}"

    class Client(Base):
        def send(self, value: int) -> str:
            return f"sent {value}"

        async def fetch(self, value: int) -> str:
            return f"fetched {value}"

    module.Base = Base  # type: ignore[attr-defined]
    module.Client = Client  # type: ignore[attr-defined]
    module.helper = lambda: "helper"  # type: ignore[attr-defined]
    return module


@pytest.fixture
def library() -> Iterator[types.ModuleType]:
    module = _library()
    yield module
    ledger.remove("fakelib")


calls: list[str] = []


def _tagging(tag: str) -> Callable[[Any], Any]:
    """A maker of wrappers that note ``tag`` on each call, then call the original."""

    def make(original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(tag)
            return original(*args, **kwargs)

        return wrapper

    return make


def test_one_attribute_missing_patches_nothing(library: types.ModuleType) -> None:
    client = library.Client
    send = vars(client)["send"]
    with pytest.raises(ledger.PatchError, match=r"Client\.gone does not exist"):
        ledger.apply(
            "fakelib",
            [
                ledger.wrap(client, "send", _tagging("ours")),
                ledger.wrap(client, "gone", _tagging("ours")),
                ledger.Patch(library, "helper", _tagging("ours"), "module attribute"),
            ],
        )
    assert vars(client)["send"] is send
    assert library.helper() == "helper"
    assert ledger.installed(client, "send") is None


def test_a_replacement_that_cannot_be_set_rolls_the_others_back(
    library: types.ModuleType,
) -> None:
    send = vars(library.Client)["send"]
    with pytest.raises(ledger.PatchError, match="TypeError"):
        ledger.apply(
            "fakelib",
            [
                ledger.wrap(library.Client, "send", _tagging("ours")),
                ledger.wrap(int, "__add__", _tagging("ours")),  # a built-in type refuses
            ],
        )
    assert vars(library.Client)["send"] is send
    assert ledger.installed(library.Client, "send") is None


def test_double_install_is_a_no_op(library: types.ModuleType) -> None:
    patches = [ledger.wrap(library.Client, "send", _tagging("ours"))]
    assert len(ledger.apply("fakelib", patches)) == 1
    ours = vars(library.Client)["send"]
    assert ledger.apply("fakelib", patches) == []
    assert vars(library.Client)["send"] is ours
    calls.clear()
    assert library.Client().send(1) == "sent 1"
    assert calls == ["ours"]


def test_uninstall_restores_exactly_what_was_there(library: types.ModuleType) -> None:
    client, send, helper = library.Client, vars(library.Client)["send"], library.helper
    ledger.apply(
        "fakelib",
        [
            ledger.wrap(client, "send", _tagging("ours")),
            ledger.wrap(client, "inherited", _tagging("ours")),
            ledger.Patch(library, "helper", _tagging("ours"), "module attribute"),
            ledger.default(client, "_state", None),
        ],
    )
    assert "inherited" in vars(client) and client._state is None  # type: ignore[attr-defined]
    assert ledger.remove("fakelib") == []
    assert vars(client)["send"] is send
    assert "inherited" not in vars(client)  # it was inherited: deleted, not copied back
    assert "_state" not in vars(client)
    assert library.helper is helper


def test_install_after_another_wrapper_keeps_it(library: types.ModuleType) -> None:
    theirs = _tagging("theirs")(vars(library.Client)["send"])
    library.Client.send = theirs
    ledger.apply("fakelib", [ledger.wrap(library.Client, "send", _tagging("ours"))])
    calls.clear()
    assert library.Client().send(2) == "sent 2"
    assert calls == ["ours", "theirs"]
    ledger.remove("fakelib")
    assert vars(library.Client)["send"] is theirs


def test_a_wrapper_put_on_ours_survives_uninstall_and_ours_passes_through(
    library: types.ModuleType,
) -> None:
    client = library.Client
    send, fetch = vars(client)["send"], vars(client)["fetch"]
    ledger.apply(
        "fakelib",
        [
            ledger.wrap(client, "send", _tagging("ours")),
            ledger.wrap(client, "fetch", _async_tagging),
        ],
    )
    ours = vars(client)["send"]
    theirs = functools.wraps(ours)(_tagging("theirs")(ours))
    client.send = theirs
    client.fetch = _tagging("theirs")(vars(client)["fetch"])
    left = ledger.remove("fakelib")
    assert [entry.state for entry in left] == ["inert", "inert"]
    assert vars(client)["send"] is theirs
    assert vars(client)["fetch"] is not fetch  # theirs, on top of our pass-through
    calls.clear()
    assert client().send(3) == "sent 3"
    assert asyncio.run(client().fetch(4)) == "fetched 4"
    assert calls == ["theirs", "theirs"]  # ours noted nothing: it only passes through
    assert list(ledger.chain(theirs))[-1] is send
    # Installed again: on top of theirs, which stays.
    ledger.apply("fakelib", [ledger.wrap(client, "send", _tagging("ours"))])
    calls.clear()
    assert client().send(5) == "sent 5"
    assert calls == ["ours", "theirs"]


def test_a_patch_put_back_by_another_hand_is_installed_again_on_activation(
    library: types.ModuleType, tmp_path: Path
) -> None:
    """Someone sets the attribute back (to the original, or to a wrapper of their own that
    does not say it wraps ours): the next cassette installs ours again over what stands
    there, which stays and is called."""
    client = library.Client
    send = vars(client)["send"]
    ledger.apply("fakelib", [ledger.wrap(client, "send", _tagging("ours"))])
    cassette = agenttape.Cassette(tmp_path / "empty.msgpack", mode="all")
    cassette.save()
    for put_there in (send, _tagging("theirs")(send)):
        client.send = put_there
        with agenttape.use_cassette(cassette.path):
            calls.clear()
            assert client().send(6) == "sent 6"
        assert calls == ["ours"] + (["theirs"] if put_there is not send else [])
        assert ledger.installed(client, "send") is ledger.owned(vars(client)["send"])
    ledger.remove("fakelib")
    assert vars(client)["send"] is put_there  # what stood there when ours was put back


def test_ours_put_back_by_the_hand_that_took_it_is_not_wrapped_again(
    library: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test's monkeypatch sets its own function, a cassette inside it installs ours over
    that, and the monkeypatch's undo puts back the replacement it found (ours, the first):
    the next cassette takes that as ours again, so a call passes through ours once."""
    client = library.Client
    send = vars(client)["send"]
    ledger.apply("fakelib", [ledger.wrap(client, "send", _tagging("ours"))])
    first = vars(client)["send"]
    cassette = agenttape.Cassette(tmp_path / "empty.msgpack", mode="all")
    cassette.save()
    with monkeypatch.context() as patched:
        patched.setattr(client, "send", _tagging("theirs")(send))
        with agenttape.use_cassette(cassette.path):
            assert vars(client)["send"] is not first
    assert vars(client)["send"] is first
    with agenttape.use_cassette(cassette.path):
        calls.clear()
        assert client().send(6) == "sent 6"
    assert calls == ["ours"]
    assert vars(client)["send"] is first
    assert ledger.installed(client, "send") is ledger.owned(first)
    ledger.remove("fakelib")


def _async_tagging(original: Any) -> Any:
    async def fetch(self: Any, value: int) -> str:
        calls.append("ours")
        result: str = await original(self, value)
        return result

    return fetch


def test_the_adapter_of_a_library_it_does_not_fit_stays_off_and_the_import_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An adapter whose second patch does not fit: the library imports as ever, its first
    attribute is untouched, and the adapter is reported off, once."""
    package = tmp_path / "fakelib_unfit"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "client.py").write_text(
        "class Session:\n    def send(self):\n        return 'live'\n"
    )
    (tmp_path / "fakelib_unfit_adapter.py").write_text(
        textwrap.dedent("""
            from agenttape._adapters import ledger

            def install(module):
                return [
                    ledger.wrap(module.Session, "send", lambda original: lambda self: "ours"),
                    ledger.wrap(module.Session, "receive", lambda original: original),
                ]
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        _adapters.LIBRARIES,
        "fakelib_unfit.client",
        _adapters.Library("fakelib_unfit_adapter", "fakelib-unfit", "all"),
    )
    cassette = agenttape.Cassette(tmp_path / "empty.msgpack", mode="all")
    cassette.save()
    try:
        with (
            pytest.warns(agenttape.AgentTapeWarning, match=r"cannot intercept fakelib-unfit"),
            agenttape.use_cassette(tmp_path / "empty.msgpack", mode="none"),
        ):
            import fakelib_unfit.client  # type: ignore[import-not-found]

            assert fakelib_unfit.client.Session().send() == "live"
        assert "Session.receive does not exist" in _adapters.state()[1]["fakelib_unfit.client"]
    finally:
        for name in ("fakelib_unfit", "fakelib_unfit.client", "fakelib_unfit_adapter"):
            sys.modules.pop(name, None)


class _ClosingMeanwhile(list):  # type: ignore[type-arg]
    """The process-wide tapes, whose last one another thread closes right after a reader
    saw that there was one: what a read in two steps would meet."""

    def __bool__(self) -> bool:
        there = len(self) > 0
        self.clear()
        return there


def test_active_reads_the_newest_tape_in_one_step(tmp_path: Path) -> None:
    """A thread that did not open the cassette finds it through one read: a cassette closing
    in another thread meanwhile never makes ``active()`` raise into the user's call."""
    agenttape.Cassette(tmp_path / "t.msgpack", mode="all").save()
    with agenttape.use_cassette(tmp_path / "t.msgpack", mode="none") as cassette:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runtime, "_active", _ClosingMeanwhile(runtime._active))
            found = contextvars.Context().run(runtime.active)  # as another thread would
        assert found is cassette


# -- threads: OpenTelemetry's threading instrumentation, either order --------------------------


@pytest.fixture
def threading_instrumentor() -> Iterator[Any]:
    """OpenTelemetry's threading instrumentor; its ``uninstrument`` leaves ``start`` and ``run``
    set on ``threading.Timer`` itself (what it found through inheritance), which would bypass
    every later patch of ``Thread.start`` in this process: those are taken back after."""
    module = pytest.importorskip("opentelemetry.instrumentation.threading")
    own = set(vars(threading.Timer))
    yield module.ThreadingInstrumentor()
    for name in set(vars(threading.Timer)) - own:
        delattr(threading.Timer, name)


def _thread_methods() -> tuple[int, int]:
    """The identities of the methods in place (a wrapt proxy compares equal to what it
    wraps)."""
    return id(vars(threading.Thread)["start"]), id(vars(ThreadPoolExecutor)["submit"])


def test_threading_instrumentation_before_a_recorder_is_kept(
    tmp_path: Path, threading_instrumentor: Any
) -> None:
    instrumentor = threading_instrumentor
    before = _thread_methods()
    instrumentor.instrument()
    try:
        theirs = _thread_methods()
        assert theirs != before
        recorder = agenttape.Recorder(tmp_path / "runs")
        assert _thread_methods() != theirs  # ours, on top of theirs
        recorder.close()
        assert _thread_methods() == theirs
    finally:
        instrumentor.uninstrument()
    assert _thread_methods() == before


def test_threading_instrumentation_after_a_recorder_is_kept(
    tmp_path: Path, threading_instrumentor: Any
) -> None:
    """OpenTelemetry wraps ours; the recorder closes: their wrappers stay and still work, ours
    only passes through."""
    instrumentor = threading_instrumentor
    recorder = agenttape.Recorder(tmp_path / "runs")
    instrumentor.instrument()
    try:
        theirs = _thread_methods()
        recorder.close()
        assert _thread_methods() == theirs
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(lambda: 7).result() == 7
        seen: list[int] = []
        thread = threading.Thread(target=seen.append, args=(8,))
        thread.start()
        thread.join()
        assert seen == [8]
        assert {entry.state for entry in ledger.entries() if entry.library == "threading"} == {
            "inert"
        }
    finally:
        instrumentor.uninstrument()


# -- doctor ------------------------------------------------------------------------------------


def _doctor(tmp_path: Path, setup: str, *arguments: str) -> str:
    (tmp_path / "instrumented.py").write_text(textwrap.dedent(setup))
    done = subprocess.run(
        [sys.executable, "-m", "agenttape", "doctor", "--import", "instrumented", *arguments],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_doctor_names_opentelemetry_and_patches_nothing(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.instrumentation.httpx")
    setup = """
        import atexit, json
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from agenttape._adapters import ledger

        HTTPXClientInstrumentor().instrument()
        atexit.register(lambda: print(json.dumps({"entries": len(ledger.entries())})))
    """
    out = _doctor(tmp_path, setup)
    assert "httpx.HTTPTransport.handle_request: OpenTelemetry (opentelemetry.instrumentation" in out
    assert "httpx.Client._transport_for_url" in out.split("Patched when a cassette opens")[1]
    assert out.rstrip().endswith('{"entries": 0}')  # doctor itself patched nothing
    import json

    found = json.loads(_doctor(tmp_path, setup, "--json").rsplit("\n{", 1)[0])
    assert found["patched"] == []
    assert any(row["by"].startswith("OpenTelemetry") for row in found["wrappers"])


def test_doctor_says_when_a_wrapper_sits_on_ours_and_ours_is_left_inert(tmp_path: Path) -> None:
    setup = """
        import functools
        import httpx
        import agenttape
        from agenttape._adapters import install_adapters

        install_adapters()
        ours = httpx.Client._transport_for_url

        @functools.wraps(ours)
        def traced(self, url):
            return ours(self, url)

        httpx.Client._transport_for_url = traced
        agenttape.uninstall()
    """
    out = _doctor(tmp_path, setup)
    assert "httpx.Client._transport_for_url" in out
    assert "left in place under another wrapper, passing through" in out
    assert "instrumented (instrumented) -> agenttape (inert) -> httpx (original)" in out


def test_doctor_names_only_the_clients_no_adapter_serves(tmp_path: Path) -> None:
    """pycurl and tornado have adapters: they are patched, not "not intercepted"; a native
    client with none (a stand-in for rnet) is named."""
    pytest.importorskip("pycurl")
    pytest.importorskip("tornado")
    (tmp_path / "rnet").mkdir()
    (tmp_path / "rnet" / "__init__.py").write_text("def get(url): ...\n")
    out = _doctor(tmp_path, "import pycurl, tornado.httpclient, rnet")
    unserved = out.split("Imported and not intercepted")[1].split("Other wrappers")[0]
    assert [line.split(":")[0].strip() for line in unserved.splitlines()[1:] if line] == ["rnet"]
    assert "pycurl.Curl" in out.split("Patched when a cassette opens")[1]


def test_doctor_imports_nothing_and_names_what_it_did_not_inspect(tmp_path: Path) -> None:
    """doctor reports on the process it runs in: a library the program did not import is
    listed with its installed version, not imported (importing them all took seconds)."""
    setup = """
        import atexit, sys
        import requests

        atexit.register(lambda: print("httpx imported:", "httpx" in sys.modules))
    """
    out = _doctor(tmp_path, setup)
    unseen = out.split("Installed and not imported in this process")[1]
    assert f"  httpx {metadata.version('httpx')}" in unseen.splitlines()
    assert "  requests " not in unseen
    assert "requests.sessions.Session.send" in out.split("Patched when a cassette opens")[1]
    assert out.rstrip().endswith("httpx imported: False")


def test_the_ledger_table_in_the_docs_is_the_one_the_code_makes() -> None:
    """docs/architecture.md shows the patches as the ledger declares them (made anew with the
    command in the comment above the table)."""
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agenttape._tools.doctor import ledger_table; print(ledger_table())",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    docs = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text()
    shown = docs.split("<!-- ledger table:", 1)[1].split("-->", 1)[1]
    assert shown.split("<!-- end of ledger table -->", 1)[0].strip() == made


def _plain(value: int) -> list[int]:
    return [value]


async def _coroutine(value: int) -> list[int]:
    await asyncio.sleep(0)
    return [value]


def _generator(value: int) -> Iterator[int]:
    yield value
    yield value + 1


async def _async_generator(value: int) -> Any:
    yield value
    yield value + 1


async def _drain(agen: Any) -> list[int]:
    return [item async for item in agen]


def _run(function: Any, value: int) -> list[int]:
    result = function(value)
    if inspect.iscoroutine(result):
        return list(asyncio.run(result))
    if inspect.isasyncgen(result):
        return asyncio.run(_drain(result))
    return list(result)


@pytest.mark.parametrize("original", [_plain, _coroutine, _generator, _async_generator])
def test_a_pass_through_keeps_the_kind_of_function_it_replaces(original: Any) -> None:
    """A pass-through of ours stays what it was for ``inspect`` (a coroutine function stays
    one), and CPython 3.14's warning on code of another kind is never raised."""

    def ours_of(kind: Any) -> Any:
        # A wrapper of the same kind as the original, holding a free variable as ours do.
        if inspect.iscoroutinefunction(kind):

            async def ours(value: int) -> list[int]:
                return [*await kind(value), -1]
        elif inspect.isasyncgenfunction(kind):

            async def ours(value: int) -> Any:  # type: ignore[misc]
                async for item in kind(value):
                    yield item
                yield -1
        elif inspect.isgeneratorfunction(kind):

            def ours(value: int) -> Iterator[int]:  # type: ignore[misc]
                yield from kind(value)
                yield -1
        else:

            def ours(value: int) -> list[int]:  # type: ignore[misc]
                return [*kind(value), -1]

        return ours

    ours = ours_of(original)
    assert _run(ours, 1)[-1] == -1
    kinds = (
        inspect.iscoroutinefunction,
        inspect.isgeneratorfunction,
        inspect.isasyncgenfunction,
    )
    before = [check(ours) for check in kinds]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ledger.inert(ours, original)
    assert [check(ours) for check in kinds] == before
    assert _run(ours, 1) == _run(original, 1)


@pytest.mark.parametrize("original", [_plain, _coroutine, _generator])
def test_redirected_code_keeps_the_kind_of_the_function(original: Any) -> None:
    module = types.ModuleType("fakelib_redirect")
    function = types.FunctionType(
        original.__code__, vars(module), original.__name__, original.__defaults__
    )
    module.__dict__.update(asyncio=asyncio, target=function)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        patches = ledger.redirect_code(module, "target", lambda copy: copy)
        ledger.apply("fakelib", patches)
    try:
        assert inspect.iscoroutinefunction(function) == inspect.iscoroutinefunction(original)
        assert inspect.isgeneratorfunction(function) == inspect.isgeneratorfunction(original)
        assert _run(function, 3) == _run(original, 3)
    finally:
        ledger.remove("fakelib")


# -- every entry, a wrapper put on top of ours ---------------------------------------------------

WALK = """
import functools, os, socket, sys, threading, types, warnings
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

warnings.simplefilter("ignore")
import http.client
import httpx, httpx2, httpcore, httpcore2, urllib3, requests, aiohttp, grpc, grpc._channel, grpc.aio
import botocore.endpoint, botocore.httpsession, openai, anthropic
import websockets.asyncio.client, websockets.sync.client, websockets.legacy.client
import httplib2, tornado.simple_httpclient, curl_cffi.requests, curl_cffi.aio, pycurl, primp

import agenttape
from agenttape._adapters import ledger

ABSENT = object()
folder, style = sys.argv[1], sys.argv[2]
calls = set()


def own(target, name):
    if isinstance(target, (type, types.ModuleType)):
        return vars(target).get(name, ABSENT)
    return getattr(target, name, ABSENT)


def theirs(where, inner):
    # Instrumentation put on top of ours: with functools.wraps (OpenTelemetry's wrapt proxies,
    # Sentry), or a plain closure that does not say what it wraps.
    def wrapper(*args, **kwargs):
        calls.add(where)
        return inner(*args, **kwargs)

    return functools.wraps(inner)(wrapper) if style == "wraps" else wrapper


def activate():
    with agenttape.use_cassette(folder + "/t.msgpack", mode="none"):
        import websocket, httpx_ws  # imported while a cassette is open: patched on import
        recorder = agenttape.Recorder(folder + "/runs")
        with recorder.run():
            yield
        recorder.close()


agenttape.Cassette(folder + "/t.msgpack", mode="all").save()
on_top = {}
for _ in activate():
    for entry in ledger.entries():
        target, name = entry.patch.target, entry.patch.name
        value = own(target, name)
        if callable(value) and not isinstance(value, type):  # not a class, nor a default
            on_top[ledger.where(entry.patch)] = target, name, value, entry.original
            setattr(target, name, theirs(ledger.where(entry.patch), value))
assert len(on_top) >= 100, len(on_top)
wrappers = {where: own(target, name) for where, (target, name, _, _) in on_top.items()}


def kept(stage):
    gone = [where for where, (t, n, _, _) in on_top.items() if own(t, n) is not wrappers[where]]
    assert not gone, (stage, gone)


kept("the cassette and the recorder closed")
for _ in activate():
    pass
kept("opened and closed again")
agenttape.uninstall()
kept("uninstalled")
for where, (_, _, ours, original) in on_top.items():
    # What their wrapper calls is ours, now only a pass-through to the original.
    assert ours.__kwdefaults__[ledger.MARK] is original, where
threading.Thread(target=lambda: None).start()
with ThreadPoolExecutor(1) as pool:
    pool.submit(lambda: None).result()
os.environ.get("HOME")
socket.getaddrinfo("127.0.0.1", 80)
assert calls == {
    "threading.Thread.start",
    "concurrent.futures.thread.ThreadPoolExecutor.submit",
    "os._Environ.get",
    "socket.getaddrinfo",
}, calls
"""


@pytest.mark.parametrize("style", ["wraps", "closure"])
def test_a_wrapper_put_on_any_patch_of_ours_stays_and_calls_through(
    tmp_path: Path, style: str
) -> None:
    """Every entry the ledger installs (adapters, the recorder's threads): a wrapper put on top
    of ours stays through the cassette and recorder closing, opening again and
    ``uninstall()``, and still reaches the original, ours passing through. In a process of
    its own, so that every library is imported and nothing of another test is in the way."""
    done = subprocess.run(
        [sys.executable, "-c", WALK, str(tmp_path), style],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


PICKLED = """
import functools, inspect, os, pickle, signal, subprocess, sys, tempfile, warnings
import agenttape
from agenttape._adapters import ledger

before = inspect.signature(os.system)
folder = tempfile.mkdtemp()
warnings.simplefilter("ignore")
with agenttape.use_cassette(folder + "/c.msgpack", mode="once", block_network=True):
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    child.send_signal(signal.SIGKILL)
    child.wait()
assert ledger.installed(os, "system") is not None, "the child-process guard is in place"
assert pickle.loads(pickle.dumps(os.system)) is os.system
assert inspect.signature(os.system) == before
assert inspect.unwrap(os.system) is os.system.__wrapped__
for entry in ledger.entries():
    replacement = entry.replacement
    if inspect.isfunction(replacement):
        assert pickle.loads(pickle.dumps(replacement)) is replacement, entry.patch.name


@functools.wraps(os.system)
def later(command):
    return later.__wrapped__(command)


os.system = later  # named as ours is: os.system
assert pickle.loads(pickle.dumps(os.system)) is later
print("pickled")
"""


def test_a_patched_function_pickles_and_unwraps_after_a_cassette_guarded_children(
    tmp_path: Path,
) -> None:
    """A cassette that blocks the network guards the children it starts by wrapping
    ``os.system`` (and ``Popen``): the wrapper stays, and pickle, ``inspect`` and a later
    wrapper still find it where it stands, in a process of its own as after any test."""
    result = subprocess.run(
        [sys.executable, "-c", PICKLED],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["pickled"]
