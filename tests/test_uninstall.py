"""``agenttape.uninstall()`` puts back every original, attribute by attribute, for every
adapted library installed here; a cassette opened afterwards installs them again.

In a process of its own: no other test's cassette, recorder or patch is in the way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, sys, threading, types, warnings
from concurrent.futures import ThreadPoolExecutor

warnings.simplefilter("ignore")
import http.client, socket
import httpx, httpx2, httpcore, httpcore2, urllib3, requests, aiohttp, grpc, grpc._channel, grpc.aio
import botocore.endpoint, botocore.httpsession
import openai, anthropic
import google.genai.errors, mistralai.client.errors.mistralerror, cohere.core.api_error
import websockets.asyncio.client, websockets.sync.client, websockets.legacy.client
import httplib2, tornado.simple_httpclient
import curl_cffi.requests, curl_cffi.aio, pycurl, primp

import agenttape
from agenttape import _adapters
from agenttape._adapters import ledger

ABSENT = object()
OURS = os.path.dirname(agenttape.__file__) + os.sep
LATE = {"websocket._core", "httpx_ws._api"}  # imported only once a cassette is open


def read(target, name):
    if isinstance(target, (type, types.ModuleType)):
        return vars(target).get(name, ABSENT)
    return getattr(target, name)


def points():
    found = {}
    for library in _adapters.LIBRARIES:
        module = sys.modules.get(library)
        if module is not None:
            for patch in _adapters.declared(library, module):
                found.setdefault((id(patch.target), patch.name), (library, patch.target, patch.name))
    return list(found.values())


def threads():
    return vars(threading.Thread)["start"], vars(ThreadPoolExecutor)["submit"]


before = [(point, read(point[1], point[2])) for point in points()]
libraries = {library for (library, _, _), _ in before}
missing = set(_adapters.LIBRARIES) - LATE - libraries
assert not missing, missing
threads_before = threads()
meta_path = list(sys.meta_path)

recorder = agenttape.Recorder(sys.argv[1] + "/runs")
assert threads() != threads_before
agenttape.Cassette(sys.argv[1] + "/t.msgpack", mode="all").save()
with agenttape.use_cassette(sys.argv[1] + "/t.msgpack", mode="none"):
    import websocket, httpx_ws
    unpatched = [f"{p[1]}.{p[2]}" for p, value in before if read(p[1], p[2]) is value]
    assert unpatched == [], unpatched
    late = [p for p in points() if p[0] in LATE]
    assert {p[0] for p in late} == LATE
    assert all(ledger.installed(p[1], p[2]) for p in late), [(p, ledger.installed(p[1], p[2])) for p in late]

agenttape.uninstall()
changed = [f"{p[0]}: {p[1]}.{p[2]}" for p, value in before if read(p[1], p[2]) is not value]
assert changed == [], changed
assert threads() == threads_before
assert not [finder for finder in sys.meta_path if "agenttape" in type(finder).__module__]
assert all(finder in sys.meta_path for finder in meta_path)
assert ledger.entries() == []
for library, target, name in late:
    value = read(target, name)
    if name == "_agenttape_session":
        assert value is ABSENT
        continue
    code = value.__code__
    if isinstance(target, types.ModuleType):  # the library's own function, maybe re-exported
        assert value.__module__.partition(".")[0] == target.__name__.partition(".")[0]
    else:
        assert value.__qualname__ == f"{target.__qualname__}.{name}", (target, name)
    # the package's own folder: a clone named agenttape holds its venv, and the libraries, in one
    assert not code.co_filename.startswith(OURS), (target, name, code.co_filename)

with agenttape.use_cassette(sys.argv[1] + "/t.msgpack", mode="none"):
    again = [p for p, value in before if read(p[1], p[2]) is value]
    assert again == [], again
agenttape.uninstall()
recorder.close()
print(len(before), len(late), sorted(libraries | LATE))
"""


def test_uninstall_restores_every_original_of_every_library(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    count, late, libraries = done.stdout.split(" ", 2)
    assert int(count) >= 55 and int(late) >= 9
    for library in (
        *("httpx2", "grpc.aio._channel", "websocket._core", "socket", "http.client"),
        *("curl_cffi.curl", "curl_cffi.aio", "pycurl", "primp"),
    ):
        assert repr(library) in libraries
