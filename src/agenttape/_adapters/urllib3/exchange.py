"""One ``_make_request`` call, one wire exchange: the request rendered in memory, the tape's
decision, then the recorded response handed to urllib3 or the live one teed; and the paths
that begin that exchange higher up, where the head urllib3 would send is already known."""

from __future__ import annotations

import http.client
import inspect
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from ..._core.blame import passed_through
from ..._core.exchange import Live, Replay, begin, serving, unplayable
from ..._core.models import Interaction, Request, Response
from ..._core.tape import Tape
from .. import wire
from .record import failure_of, hook_response
from .render import (
    POOL_HEADS,
    RENDERED,
    Given,
    plain_target,
    remember,
    remember_for_pool,
    render_key,
    render_request,
    sent_copy,
    url_of,
)
from .replay import (
    Head,
    WholeSocket,
    exception_for,
    head_of,
    parsed_response,
    replay_response,
    set_head,
)

__tracebackhide__ = passed_through

R = TypeVar("R")


# An exchange begun in ``urlopen`` and handed down to its first ``_make_request``: the tape,
# and the interaction or recording (None once taken; later attempts begin their own).
HANDED: ContextVar[tuple[Tape, Replay | Live | None] | None] = ContextVar(
    "agenttape_urllib3_handed", default=None
)


def as_it_is(response: Any) -> Any:
    return response


@dataclass(slots=True)
class KnownHead:
    """The head ``urlopen`` will send on ``pool`` for a request, known from an earlier render:
    its header pairs, a copy of the connection that rendered it, and the target. Made for
    every replayed request, as ``Given`` and ``Head`` are: not frozen, since a frozen
    dataclass takes three times as long to make."""

    pool: Any
    headers: tuple[tuple[str, str], ...]
    template: Any
    target: str


def known_head(urllib3: ModuleType, pool: Any, arguments: dict[str, Any]) -> KnownHead | None:
    """The head ``pool.urlopen(**arguments)`` would send, from an earlier render for the same
    pool, method, headers and body; None when unknown or when ``urlopen`` would do more than
    send it (a proxy, a closed pool, options of its own for the response)."""
    heads = POOL_HEADS.get(pool)
    url = arguments["url"]
    if heads is None or pool.proxy is not None or pool.pool is None or type(url) is not str:
        return None
    if not url.startswith("/") or not _URLOPEN_SIMPLE.issuperset(arguments):
        return None
    passed_on = arguments.get("response_kw")
    if passed_on and not _RESPONSE_OPTIONS.issuperset(passed_on):
        return None
    body = arguments.get("body")
    if body is not None and type(body) is not bytes:
        return None
    headers = arguments.get("headers")
    if headers is None:
        headers = pool.headers
    try:
        given = Given.of(headers)
        key = (
            arguments["method"],
            given.shape,
            None if body is None else len(body),
            bool(arguments.get("chunked")),
        )
        found = heads.get(key)
    except (AttributeError, TypeError):
        return None
    if found is None:
        return None
    if AS_ENCODED(url) is None:
        url = urllib3.connectionpool._encode_target(url)
        if not plain_target(url):
            return None
    return KnownHead(pool, found[0].head(given), found[1], url)


def known_exchange(
    urllib3: ModuleType,
    tape: Tape,
    known: KnownHead,
    arguments: dict[str, Any],
    *,
    answer: Callable[[Any], R],
    hand_down: Callable[[Replay | Live], R],
) -> R:
    """The exchange of ``pool.urlopen(**arguments)`` begun above urllib3, by whoever calls it
    (``urlopen`` itself, or requests' adapter): a replayed 2xx response that needs no pacing,
    holding, retry or redirect is built right here, as urllib3's ``getresponse()`` builds it
    for ``_make_request`` (urllib3's and ``http.client``'s own classes reading the body from
    memory), and given to ``answer``; anything else, and every recording, is handed down to
    ``_make_request`` through the caller's own call (``hand_down``, using ``handed_down``)."""
    pool, method = known.pool, arguments["method"]
    model = Request(method, url_of(pool, known.target), known.headers, arguments.get("body") or b"")
    plan = begin(tape, model)
    response = None
    if isinstance(plan, Replay) and plan.body is not None:
        response = _whole_response(
            known.template, known.target, arguments, plan.interaction, plan.body
        )
    if response is None:
        with serving(tape, plan, failure_of):
            return hand_down(plan)
    retries = arguments.get("retries")
    if not isinstance(retries, urllib3.util.retry.Retry):
        retries = urllib3.util.retry.Retry.from_int(
            retries, redirect=arguments.get("redirect", True), default=pool.retries
        )
    status = response.status
    # Whether a Retry-After header came counts only for the statuses it is honoured on (a 2xx
    # served here never is): looked up then alone, as a missing header costs an exception.
    waits = status in retries.RETRY_AFTER_STATUS_CODES and bool(response.headers.get("Retry-After"))
    if retries.is_retry(method, status, waits):
        return hand_down(plan)
    response.retries = retries
    response._pool = pool
    pool.num_requests += 1
    return answer(response)


