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
import json

from standin_server import JSONHandler, LocalServer

PRICES = {
    "KTL-100": {"product": "kettle", "price": "89.90", "currency": "EUR"},
    "MUG-200": {"product": "mug", "price": "12.50", "currency": "EUR"},
    "TST-300": {"product": "toaster", "price": "54.00", "currency": "EUR"},
}
ERROR_BODY_LIMIT = 64
RETRY_AFTER = "30"


class _Handler(JSONHandler):
    def do_GET(self) -> None:
        sku = self.path.rsplit("/", 1)[-1]
        if not self.path.startswith("/v1/prices/") or sku not in PRICES:
            return self.send_body(404, json.dumps({"error": {"type": "not_found"}}).encode())
        if self.server.owner.peak:
            error = {
                "error": {
                    "type": "rate_limited",
                    "limit_per_minute": 120,
                    "message": f"Too many requests for {sku}; retry later.",
                }
            }
            body = json.dumps(error).encode()[:ERROR_BODY_LIMIT]
            return self.send_body(429, body, (("retry-after", RETRY_AFTER),))
        self.send_body(200, json.dumps({"sku": sku, **PRICES[sku]}).encode())


class PricingAPI(LocalServer):
    """The pricing API on 127.0.0.1; ``url`` is its base URL."""

    handler = _Handler

    def __init__(self, port: int = 0, peak: bool = False) -> None:
        self.peak = peak
        super().__init__(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--peak", action="store_true", help="answer every request with a 429")
    args = parser.parse_args()
    api = PricingAPI(args.port, peak=args.peak)
    api.serve_until_interrupted(f"pricing API on {api.url} ({'peak' if args.peak else 'off peak'})")


if __name__ == "__main__":
    main()
