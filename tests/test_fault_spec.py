"""The text form of a fault (``--fault``): what each part means, that it reads back what it
writes, and that a mistake is one clear error."""

from __future__ import annotations

import pytest

import agenttape
from agenttape._core.faults import FaultPlan
from agenttape._core.faults.spec import (
    FaultSpecError,
    fault_to_python,
    fault_to_text,
    parse_fault,
)
from agenttape._core.models import Request


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "POST api.openai.com/v1/chat/completions#2=rate_limit",
            agenttape.fault("rate_limit", on="POST api.openai.com/v1/chat/completions", nth=2),
        ),
        (
            "POST /v1/messages=overloaded:retry_after=30,times=1",
            agenttape.fault("overloaded", on="POST /v1/messages", retry_after=30, times=1),
        ),
        (
            "timeout:host=api.search.example,probability=0.2,seed=7,connect=true",
            agenttape.fault(
                "timeout", host="api.search.example", probability=0.2, seed=7, connect=True
            ),
        ),
        (
            "GET wss://api.openai.com/v1/realtime=close:after_frames=3,code=1011",
            agenttape.fault(
                "close", on="GET wss://api.openai.com/v1/realtime", after_frames=3, code=1011
            ),
        ),
        (
            "grpc_status:code=RESOURCE_EXHAUSTED,index=4",
            agenttape.fault("grpc_status", code="RESOURCE_EXHAUSTED", index=4),
        ),
        ("*#3=server_error", agenttape.fault("server_error", nth=3)),
        ("reset", agenttape.fault("reset")),
        (
            "POST 127.0.0.1:8080/v1/chat/completions=cut_stream:after_chunks=3,every=2",
            agenttape.fault(
                "cut_stream", on="POST 127.0.0.1:8080/v1/chat/completions", after_chunks=3, every=2
            ),
        ),
        # A query glob may hold '=': the kind is the word after the '=' that ends the pattern.
        (
            "GET api.example.com/search?q=*=status:status=418",
            agenttape.fault("status", on="GET api.example.com/search?q=*", status=418),
        ),
    ],
)
def test_each_part_of_the_text_means_what_the_python_call_says(
    text: str, expected: agenttape.Fault
) -> None:
    assert parse_fault(text) == expected
    assert parse_fault(f"  {text}  ") == expected


@pytest.mark.parametrize(
    "item",
    [
        agenttape.fault("rate_limit", on="POST /v1/chat/completions", nth=2, retry_after=3),
        agenttape.fault("timeout", host="api.search.example", probability=0.25, seed=7),
        agenttape.fault("timeout", connect=True, every=2, times=3),
        agenttape.fault("close", on="GET wss://h/p", after_frames=0, code=1011),
        agenttape.fault("server_error", index=0, status=503, provider="anthropic"),
        agenttape.fault("refused"),
    ],
)
def test_the_text_and_the_python_line_read_back_as_the_same_fault(item: agenttape.Fault) -> None:
    assert parse_fault(fault_to_text(item)) == item
    assert eval(fault_to_python(item), {"agenttape": agenttape}) == item


def test_a_parsed_nth_fires_on_that_request_only() -> None:
    plan = FaultPlan([parse_fault("POST api.example.com/v1/x#2=rate_limit")])
    request = Request("POST", "https://api.example.com/v1/x")
    other = Request("POST", "https://api.example.com/v1/y")
    picked = [plan.pick(r, None) for r in (request, other, request, request)]
    assert [item is not None for item in picked] == [False, False, True, False]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["empty fault", "[METHOD] PATTERN[#N]=KIND"]),
        ("POST /v1/chat/completions", ["names no kind", "rate_limit"]),
        ("POST /v1/x=ratelimit", ["'ratelimit' is not one", "rate_limit, overloaded"]),
        ("POST /v1/x#0=timeout", ["#N must be a whole number from 1", "'0'"]),
        ("POST /v1/x#two=timeout", ["#N must be a whole number from 1", "'two'"]),
        ("POST /v1/x=timeout:", ["nothing after ':'"]),
        ("POST /v1/x=timeout:connect", ["'connect' is not NAME=VALUE"]),
        ("POST /v1/x=rate_limit:after_chunks=3", ["has no option 'after_chunks'", "retry_after"]),
        ("POST /v1/x#2=timeout:nth=3", ["nth given twice"]),
        ("grpc_status", ["needs code="]),
        ("rate_limit:probability=2", ["between 0 and 1"]),
        ("a b c=reset", ["is not a request pattern"]),
        ("grpc_status:code=EXHAUSTED", ["not a gRPC status", "RESOURCE_EXHAUSTED"]),
        ("close:code=1006", ["not a close code a server sends"]),
    ],
)
def test_a_mistake_is_one_error_that_says_what_is_wrong(text: str, words: list[str]) -> None:
    with pytest.raises(FaultSpecError) as caught:
        parse_fault(text)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message
