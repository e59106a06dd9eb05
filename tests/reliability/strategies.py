"""Hypothesis strategies for cassettes: well-formed ones to damage, and any msgpack value."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import strategies as st

from agenttape._core.models import Failure, Interaction, Request, Response
from agenttape._core.wire import codec

latin1 = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=12)
headers = st.lists(st.tuples(latin1, latin1), max_size=4)
urls = st.sampled_from(
    [
        "http://127.0.0.1:8080/v1/chat?b=2&a=1",
        "https://api.example.com/",
        "http://h:99999/port-out-of-range",
        "http://[::1/bad-ipv6",
        "",
    ]
) | st.text(max_size=30)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=10)
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)


@st.composite
def responses(draw: st.DrawFn) -> Response:
    body = draw(st.binary(max_size=48))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=3)))
    bounds = [0, *cuts, len(body)]
    return Response(
        status=draw(st.integers(100, 599)),
        reason=draw(latin1),
        http_version=draw(st.sampled_from(["HTTP/1.1", "HTTP/2", "HTTP/1.0"])),
        headers=draw(headers),
        body=body,
        chunks=[(bounds[i + 1] - bounds[i], i * 0.01) for i in range(len(bounds) - 1)],
        truncated=draw(st.booleans()),
    )


@st.composite
def interactions(draw: st.DrawFn) -> Interaction:
    request = Request(
        method=draw(st.sampled_from(["GET", "POST", "DELETE", "weird"])),
        url=draw(urls),
        headers=draw(headers),
        body=draw(st.binary(max_size=32) | st.sampled_from([b'{"a": [1, 2]}', b"[" * 5000])),
    )
    response = draw(st.none() | responses())
    error = draw(
        st.builds(Failure, kind=st.just("read_error"), type=st.just("ReadError"), message=latin1)
        if response is None
        else st.none()
    )
    return Interaction(request=request, response=response, error=error, started_at=1.5, ttfb=0.1)


@st.composite
def cassettes(draw: st.DrawFn) -> bytes:
    """The bytes of a well-formed cassette."""
    header = {
        "agenttape_version": "0.1.0",
        "tags": draw(st.dictionaries(st.text(max_size=6), values, max_size=3)),
    }
    return codec.encode(header, draw(st.lists(interactions(), max_size=4)))


def document_of(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, timestamp=3)
