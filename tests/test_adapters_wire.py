"""Transfer framing taken off while recording and put back for replay, whatever the reads."""

from __future__ import annotations

import itertools
import re

from hypothesis import given
from hypothesis import strategies as st

from agenttape import Response
from agenttape._adapters import wire

pieces_strategy = st.lists(st.binary(min_size=1, max_size=40), max_size=8)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@given(pieces_strategy, st.lists(st.integers(min_value=0), max_size=12))
def test_chunked_body_round_trips_through_any_reads(pieces: list[bytes], cuts: list[int]) -> None:
    response = Response(
        status=200,
        headers=[("Transfer-Encoding", "chunked")],
        body=b"".join(pieces),
        chunks=[(len(p), 0.0) for p in pieces],
    )
    raw = wire.render_head(response) + b"".join(wire.render_body(response, complete=True))
    parser = wire.ResponseParser()
    body = b"".join(parser.feed(read) for read in split(raw, cuts))
    assert body == response.body
    assert parser.head == (200, "", "HTTP/1.1", [("Transfer-Encoding", "chunked")])
    assert parser.body is not None and parser.body.done


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=12))
def test_length_delimited_body_stops_at_its_length(body: bytes, cuts: list[int]) -> None:
    head = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\nretry-after: 7\r\n\r\n" % len(
        body
    )
    parser = wire.ResponseParser()
    got = b"".join(parser.feed(read) for read in split(head + body, cuts))
    assert got == body
    assert parser.head is not None and parser.head[0] == 429
    assert parser.head[3] == [("Content-Length", str(len(body))), ("retry-after", "7")]
    assert parser.body is not None and parser.body.done


def test_interim_responses_are_skipped_and_head_requests_have_no_body() -> None:
    parser = wire.ResponseParser(head_only=True)
    assert (
        parser.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        == b""
    )
    assert parser.head is not None and parser.head[0] == 200
    assert parser.body is not None and parser.body.done


def test_a_request_with_a_chunked_body_is_read_whole() -> None:
    raw = b"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    assert wire.parse_request(raw) == (
        "POST",
        "/up",
        [("Host", "h"), ("Transfer-Encoding", "chunked")],
        b"abcde",
    )


@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(["Content-Type", "X-Id", "", "Bad Name", "Bad:Name", "Ünï", "a\r"])
            | st.text(alphabet="!#$%&'*+-.^_`|~0aZ :\r\n\x00é", max_size=5),
            st.sampled_from(["text/plain", "", "a\r\nb", "x\x00", "é"])
            | st.text(alphabet="ab \r\n\x00\t", max_size=4),
        ),
        max_size=4,
    ),
    reason=st.sampled_from(["OK", "", "O\nK"]),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.0\r", "HTTP/2", "HTTP/2\n"]),
)
def test_a_head_is_unframeable_exactly_when_one_of_its_parts_is(
    headers: list[tuple[str, str]], reason: str, version: str
) -> None:
    """The head is checked whole first; it must say what the check of each part says, and
    ``render_whole`` (which checks the text it renders) refuse exactly those heads."""
    response = Response(status=200, headers=headers, reason=reason, http_version=version)
    token = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
    bad = [n for n, v in headers if not token.fullmatch(n) or re.search("[\r\n\x00]", v)]
    bad += [t for t in (reason, version) if re.search("[\r\n\x00]", t)]
    problem = wire.unframeable(response)
    assert (problem is None) == (not bad)
    assert (wire.render_whole(response, "GET") is None) == bool(bad)


@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(
                ["Content-Length", "content-length", "Transfer-Encoding", "X-Id", "Content-Type"]
            ),
            st.sampled_from(["chunked", "gzip, chunked", "CHUNKED ", "identity", "12", "a: b"]),
        ),
        max_size=5,
    ),
    body=st.binary(max_size=40),
    status=st.sampled_from([200, 204, 304, 101, 404]),
    method=st.sampled_from(["GET", "HEAD", "POST"]),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2"]),
)
def test_a_response_in_one_read_is_its_head_and_pieces_rendered_apart(
    headers: list[tuple[str, str]], body: bytes, status: int, method: str, version: str
) -> None:
    """``render_whole``, for a body of at most one piece, says what the head, the pieces and
    ``runs_to_eof`` say; ``render_head`` writes each pair on its line as given."""
    response = Response(
        status=status, reason="Why", http_version=version, headers=headers, body=body
    )
    assert wire.render_whole(response, method) == (
        wire.render_head(response) + b"".join(wire.render_body(response, complete=True)),
        wire.runs_to_eof(response, method),
    )
    line = "HTTP/1.1" if version == "HTTP/2" else version
    lines = [f"{line} {status} Why", *(f"{name}: {value}" for name, value in headers), "", ""]
    assert wire.render_head(response) == "\r\n".join(lines).encode("latin-1")
