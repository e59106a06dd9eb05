"""What the local API stand-ins share: a threaded HTTP server on 127.0.0.1 answering JSON."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class JSONHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body go out in separate writes; with Nagle on, the body would wait for the
    # client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_body(
        self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(
        self, status: int, payload: Any, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.send_body(status, json.dumps(payload).encode(), headers)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: Any


class LocalServer:
    """Serves ``handler`` on 127.0.0.1 (port 0: a free one); ``url`` is its base URL and the
    handler reaches this object as ``self.server.owner``."""

    handler: type[JSONHandler]

    def __init__(self, port: int = 0) -> None:
        self._server = _Server(("127.0.0.1", port), self.handler)
        self._server.owner = self
        self.port = self._server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_until_interrupted(self, banner: str) -> None:
        """Run from the command line: say where it listens, serve until Ctrl-C."""
        print(banner)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            self.stop()
