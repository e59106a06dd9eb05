"""A support agent with a time budget per question and retry code of its own.

The bug: when the provider asks it to wait longer than its budget allows, ``ask`` gives up by
returning None, and ``answer`` reads the reply from None. Every recorded run passes (the
provider never asked for a long wait); one ``rate_limit`` fault with ``retry_after=30``
shows it. ``ask_fixed`` says the assistant is busy instead.
"""

from __future__ import annotations

import time
from typing import Any

import openai

BUDGET = 10.0
"""Seconds the agent may spend on one question, retries included."""
MODEL = "gpt-4o-mini"


def ask(client: openai.OpenAI, question: str, budget: float = BUDGET) -> Any:
    """The model's reply, retrying a rate limit after the wait the provider asks for."""
    deadline = time.monotonic() + budget
    while True:
        try:
            return client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": question}]
            )
        except openai.RateLimitError as error:
            wait = float(error.response.headers.get("retry-after", "1"))
            if time.monotonic() + wait > deadline:
                return None  # the bug: the caller takes this for a reply
            time.sleep(wait)


def answer(client: openai.OpenAI, question: str, budget: float = BUDGET) -> str:
    reply = ask(client, question, budget)
    return str(reply.choices[0].message.content)


def answer_fixed(client: openai.OpenAI, question: str, budget: float = BUDGET) -> str:
    """The fix: past its budget the agent says so, and when to ask again."""
    deadline = time.monotonic() + budget
    while True:
        try:
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": question}]
            )
            return str(reply.choices[0].message.content)
        except openai.RateLimitError as error:
            wait = float(error.response.headers.get("retry-after", "1"))
            if time.monotonic() + wait > deadline:
                return f"The assistant is busy; please ask again in {wait:g} seconds."
            time.sleep(wait)
