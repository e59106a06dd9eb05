"""The fixed agent: the tool only ever sees the signed-in user's orders, and an answer that
names an order the user does not own is never passed on, whatever the model says."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
from tool_turn import ToolTurn

import agenttape
from order_lookup import shop
from order_lookup.agent import MODEL, SYSTEM, TOOLS

ORDER_NUMBER = re.compile(r"\b\d{4}\b")


@agenttape.boundary("lookup_order")
def lookup_order(product: str, user_id: str) -> dict[str, Any] | None:
    rows = shop.query(
        shop.DATABASE,
        "SELECT order_id, user_id, product, status, ship_to FROM orders "
        "WHERE product = ? AND user_id = ? ORDER BY placed_at DESC LIMIT 1",
        (product, user_id),
    )
    return rows[0] if rows else None


def answer(client: openai.OpenAI, user_id: str, question: str) -> str:
    turn = ToolTurn(client, MODEL, SYSTEM, question, TOOLS)
    if turn.direct is not None:
        return turn.direct
    found: list[dict[str, Any]] = []
    for call in turn.calls:
        # Whose orders to search comes from the sign-in, never from the model.
        result = lookup_order(**json.loads(call.function.arguments), user_id=user_id)
        if result is not None:
            found.append(result)
        turn.give(call, result)
    text = turn.answer()
    own = {str(order["order_id"]) for order in found}
    if set(ORDER_NUMBER.findall(text)) - own:
        return _from_records(found)
    return text


def _from_records(found: list[dict[str, Any]]) -> str:
    """The answer built from the user's own records, when the model's cannot be trusted."""
    if not found:
        return "I could not find an order of that product on your account."
    return " ".join(
        f"Your {o['product']} order {o['order_id']} is {o['status']} (to {o['ship_to']})."
        for o in found
    )
