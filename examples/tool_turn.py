"""One tool-using chat turn, as the example agents take it: the model picks tool calls, each
result goes back to it as a message, and it answers from them."""

from __future__ import annotations

import json
from typing import Any

import openai


class ToolTurn:
    """Asks the model at once; ``direct`` is its answer when it called no tool, else the
    calls wait in ``calls`` for their results."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        system: str,
        question: str,
        tools: list[dict[str, Any]],
    ) -> None:
        self.client, self.model = client, model
        self.messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ]
        first = client.chat.completions.create(
            model=model, messages=self.messages, tools=tools, temperature=0, seed=7
        )
        choice = first.choices[0].message
        self.calls = list(choice.tool_calls or [])
        self.direct = None if self.calls else (choice.content or "")
        if self.calls:
            self.messages.append(choice.model_dump(exclude_none=True))

    def give(self, call: Any, result: Any) -> None:
        """The result of one tool call, for the model to read."""
        self.messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
        )

    def answer(self) -> str:
        final = self.client.chat.completions.create(
            model=self.model, messages=self.messages, temperature=0, seed=7
        )
        return final.choices[0].message.content or ""
