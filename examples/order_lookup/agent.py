"""The support agent as it ran when it told a customer about someone else's order.

The model is offered one tool, ``lookup_order(product)``. The tool queries every user's orders
by product alone and returns the newest: Alice asks about her kettle and hears about Bob's.
"""

from __future__ import annotations

import json
from typing import Any

import openai

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
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, temperature=0, seed=7
    )
    choice = first.choices[0].message
    if not choice.tool_calls:
        return choice.content or ""
    messages.append(choice.model_dump(exclude_none=True))
    for call in choice.tool_calls:
        result = lookup_order(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, seed=7)
    return final.choices[0].message.content or ""
