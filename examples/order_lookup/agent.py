"""The support agent as it ran when it told a customer about someone else's order.

The model is offered one tool, ``lookup_order(product)``. The tool queries every user's orders
by product alone and returns the newest: Alice asks about her kettle and hears about Bob's.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from tool_turn import ToolTurn

import agenttape
from order_lookup import shop

MODEL = "gpt-4o-mini"
SYSTEM = "You are the shop's support agent. Use lookup_order to answer questions about orders."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find the customer's order of a product.",
            "parameters": {
                "type": "object",
                "properties": {"product": {"type": "string", "enum": shop.PRODUCTS}},
                "required": ["product"],
            },
        },
    }
]


@agenttape.boundary("lookup_order")
def lookup_order(product: str) -> dict[str, Any] | None:
    """The bug: nothing here knows who is asking."""
    rows = shop.query(
        shop.DATABASE,
        "SELECT order_id, user_id, product, status, ship_to FROM orders "
        "WHERE product = ? ORDER BY placed_at DESC LIMIT 1",
        (product,),
    )
    return rows[0] if rows else None


def answer(client: openai.OpenAI, user_id: str, question: str) -> str:
    """One support turn: the model picks the tool call, the tool runs, the model answers."""
    turn = ToolTurn(client, MODEL, SYSTEM, question, TOOLS)
    if turn.direct is not None:
        return turn.direct
    for call in turn.calls:
        turn.give(call, lookup_order(**json.loads(call.function.arguments)))
    return turn.answer()