def handed_down(tape: Tape, plan: Replay | Live, call: Callable[[], R]) -> R:
    """Runs ``call``, whose first ``_make_request`` serves ``plan`` (later attempts, such as
    retries, begin their own exchanges)."""
    token = HANDED.set((tape, plan))
    try:
        return call()
    finally:
        HANDED.reset(token)


def handing_down() -> bool:
    """Whether an exchange begun above is on its way to ``_make_request``."""
    return HANDED.get() is not None


# A target urllib3's ``_encode_target`` leaves as it is: a path and a query of characters it
# never escapes, no percent sign (whose escapes it would rewrite in upper case), no fragment.
AS_ENCODED = re.compile(
    r"/[A-Za-z0-9._~!$&'()*+,;=:@/-]*(?:\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?"
).fullmatch


# The arguments of urlopen the fast path knows what to do with.
_URLOPEN_SIMPLE = frozenset(
    (
        "self",
        "method",
        "url",
        "body",
        "headers",
        "retries",
        "redirect",
        "assert_same_host",
        "timeout",
        "pool_timeout",
        "release_conn",
        "chunked",
        "body_pos",
        "preload_content",
        "decode_content",
        "response_kw",
    )
)


# What urlopen passes on to ``_make_request`` that the fast path also takes (botocore asks for
# the body's length to be enforced).
_RESPONSE_OPTIONS = frozenset(("enforce_content_length",))


def _whole_response(
    template: Any, target: str, arguments: dict[str, Any], interaction: Interaction, body: bytes
) -> Any:
    """urllib3's response to a replayed 2xx served at once (``Replay.body``, which is
    ``body``), built as the connection's ``getresponse()`` builds it; None for any other."""
    response = interaction.response
    if (
        response is None
        or response.truncated
        or not 200 <= response.status < 300
        or template.response_class is not http.client.HTTPResponse
    ):
        return None
    if wire.is_chunked(response.headers):  # the body as it arrives, framed
        pieces = wire.render_body(response, True)
        if len(pieces) > 1:
            return None
        body = pieces[0] if pieces else b""
    socket = WholeSocket(interaction, body)
    head = head_of(response, items=True)
    build = _direct_builder(type(template))
    options = {
        "method": arguments["method"],
        "url": target,
        "preload_content": arguments.get("preload_content", True),
        "decode_content": arguments.get("decode_content", True),
        "enforce_content_length": (arguments.get("response_kw") or {}).get(
            "enforce_content_length", True
        ),
    }
    if head.items is not None and build is not None and not template.debuglevel:
        return build(template, socket, response, head, options)
    scratch = sent_copy(template, options)
    scratch.sock = socket
    scratch.response_class = parsed_response
    return scratch.getresponse()


_BUILDERS: dict[type, Callable[..., Any] | None] = {}


