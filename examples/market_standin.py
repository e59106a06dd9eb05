"""A small local stand-in for a market-data API shaped like the chart endpoint yfinance
reads (``GET /v8/finance/chart/<symbol>``): one day's closes per symbol, deterministic.

    python examples/market_standin.py --port 8767
"""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

from standin_server import JSONHandler, LocalServer

CLOSES = {
    "ACME": ("USD", [101.25, 99.80, 103.40]),
    "GLOBEX": ("EUR", [54.10, 55.35, 55.02]),
}


class _Handler(JSONHandler):
    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        symbol = path.rsplit("/", 1)[-1]
        if not path.startswith("/v8/finance/chart/") or symbol not in CLOSES:
            error = {"code": "Not Found", "description": f"No data found for {symbol}"}
            return self.send_json(404, {"chart": {"result": None, "error": error}})
        currency, closes = CLOSES[symbol]
        result = {
            "meta": {"symbol": symbol, "currency": currency, "regularMarketPrice": closes[-1]},
            "timestamp": [1767225600, 1767312000, 1767398400],
            "indicators": {"quote": [{"close": closes}]},
        }
        self.send_json(200, {"chart": {"result": [result], "error": None}})


class MarketAPI(LocalServer):
    """The market-data API on 127.0.0.1; ``url`` is its base URL."""

    handler = _Handler


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8767)
    port = parser.parse_args().port
    MarketAPI(port=port).serve_until_interrupted(f"market-data stand-in on 127.0.0.1:{port}")
