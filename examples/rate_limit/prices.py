"""The agent's price tool: one GET to the pricing API over ``requests``, and its parser.

``parse_price`` is the parser as it shipped. It never looks at the status, and a body that is
not JSON is taken for the API's old plain-text format (``89.90 EUR``), whose first number is
the price. At peak the API answers 429 with half a JSON error document, and the first number
in it is the rate limit: 120. ``parse_price_fixed`` is the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal

import requests

NUMBER = re.compile(r"\d+(?:\.\d+)?")
Parser = Callable[[requests.Response], Decimal]


class PriceUnavailable(Exception):
    """The pricing API gave no price (it is busy, or answered something unreadable)."""

    def __init__(self, sku: str, status: int, retry_after: str | None) -> None:
        super().__init__(f"no price for {sku}: HTTP {status}, retry after {retry_after} s")
        self.sku, self.status, self.retry_after = sku, status, retry_after


def parse_price(response: requests.Response) -> Decimal:
    """As shipped: whatever came back is read as a price."""
    try:
        return Decimal(str(json.loads(response.content)["price"]))
    except ValueError:
        found = NUMBER.search(response.content.decode("utf-8", "replace"))
        if found is None:
            raise
        return Decimal(found.group())


def parse_price_fixed(response: requests.Response) -> Decimal:
    """Only a 200 with a whole JSON document holds a price; anything else is no price."""
    sku = response.url.rsplit("/", 1)[-1]
    if response.status_code != 200:
        raise PriceUnavailable(sku, response.status_code, response.headers.get("retry-after"))
    try:
        return Decimal(str(response.json()["price"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise PriceUnavailable(sku, response.status_code, None) from exc


def fetch_price(base_url: str, sku: str, parse: Parser = parse_price) -> dict[str, str]:
    """The tool the model calls."""
    response = requests.get(f"{base_url}/v1/prices/{sku}", timeout=10)
    return {"sku": sku, "price": f"EUR {parse(response):.2f}"}
