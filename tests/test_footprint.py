"""No footprint while inactive: with agenttape imported and its pytest plugin loaded but no
cassette, run or recorder active (one was, before: every adapter is in place), the clients
it adapts are made and used against a real
server with no file-system access of agenttape's, no edit of ``os.environ`` and no change of
their types. Run in a pytest subprocess (the plugin loaded from its entry point), with an
audit hook and a watch on ``os.stat`` that keep every event with a frame of agenttape's on
the stack."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

INACTIVE = """
    import asyncio
    import http.server
    import os
    import sys
    import sysconfig
    import threading

    import aiohttp
    import certifi
    import httpcore
    import httpx
    import requests
    import requests.adapters

    import agenttape

    try:
        import httpcore2
        import httpx2
    except ImportError:  # the oldest httpx's cell has no httpx2
        httpx2 = None

    OURS = os.path.dirname(agenttape.__file__) + os.sep
    STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


    def ours() -> bool:
        # The code that asked is agenttape's: the innermost frame that is neither this
        # watch nor the standard library (os.path, pathlib, io) is agenttape's; a library
        # agenttape called (building a TLS context) answers for itself.
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if name != __file__ and not name.startswith((STDLIB, "<frozen")):
                return name.startswith(OURS)
            frame = frame.f_back
        return False


    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass


    def test_clients_made_and_used_with_no_cassette_leave_no_trace(tmp_path):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        # A cassette recorded, then replayed (blocking the network): every adapter is in
        # place from here on, as after any test that used one.
        cassette = tmp_path / "tape.msgpack"
        with agenttape.use_cassette(cassette, mode="all"):
            httpx.get(url)
        with agenttape.use_cassette(cassette, mode="none"):
            httpx.get(url)
        events = []

        def audit(event, args):
            if event.startswith(("open", "os.", "shutil.", "glob.", "subprocess.")) and ours():
                events.append((event, repr(args)[:160]))

        sys.addaudithook(audit)
        watched = {name: getattr(os, name) for name in ("stat", "lstat")}

        def watch(name):
            original = watched[name]

            def call(*args, **kwargs):
                if ours():
                    events.append((f"os.{name}", repr(args)[:160]))
                return original(*args, **kwargs)

            return call

        for name in watched:
            setattr(os, name, watch(name))
        environment = dict(os.environ)
        try:
            for hx in (httpx, httpx2):
                if hx is None:
                    continue
                with hx.Client() as client:
                    assert client.get(url).content == b"ok"
                    assert type(client._transport) is hx.HTTPTransport

                async def asynchronous(hx=hx):
                    async with hx.AsyncClient() as client:
                        assert (await client.get(url)).content == b"ok"
                        assert type(client._transport) is hx.AsyncHTTPTransport

                asyncio.run(asynchronous())
            with requests.Session() as session:
                assert session.get(url).content == b"ok"
                assert type(session.get_adapter(url)) is requests.adapters.HTTPAdapter

            async def aiohttp_get():
                async with aiohttp.ClientSession() as session:
                    async with session.get(url) as response:
                        assert await response.read() == b"ok"
                    assert type(session.connector) is aiohttp.TCPConnector

            asyncio.run(aiohttp_get())
        finally:
            for name, original in watched.items():
                setattr(os, name, original)
            server.shutdown()
        assert dict(os.environ) == environment
        assert events == []
"""


@pytest.mark.parametrize("recording", ["pytest-recording", "drop-in"])
def test_no_footprint_while_no_cassette_is_active(
    pytester: pytest.Pytester, recording: str
) -> None:
    pytester.makepyfile(test_inactive=textwrap.dedent(INACTIVE))
    disabled = ("-p", "no:recording") if recording == "drop-in" else ()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *disabled)
    result.assert_outcomes(passed=1)
