"""The agent's market-data tool: the last close of a ticker over curl_cffi, impersonating a
browser as yfinance does, from a chart endpoint shaped like the one yfinance reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from curl_cffi import requests

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_quote",
        "description": "The last closing price of a stock ticker, and its change on the day.",
        "parameters": {
            "type": "object",
            "properties": {"symbol": {"type": "string", "description": "e.g. ACME"}},
            "required": ["symbol"],
        },
    },
}
"""The tool as an agent's model is told of it (OpenAI's function-calling schema)."""


@dataclass(frozen=True, slots=True)
class Quote:
    symbol: str
    currency: str
    close: float
    change: float

    def line(self) -> str:
        return f"{self.symbol}: {self.close:.2f} {self.currency} ({self.change:+.2%} on the day)"


class NoQuote(Exception):
    """The API had no data for the ticker."""


def get_quote(session: requests.Session, base_url: str, symbol: str) -> Quote:
    """One GET of the chart endpoint, read as yfinance reads it."""
    response = session.get(
        f"{base_url}/v8/finance/chart/{symbol}", params={"range": "5d", "interval": "1d"}
    )
    chart = response.json()["chart"]
    if response.status_code != 200 or not chart["result"]:
        raise NoQuote(chart["error"]["description"])
    result = chart["result"][0]
    closes = result["indicators"]["quote"][0]["close"]
    return Quote(symbol, result["meta"]["currency"], closes[-1], closes[-1] / closes[-2] - 1)


def answer(base_url: str, symbols: list[str]) -> list[str]:
    """What the tool hands the agent for each ticker it asked about."""
    lines = []
    with requests.Session(impersonate="chrome") as session:
        for symbol in symbols:
            try:
                lines.append(get_quote(session, base_url, symbol).line())
            except NoQuote as missing:
                lines.append(f"{symbol}: {missing}")
    return lines
