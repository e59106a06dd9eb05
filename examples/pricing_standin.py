"""A small local stand-in for a shop's pricing API that sheds load at peak time.

``GET /v1/prices/<sku>`` answers the current price as JSON. Off peak that is a 200. At peak
(``peak=True``) the API's gateway answers every request with a 429, a ``retry-after`` header
and its error document cut at 64 bytes, as the real gateway does when it sheds load: a
complete HTTP response whose body is half a JSON document. Deterministic: the same request
always gets the same bytes.

    python examples/pricing_standin.py --port 8766 [--peak]
"""

from __future__ import annotations

import argparse
import http.server
import json
import threading
from typing import Any

PRICES = {
    "KTL-100": {"product": "kettle", "price": "89.90", "currency": "EUR"},
    "MUG-200": {"product": "mug", "price": "12.50", "currency": "EUR"},
    "TST-300": {"product": "toaster", "price": "54.00", "currency": "EUR"},
}
ERROR_BODY_LIMIT = 64
RETRY_AFTER = "30"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        sku = self.path.rsplit("/", 1)[-1]
        if not self.path.startswith("/v1/prices/") or sku not in PRICES:
            return self._send(404, json.dumps({"error": {"type": "not_found"}}).encode())
        if self.server.api.peak:
            error = {
                "error": {
                    "type": "rate_limited",
                    "limit_per_minute": 120,
                    "message": f"Too many requests for {sku}; retry later.",
                }
            }
            body = json.dumps(error).encode()[:ERROR_BODY_LIMIT]
            return self._send(429, body, (("retry-after", RETRY_AFTER),))
        self._send(200, json.dumps({"sku": sku, **PRICES[sku]}).encode())

    def _send(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    api: PricingAPI


class PricingAPI:
    """The pricing API on 127.0.0.1; ``url`` is its base URL."""

    def __init__(self, port: int = 0, peak: bool = False) -> None:
        self.peak = peak
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.api = self
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

    def __enter__(self) -> PricingAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--peak", action="store_true", help="answer every request with a 429")
    args = parser.parse_args()
    api = PricingAPI(args.port, peak=args.peak)
    print(f"pricing API on {api.url} ({'peak' if args.peak else 'off peak'})")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        api.stop()


if __name__ == "__main__":
    main()
