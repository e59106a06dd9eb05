"""The shop assistant: the model picks the price tool, the tool asks the pricing API, the model
answers from what the tool returned. The code knows nothing about agenttape."""

from __future__ import annotations

import json

import anthropic
import openai
from tool_turn import ToolTurn

from rate_limit import prices

MODEL = "gpt-4o-mini"
SYSTEM = "You are the shop's assistant. Use get_price to answer questions about prices."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_price",
            "description": "The current price of a product, by SKU.",
            "parameters": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "enum": ["KTL-100", "MUG-200", "TST-300"]}
                },
                "required": ["sku"],
            },
        },
    }
]


def answer(
    client: openai.OpenAI, prices_url: str, question: str, parse: prices.Parser = prices.parse_price
) -> str:
    """One turn. A price the tool cannot get is said so, without asking the model again."""
    turn = ToolTurn(client, MODEL, SYSTEM, question, TOOLS)
    if turn.direct is not None:
        return turn.direct
    for call in turn.calls:
        sku = json.loads(call.function.arguments)["sku"]
        try:
            result = prices.fetch_price(prices_url, sku, parse)
        except prices.PriceUnavailable as exc:
            return (
                f"I can't get the price of {sku} right now: the pricing service is busy. "
                f"Please ask again in {exc.retry_after or 'a few'} seconds."
            )
        turn.give(call, result)
    return turn.answer()


def ask_claude(client: anthropic.Anthropic, question: str) -> str:
    """The same question to Claude; the SDK retries a 429 itself, waiting what retry-after says."""
    message = client.messages.create(
        model="claude-sonnet-4-6", max_tokens=200, messages=[{"role": "user", "content": question}]
    )
    return "".join(block.text for block in message.content if block.type == "text")