def _direct_builder(cls: type) -> Callable[..., Any] | None:
    """For a connection class that takes urllib3's own ``getresponse()``: a maker of what
    it returns for a recorded head (the ``http.client`` response, urllib3's header pairs
    and urllib3's response over it, with the arguments ``getresponse()`` passes in this
    urllib3 version), without the connection state it goes through. None for a class of
    its own."""
    if cls in _BUILDERS:
        return _BUILDERS[cls]
    import urllib3.connection
    import urllib3.response

    build: Callable[..., Any] | None = None
    if cls.getresponse is urllib3.connection.HTTPConnection.getresponse:  # type: ignore[attr-defined]
        response_class = urllib3.response.HTTPResponse
        header_dict = urllib3.HTTPHeaderDict
        takes = inspect.signature(response_class).parameters
        version_string = "version_string" in takes
        sock_shutdown = "sock_shutdown" in takes

        def build(
            template: Any,
            socket: WholeSocket,
            recorded: Response,
            head: Head,
            options: dict[str, Any],
        ) -> Any:
            method = options["method"]
            raw = http.client.HTTPResponse(socket, method=method)  # type: ignore[arg-type]
            set_head(raw, recorded, head)
            extra: dict[str, Any] = {}
            if version_string:
                extra["version_string"] = getattr(template, "_http_vsn_str", "HTTP/?")
            if sock_shutdown:
                extra["sock_shutdown"] = socket.shutdown
            # What ``HTTPHeaderDict(items)`` does, pair by pair (``add``), without the type
            # checks its ``extend`` makes first, which cost more than the pairs themselves.
            items = head.items
            assert items is not None
            headers = header_dict()
            add = headers.add
            for name, value in items:
                add(name, value)
            return response_class(
                body=raw,
                headers=headers,
                status=raw.status,
                version=raw.version,
                reason=raw.reason,
                preload_content=options["preload_content"],
                decode_content=options["decode_content"],
                original_response=raw,
                enforce_content_length=options["enforce_content_length"],
                request_method=method,
                request_url=options["url"],
                **extra,
            )

    _BUILDERS[cls] = build
    return build


def binder(signature: inspect.Signature) -> Callable[..., dict[str, Any]]:
    """``signature.bind(...).arguments`` at a fraction of its cost for the calls urllib3
    makes; any other call goes through ``bind`` and its checks."""
    parameters = [
        p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    names = tuple(p.name for p in parameters)
    known = frozenset(names)
    required = frozenset(p.name for p in parameters if p.default is inspect.Parameter.empty)
    # A trailing ``**kwargs`` (urlopen's) takes only names the others do not: a call that
    # passes none of those binds as if it were absent.
    simple = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)

    def bind(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if simple and len(args) <= len(names) and known.issuperset(kwargs):
            arguments = dict(zip(names[: len(args)], args, strict=True))
            if arguments.keys().isdisjoint(kwargs):
                arguments.update(kwargs)
                if required.issubset(arguments):
                    return arguments
        return signature.bind(*args, **kwargs).arguments

    return bind


def serve_make_request(
    original: Callable[..., Any],
    urllib3: ModuleType,
    tape: Tape,
    arguments: dict[str, Any],
    plan: Replay | Live | None = None,
) -> Any:
    pool, conn = arguments["self"], arguments["conn"]
    keyed = render_key(conn, arguments)
    known = RENDERED.get(keyed[0]) if keyed is not None else None
    scratch: Any
    if keyed is None or known is None:
        scratch, raw = render_request(conn, arguments)
        method, target, headers, body = wire.parse_request(raw)
        if keyed is not None:
            shape = remember(keyed, scratch, arguments, headers, body)
            if shape is not None:
                remember_for_pool(pool, conn, arguments, keyed[1], shape)
    else:
        # The same connection, method, header names (or headers) and body were rendered
        # before: the head takes this request's target and header values as they are.
        method, target = arguments["method"], arguments["url"]
        headers, body = known.head(keyed[1]), arguments.get("body") or b""
        scratch = sent_copy(conn, arguments)
        remember_for_pool(pool, conn, arguments, keyed[1], known)
    model = Request(method=method, url=url_of(pool, target), headers=headers, body=body)

    if plan is None:
        plan = begin(tape, model)
    with serving(tape, plan, failure_of):
        if isinstance(plan, Live):
            if arguments.get("body") is not None:
                arguments["body"] = body  # an iterator or file was used up by the rendering
            arguments["chunked"] = wire.is_chunked(headers)
            undo = hook_response(conn, plan.recording, method)
            try:
                return original(**arguments)
            finally:
                undo()
        interaction, schedule = plan.interaction, plan.playback
        if interaction.response is None:
            schedule.wait(schedule.head)  # the error comes when it came live
            raise exception_for(urllib3, interaction.error, pool, conn, arguments["url"])
        # A response class of its own reads the head from the socket: written out, it must be
        # HTTP/1.1 it can read back (the plain class is handed the head as recorded).
        if scratch.response_class is not http.client.HTTPResponse:
            problem = wire.unframeable(interaction.response)
            if problem:
                raise unplayable(tape, interaction, "urllib3", problem)
        return replay_response(urllib3, pool, scratch, interaction, schedule, arguments)
