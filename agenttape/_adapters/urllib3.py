"""urllib3 2.x, and so requests and botocore: one ``HTTPConnectionPool._make_request`` call is
one wire exchange (each redirect hop and each urllib3 retry included).

The request is first rendered by a copy of the connection, with its own code, into memory,
which yields the exact bytes it would send and makes the replay-or-record decision possible
before any socket opens; a head rendered once serves later requests that differ only in their
target and in plain header values (``_HeadShape``), and a known head lets ``urlopen`` (or
requests' adapter) begin the exchange itself (``known_exchange``). Replay then asks that same
copy for its response, as ``_make_request`` would, over an in-memory socket holding the
recorded body: the head is handed to ``http.client`` as it would have parsed it (no second
send, no header parsing), and urllib3 wraps it and reads the body as live, so preloading,
streaming, decoding, chunked reads, cookies and retries happen as they did live. Recording
reads the body through a tee placed on the socket file right after the head.
"""

from __future__ import annotations

import contextlib
import http.client
import inspect
import io
import re
import socket
import sys
import threading
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from .._core import runtime
from .._core.exchange import (
    Schedule,
    continue_exchange,
    exchange,
    skip_retry_wait,
    unplayable,
)
from .._core.models import Failure, FailureKind, Headers, Interaction, Request, Response
from .._core.tape import Recording, Tape
from . import wire

R = TypeVar("R")

_PATCHED = "__agenttape_original__"
_PATCHED_URLOPEN = "__agenttape_original_urlopen__"

# An exchange begun in ``urlopen`` and handed down to its first ``_make_request``: the tape,
# and the interaction or recording (None once taken; later attempts begin their own).
_HANDED: ContextVar[tuple[Tape, Interaction | Recording | None] | None] = ContextVar(
    "agenttape_urllib3_handed", default=None
)

# urllib3 / http.client / builtin exception name -> library-neutral kind.
KIND_BY_EXCEPTION: dict[str, FailureKind] = {
    "NewConnectionError": "connect_error",
    "NameResolutionError": "connect_error",
    "ConnectionRefusedError": "connect_error",
    "SSLError": "connect_error",
    "ConnectTimeoutError": "connect_timeout",
    "ReadTimeoutError": "read_timeout",
    "TimeoutError": "write_timeout",
    "ProxyError": "proxy_error",
    "ProtocolError": "protocol_error",
    "RemoteDisconnected": "protocol_error",
    "BadStatusLine": "protocol_error",
    "LineTooLong": "protocol_error",
    "IncompleteRead": "protocol_error",
    "ConnectionResetError": "read_error",
    "ConnectionAbortedError": "read_error",
    "BrokenPipeError": "write_error",
    "LocationParseError": "unsupported_protocol",
    "URLSchemeUnknown": "unsupported_protocol",
}


def install(urllib3: ModuleType) -> None:
    if int(urllib3.__version__.split(".", 1)[0]) < 2:
        return  # the 1.x layout differs; left unpatched
    # Attributes, not imports: this runs under the adapters' lock, which never waits on an
    # import (the package has imported both modules by the time it is patched).
    pool_class = urllib3.connectionpool.HTTPConnectionPool
    if _PATCHED not in vars(pool_class):
        original = pool_class._make_request
        setattr(pool_class, _PATCHED, original)
        pool_class._make_request = _make_make_request(original, urllib3)
    if _PATCHED_URLOPEN not in vars(pool_class):
        original_urlopen = pool_class.urlopen
        setattr(pool_class, _PATCHED_URLOPEN, original_urlopen)
        pool_class.urlopen = _make_urlopen(original_urlopen, urllib3)
    retry_class = urllib3.util.retry.Retry
    if _PATCHED not in vars(retry_class):
        original_sleep = retry_class.sleep
        setattr(retry_class, _PATCHED, original_sleep)
        retry_class.sleep = _make_sleep(original_sleep)


def _make_sleep(original: Callable[..., None]) -> Callable[..., None]:
    def sleep(self: Any, response: Any = None) -> None:
        if skip_retry_wait():
            return
        original(self, response)

    return sleep


def _make_make_request(original: Callable[..., Any], urllib3: ModuleType) -> Callable[..., Any]:
    bind = _binder(inspect.signature(original))

    def _make_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        handed = _HANDED.get()
        if handed is not None:
            owner, plan = handed
            if plan is not None:
                _HANDED.set((owner, None))
            return _exchange(original, urllib3, owner, bind(self, *args, **kwargs), plan)
        tape = runtime.active()
        if tape is None:
            return original(self, *args, **kwargs)
        return _exchange(original, urllib3, tape, bind(self, *args, **kwargs))

    return _make_request


def _make_urlopen(original: Callable[..., Any], urllib3: ModuleType) -> Callable[..., Any]:
    """``urlopen`` begins the exchange itself when the head it will send is known
    (``known_exchange``); anything else goes down to ``_make_request`` as live."""
    bind = _binder(inspect.signature(original))

    def urlopen(self: Any, *args: Any, **kwargs: Any) -> Any:
        tape = runtime.active()
        if tape is None or _HANDED.get() is not None:
            return original(self, *args, **kwargs)
        arguments = bind(self, *args, **kwargs)
        known = known_head(urllib3, self, arguments)
        if known is None:
            return original(self, *args, **kwargs)
        return known_exchange(
            urllib3,
            tape,
            known,
            arguments,
            answer=_as_it_is,
            hand_down=lambda plan: handed_down(tape, plan, lambda: original(self, *args, **kwargs)),
        )

    return urlopen


def _as_it_is(response: Any) -> Any:
    return response


@dataclass(slots=True)
class KnownHead:
    """The head ``urlopen`` will send on ``pool`` for a request, known from an earlier render:
    its header pairs, a copy of the connection that rendered it, and the target. Made for
    every replayed request, as ``_Given`` and ``_Head`` are: not frozen, since a frozen
    dataclass takes three times as long to make."""

    pool: Any
    headers: tuple[tuple[str, str], ...]
    template: Any
    target: str


def known_head(urllib3: ModuleType, pool: Any, arguments: dict[str, Any]) -> KnownHead | None:
    """The head ``pool.urlopen(**arguments)`` would send, from an earlier render for the same
    pool, method, headers and body; None when unknown or when ``urlopen`` would do more than
    send it (a proxy, a closed pool, options of its own for the response)."""
    heads = _POOL_HEADS.get(pool)
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
        given = _Given.of(headers)
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
    if _AS_ENCODED(url) is None:
        url = urllib3.connectionpool._encode_target(url)
        if not _plain_target(url):
            return None
    return KnownHead(pool, found[0].head(given), found[1], url)


def known_exchange(
    urllib3: ModuleType,
    tape: Tape,
    known: KnownHead,
    arguments: dict[str, Any],
    *,
    answer: Callable[[Any], R],
    hand_down: Callable[[Interaction | Recording], R],
) -> R:
    """The exchange of ``pool.urlopen(**arguments)`` begun above urllib3, by whoever calls it
    (``urlopen`` itself, or requests' adapter): a replayed 2xx response that needs no pacing,
    holding, retry or redirect is built right here, as urllib3's ``getresponse()`` builds it
    for ``_make_request`` (urllib3's and ``http.client``'s own classes reading the body from
    memory), and given to ``answer``; anything else, and every recording, is handed down to
    ``_make_request`` through the caller's own call (``hand_down``, using ``handed_down``)."""
    pool, method = known.pool, arguments["method"]
    model = Request(method, _url(pool, known.target), known.headers, arguments.get("body") or b"")

    def replay(interaction: Interaction, schedule: Schedule) -> R:
        response = _whole_response(known.template, known.target, arguments, interaction, schedule)
        if response is None:
            return hand_down(interaction)
        retries = arguments.get("retries")
        if not isinstance(retries, urllib3.util.retry.Retry):
            retries = urllib3.util.retry.Retry.from_int(
                retries, redirect=arguments.get("redirect", True), default=pool.retries
            )
        if retries.is_retry(method, response.status, bool(response.headers.get("Retry-After"))):
            return hand_down(interaction)
        response.retries = retries
        response._pool = pool
        pool.num_requests += 1
        return answer(response)

    return exchange(tape, model, replay=replay, record=hand_down, failure_of=failure_of)


_PATCHED_SEND = "__agenttape_original_send__"


class KeptSteps:
    """Whether a class keeps ``base``'s own ``steps`` (the methods a client's ``send`` goes
    through on its way to urllib3): one overriding any of them is left to itself. Answered
    once per class."""

    def __init__(self, base: type, steps: tuple[str, ...]) -> None:
        self._base = base
        self._steps = steps
        self._kept: dict[type, bool] = {}

    def __call__(self, cls: type) -> bool:
        kept = self._kept.get(cls)
        if kept is None:
            base = self._base
            kept = all(getattr(cls, name) is getattr(base, name) for name in self._steps)
            self._kept[cls] = kept
        return kept


def send_installer(
    class_name: str,
    steps: tuple[str, ...],
    make: Callable[..., Callable[..., Any]],
    **taken: str,
) -> Callable[[ModuleType], None]:
    """The ``install`` of an adapter serving where a client's ``send`` is entered: it puts
    ``make(original send, kept steps, **taken)`` in place of ``send`` on the library module's
    ``class_name``, once, each of ``taken`` being the module attribute it names. A class
    without one of ``steps`` (another version of its library) is left as it is."""

    def install(module: ModuleType) -> None:
        base = getattr(module, class_name)
        if _PATCHED_SEND in vars(base) or not all(hasattr(base, name) for name in steps):
            return
        original = base.send
        setattr(base, _PATCHED_SEND, original)
        options = {name: getattr(module, attribute) for name, attribute in taken.items()}
        base.send = make(original, KeptSteps(base, steps), **options)

    return install


class _PoolsSeen:
    """For each client object above urllib3 (a requests adapter, a botocore session): the
    connection pool it used for a place (an origin, with whatever else chose the pool), as
    its pool manager still holds it — a later request to the same place can skip the
    lookup; one the manager has let go since is not used again."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[Any, dict[Any, tuple[Any, Any, Any]]] = (
            weakref.WeakKeyDictionary()
        )

    def find(self, client: Any, manager: Any, place: Any) -> Any:
        """The pool ``client`` used for ``place`` through ``manager``; None when unknown."""
        seen = self._by_client.get(client)
        if seen is None:
            return None
        try:
            found = seen.get(place)
        except TypeError:  # a place that cannot be a key
            return None
        if found is None or found[0] is not manager or manager.pools.get(found[1]) is not found[2]:
            return None
        return found[2]

    def learn(self, client: Any, manager: Any, place: Any, response: Any) -> None:
        """Keeps the pool ``response`` (urllib3's) came from, for ``place``."""
        pool = getattr(response, "_pool", None)
        if pool is None:
            return
        pools = manager.pools
        with pools.lock:
            held = getattr(pools, "_container", {})
            key = next((key for key, value in held.items() if value is pool), None)
        if key is None:
            return
        seen = self._by_client.get(client)
        if seen is None:
            seen = self._by_client.setdefault(client, {})
        with contextlib.suppress(TypeError):  # a place that cannot be a key
            seen[place] = (manager, key, pool)


def serve_at_send(
    tape: Tape,
    client: Any,
    manager: Any,
    place: Any,
    arguments_for: Callable[[Any], dict[str, Any] | None],
    send: Callable[[], R],
    answer: Callable[[Any], R],
) -> R:
    """A client's ``send`` (requests' adapter, botocore's session) served above urllib3: on
    the pool the client used for ``place`` before, with the head urllib3 would send known
    (``known_head``), the exchange begins right here (``known_exchange``) and ``answer``
    makes the client's response from urllib3's. A pool not seen yet is learnt from ``send``
    run as live (its response's ``raw``); a head not known goes through ``send`` as live.
    ``arguments_for(pool)`` are those ``send`` would pass to ``pool.urlopen`` (None: let
    ``send`` do it)."""
    pool = _POOLS_SEEN.find(client, manager, place)
    if pool is None:
        response = send()
        _POOLS_SEEN.learn(client, manager, place, getattr(response, "raw", None))
        return response
    arguments = arguments_for(pool)
    urllib3 = sys.modules["urllib3"]
    known = None if arguments is None else known_head(urllib3, pool, arguments)
    if arguments is None or known is None:
        return send()
    return known_exchange(
        urllib3,
        tape,
        known,
        arguments,
        answer=answer,
        hand_down=lambda plan: handed_down(tape, plan, send),
    )


# requests' adapters (by origin, verify and cert) and botocore's sessions (by origin).
_POOLS_SEEN = _PoolsSeen()


def origin_and_target(url: Any) -> tuple[str, str] | None:
    """``scheme://host[:port]`` and the target a client sends for ``url`` when no proxy
    applies (requests' ``path_url``, botocore's ``_path_url``); None for a URL where the two
    might not split so simply (credentials, a fragment, parameters, an empty query or path)."""
    if type(url) is not str:
        return None
    scheme_end = url.find("://")
    if scheme_end <= 0:
        return None
    cut = url.find("/", scheme_end + 3)
    if cut < 0:
        return None
    origin, target = url[:cut], url[cut:]
    if "@" in origin or "?" in origin or "#" in url or ";" in target or target.endswith("?"):
        return None
    return origin, target


def handed_down(tape: Tape, plan: Interaction | Recording, call: Callable[[], R]) -> R:
    """Runs ``call``, whose first ``_make_request`` serves ``plan`` (later attempts, such as
    retries, begin their own exchanges)."""
    token = _HANDED.set((tape, plan))
    try:
        return call()
    finally:
        _HANDED.reset(token)


def handing_down() -> bool:
    """Whether an exchange begun above is on its way to ``_make_request``."""
    return _HANDED.get() is not None


# A target urllib3's ``_encode_target`` leaves as it is: a path and a query of characters it
# never escapes, no percent sign (whose escapes it would rewrite in upper case), no fragment.
_AS_ENCODED = re.compile(
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
_POOL_HEADS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[_HeadShape, Any]]] = (
    weakref.WeakKeyDictionary()
)


def _whole_response(
    template: Any,
    target: str,
    arguments: dict[str, Any],
    interaction: Interaction,
    schedule: Schedule,
) -> Any:
    """urllib3's response to a replayed 2xx with nothing to pace, hold or fail, built as the
    connection's ``getresponse()`` builds it; None for any other."""
    response = interaction.response
    if (
        response is None
        or interaction.error is not None
        or response.truncated
        or not 200 <= response.status < 300
        or template.response_class is not http.client.HTTPResponse
    ):
        return None
    socket = _socket_for(interaction, schedule, head=False)
    if not isinstance(socket, _WholeSocket):
        return None
    head = _head_of(response, items=True)
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
    scratch = _sent_copy(template, options)
    scratch.sock = socket
    scratch.response_class = _parsed_response
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
            socket: _WholeSocket,
            recorded: Response,
            head: _Head,
            options: dict[str, Any],
        ) -> Any:
            method = options["method"]
            raw = http.client.HTTPResponse(socket, method=method)  # type: ignore[arg-type]
            _set_head(raw, recorded, head)
            extra: dict[str, Any] = {}
            if version_string:
                extra["version_string"] = getattr(template, "_http_vsn_str", "HTTP/?")
            if sock_shutdown:
                extra["sock_shutdown"] = socket.shutdown
            return response_class(
                body=raw,
                headers=header_dict(head.items),
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


def _binder(signature: inspect.Signature) -> Callable[..., dict[str, Any]]:
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


def _exchange(
    original: Callable[..., Any],
    urllib3: ModuleType,
    tape: Tape,
    arguments: dict[str, Any],
    plan: Interaction | Recording | None = None,
) -> Any:
    pool, conn = arguments["self"], arguments["conn"]
    keyed = _render_key(conn, arguments)
    known = _RENDERED.get(keyed[0]) if keyed is not None else None
    scratch: Any
    if keyed is None or known is None:
        scratch, raw = _render(conn, arguments)
        method, target, headers, body = wire.parse_request(raw)
        if keyed is not None:
            shape = _remember(keyed, scratch, arguments, headers, body)
            if shape is not None:
                _remember_for_pool(pool, conn, arguments, keyed[1], shape)
    else:
        # The same connection, method, header names (or headers) and body were rendered
        # before: the head takes this request's target and header values as they are.
        method, target = arguments["method"], arguments["url"]
        headers, body = known.head(keyed[1]), arguments.get("body") or b""
        scratch = _sent_copy(conn, arguments)
        _remember_for_pool(pool, conn, arguments, keyed[1], known)
    model = Request(method=method, url=_url(pool, target), headers=headers, body=body)

    def replay(interaction: Interaction, schedule: Schedule) -> Any:
        if interaction.response is None:
            schedule.wait(schedule.head)  # the error comes when it came live
            raise _exception_for(urllib3, interaction.error, pool, conn, arguments["url"])
        # A response class of its own reads the head from the socket: written out, it must be
        # HTTP/1.1 it can read back (the plain class is handed the head as recorded).
        if scratch.response_class is not http.client.HTTPResponse:
            problem = wire.unframeable(interaction.response)
            if problem:
                raise unplayable(tape, interaction, "urllib3", problem)
        return _replay(urllib3, pool, scratch, interaction, schedule, arguments)

    def record(recording: Recording) -> Any:
        if arguments.get("body") is not None:
            arguments["body"] = body  # an iterator or file was used up by the rendering
        arguments["chunked"] = wire.is_chunked(headers)
        undo = _hook_response(conn, recording, method)
        try:
            return original(**arguments)
        finally:
            undo()

    if plan is None:
        return exchange(tape, model, replay=replay, record=record, failure_of=failure_of)
    return continue_exchange(tape, plan, replay=replay, record=record, failure_of=failure_of)


# -- the request, rendered in memory ----------------------------------------------------


class _ReadableFd:
    """A descriptor that always polls readable: botocore waits on the socket for a
    ``100 Continue`` before sending a body, and must not wait on an in-memory one."""

    _lock = threading.Lock()
    _socket: socket.socket | None = None

    @classmethod
    def fileno(cls) -> int:
        with cls._lock:
            if cls._socket is None:
                ours, theirs = socket.socketpair()
                theirs.close()
                cls._socket = ours
            return cls._socket.fileno()


class _CaptureSocket:
    """Collects what a connection sends; answers an Expect header with ``100 Continue``."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def sendall(self, data: Any) -> None:
        self.sent += data

    def makefile(self, *args: Any, **kwargs: Any) -> io.BytesIO:
        return io.BytesIO(b"HTTP/1.1 100 Continue\r\n\r\n")

    def fileno(self) -> int:
        return _ReadableFd.fileno()

    def settimeout(self, timeout: float | None) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _fresh_copy(conn: Any, sock: Any) -> Any:
    """A shallow copy of ``conn`` in the idle state, talking to ``sock``; the pooled
    connection itself is never touched."""
    scratch = object.__new__(type(conn))
    scratch.__dict__.update(vars(conn))
    scratch.sock = sock
    scratch._buffer = []
    scratch._HTTPConnection__state = http.client._CS_IDLE  # type: ignore[attr-defined]
    scratch._HTTPConnection__response = None
    scratch._response_options = None
    if hasattr(scratch, "_expect_header_set"):
        scratch._expect_header_set = False
    return scratch


def _render(conn: Any, arguments: dict[str, Any]) -> tuple[Any, bytes]:
    """A copy of ``conn`` that has sent the request into memory (left waiting for its
    response, as after a real send), and the bytes it sent."""
    capture = _CaptureSocket()
    scratch = _fresh_copy(conn, capture)
    options = {
        name: arguments[name]
        for name in ("chunked", "preload_content", "decode_content", "enforce_content_length")
        if name in arguments
    }
    scratch.request(
        arguments["method"],
        arguments["url"],
        body=arguments.get("body"),
        headers=arguments.get("headers"),
        **options,
    )
    return scratch, bytes(capture.sent)


# The head urllib3 renders depends on the connection's class and address, the method, the
# headers and the body, never on a target in origin form: rendered once, it is reused for
# every target (the first render of each key checks that the copy left waiting for its
# response is the one ``_sent_copy`` makes). Header values that are plain text are sent as
# they are, each on its own line, in the order given: the head is then kept as a shape
# (what urllib3 adds before and after the given headers) and reused for any values.
_RENDERED: dict[tuple[Any, ...], _HeadShape] = {}
_RENDERED_MAX = 512
_RENDER_METHODS = (
    "request",
    "putrequest",
    "putheader",
    "endheaders",
    "send",
    "_send_output",
    "_send_request",
    "_validate_path",
    "_validate_host",
    "_encode_request",
    "host",
)
_plain_classes: dict[type, bool] = {}


def _renders_plainly(cls: type) -> bool:
    """Whether ``cls`` renders a request with urllib3's own code, or with botocore's, which
    renders as urllib3's but for waiting on a ``100 Continue`` when the request carries an
    ``Expect`` header (never reused: see ``_render_key``)."""
    plain = _plain_classes.get(cls)
    if plain is None:
        import urllib3.connection

        base = urllib3.connection.HTTPConnection
        botocore = getattr(sys.modules.get("botocore.awsrequest"), "AWSConnection", None)
        plain = issubclass(cls, base) and all(
            getattr(cls, name, None) is getattr(base, name, None)
            or (botocore is not None and getattr(cls, name, None) is getattr(botocore, name, None))
            for name in _RENDER_METHODS
        )
        _plain_classes[cls] = plain
    return plain


def _render_key(conn: Any, arguments: dict[str, Any]) -> tuple[tuple[Any, ...], _Given] | None:
    """What the rendered head depends on, and the given headers, or None when it cannot be
    reused: a target that is not a plain ASCII origin form, a body that is not bytes, a
    connection class of its own, headers that are not text."""
    url = arguments["url"]
    body = arguments.get("body")
    headers = arguments.get("headers")
    method = arguments["method"]
    if (
        type(url) is not str
        or not _plain_target(url)
        or (body is not None and type(body) is not bytes)
        or type(method) is not str
        or not _renders_plainly(type(conn))
    ):
        return None
    try:
        given = _Given.of(headers) if headers is not None else _NO_HEADERS
        if given.waits_for_continue:
            return None  # botocore's connections wait for a 100 Continue while rendering
        key = (
            type(conn),
            conn.host,
            conn.port,
            conn.default_port,
            conn._tunnel_host,
            conn._tunnel_port,
            conn._http_vsn_str,
            method,
            given.shape,
            None if body is None else len(body),
            bool(arguments.get("chunked")),
        )
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key, given


@dataclass(slots=True)
class _Given:
    """The headers a caller gave urllib3: ``shape`` is what the rendered head depends on —
    their names when every value is plain text (printable ASCII, as ``str`` or ``bytes``, no
    blank at either end, not urllib3's skip marker, and not a header whose value changes the
    framing), else the pairs themselves; ``sent`` are the pairs as the head carries them."""

    sent: tuple[tuple[str, str], ...]
    shape: tuple[Any, ...]
    plain: bool
    waits_for_continue: bool

    @staticmethod
    def of(headers: Any) -> _Given:
        pairs = tuple(headers.items())
        names = []
        sent = []
        plain = True
        waits = False
        for name, value in pairs:
            if type(name) is not str:
                plain = False
                waits = waits or (isinstance(name, bytes) and name.lower() == b"expect")
                continue
            lowered = name.lower()
            if lowered == "expect":
                waits = True
            if type(value) is bytes and value.isascii():
                value = value.decode("ascii")
            if (
                type(value) is not str
                or lowered in _SHAPED_BY_VALUE
                or not value.isascii()
                or not value.isprintable()
                or value.strip(" ") != value
                or value == _SKIP_HEADER
            ):
                plain = False
                continue
            names.append(name)
            sent.append((name, value))
        if not plain:
            return _Given((), pairs, False, waits)
        return _Given(tuple(sent), tuple(names), True, waits)


_NO_HEADERS = _Given((), (), True, False)
_SHAPED_BY_VALUE = frozenset(("transfer-encoding", "expect"))
_SKIP_HEADER = "@@@SKIP_HEADER@@@"  # urllib3.util.request.SKIP_HEADER: the header is left out


@dataclass(frozen=True, slots=True)
class _HeadShape:
    """A rendered head: what urllib3 sent before the given headers, after them, and whether
    the given ones go between (else ``before`` is the whole head, for these very headers)."""

    before: tuple[tuple[str, str], ...]
    after: tuple[tuple[str, str], ...]
    takes_given: bool

    def head(self, given: _Given) -> tuple[tuple[str, str], ...]:
        if not self.takes_given:
            return self.before
        if not given.sent:
            return self.before + self.after
        return self.before + given.sent + self.after

    @staticmethod
    def learn(headers: Headers, given: _Given) -> _HeadShape | None:
        """The shape of ``headers`` rendered for ``given``; None when the given pairs are not
        found in it exactly once, side by side, as given."""
        sent = tuple(headers)
        if not given.plain:
            return _HeadShape(sent, (), False)
        count = len(given.sent)
        if not count:
            return _HeadShape(sent, (), True)
        found = [
            start
            for start in range(len(sent) - count + 1)
            if sent[start : start + count] == given.sent
        ]
        if len(found) != 1:
            return None
        start = found[0]
        return _HeadShape(sent[:start], sent[start + count :], True)


def _sent_copy(conn: Any, arguments: dict[str, Any]) -> Any:
    """A copy of ``conn`` in the state its ``request()`` leaves it: sent, waiting for the
    response with the options urllib3 keeps for it."""
    import urllib3.connection

    scratch = _fresh_copy(conn, _CaptureSocket())
    method = arguments["method"]
    scratch._method = method
    scratch._HTTPConnection__state = http.client._CS_REQ_SENT  # type: ignore[attr-defined]
    scratch._response_options = urllib3.connection._ResponseOptions(
        request_method=method,
        request_url=arguments["url"],
        preload_content=arguments.get("preload_content", True),
        decode_content=arguments.get("decode_content", True),
        enforce_content_length=arguments.get("enforce_content_length", True),
    )
    return scratch


_SENT_STATE = (
    "_method",
    "_HTTPConnection__state",
    "_HTTPConnection__response",
    "_response_options",
)


def _remember(
    keyed: tuple[tuple[Any, ...], _Given],
    scratch: Any,
    arguments: dict[str, Any],
    headers: Headers,
    body: bytes,
) -> _HeadShape | None:
    """Keeps a rendered head's shape for reuse when the render took the target as it is,
    sent the body unframed, and left the copy as ``_sent_copy`` would; the shape when kept."""
    if body != (arguments.get("body") or b""):
        return None
    made = _sent_copy(arguments["conn"], arguments)
    if any(getattr(made, name, None) != getattr(scratch, name, None) for name in _SENT_STATE):
        return None
    shape = _HeadShape.learn(headers, keyed[1])
    if shape is None:
        return None
    if len(_RENDERED) >= _RENDERED_MAX:
        _RENDERED.clear()
    _RENDERED[keyed[0]] = shape
    return shape


def _remember_for_pool(
    pool: Any, conn: Any, arguments: dict[str, Any], given: _Given, shape: _HeadShape
) -> None:
    """Keeps the head's shape for ``urlopen`` too when every connection of the pool renders
    it alike: the pool's own connection class, no proxy, no tunnel."""
    if type(conn) is not getattr(pool, "ConnectionCls", None) or pool.proxy is not None:
        return
    if conn._tunnel_host is not None:
        return
    heads = _POOL_HEADS.get(pool)
    if heads is None:
        heads = _POOL_HEADS.setdefault(pool, {})
    body = arguments.get("body")
    key = (
        arguments["method"],
        given.shape,
        None if body is None else len(body),
        bool(arguments.get("chunked")),
    )
    if key in heads:
        return
    if len(heads) >= _RENDERED_MAX:
        heads.clear()
    heads[key] = (shape, _fresh_copy(conn, None))


def _plain_target(url: str) -> bool:
    """A target in origin form the head takes as it is."""
    return url.startswith("/") and url.isascii() and url.isprintable() and " " not in url


def _url(pool: Any, target: str) -> str:
    if "://" in target.split("?", 1)[0]:
        return target  # absolute form, sent to a forward proxy
    host = pool.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    default = 443 if pool.scheme == "https" else 80
    port = f":{pool.port}" if pool.port and pool.port != default else ""
    return f"{pool.scheme}://{host}{port}{target}"


# -- replay -----------------------------------------------------------------------------


class _ReplayRaw(io.RawIOBase):
    """The recorded response as a socket would deliver it: never more than one recorded
    piece per read, each piece at its recorded offset with ``realtime``, then EOF, the
    recorded transport error, or, for a body the client closed early, nothing until it is
    closed or the socket's timeout fires. ``head`` False leaves the head out: it is handed
    over parsed."""

    def __init__(self, interaction: Interaction, schedule: Schedule, head: bool) -> None:
        super().__init__()
        response = interaction.response
        assert response is not None
        error = interaction.error
        complete = error is None and not response.truncated
        pieces = wire.render_body(response, complete, schedule.waits(None))
        if head:
            pieces.insert(0, wire.render_head(response))
        self._pieces = pieces
        self._schedule = schedule
        # Where the body's pieces start: the head, when it is read from here, comes first.
        self._first_body = 1 if head else 0
        self._end = schedule.end
        self._index = 0
        self._position = 0
        self._error = error
        self.timeout: float | None = None

    def head_arrives(self) -> None:
        """Returns when the head, handed over parsed, arrived live (at once but with
        ``realtime``); raises the socket's timeout when the client gives up first."""
        self._wait(self._schedule.head)

    def _wait(self, due: float | None) -> None:
        if not self._schedule.wait(due, self.timeout):
            raise TimeoutError("timed out")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._index < len(self._pieces) and self._position >= len(self._pieces[self._index]):
            self._index += 1
            self._position = 0
        schedule = self._schedule
        if self._index >= len(self._pieces):
            schedule.turn(None)
            if schedule.held and not schedule.hold(self.timeout):
                raise TimeoutError("timed out")
            if self._end is not None:
                self._wait(self._end)
                self._end = None
            if self._error is not None and self._error.kind != "protocol_error":
                raise _socket_error(self._error)
            return 0
        if self._position == 0:
            body_index = self._index - self._first_body
            if schedule.paced:
                self._wait(schedule.head if body_index < 0 else schedule.chunk(body_index))
            if body_index >= 0:
                schedule.turn(body_index)
        piece = self._pieces[self._index]
        size = min(len(buffer), len(piece) - self._position)
        buffer[:size] = piece[self._position : self._position + size]
        self._position += size
        return size

    def close(self) -> None:
        self._schedule.release()
        super().close()


class _ReplaySocket:
    """What ``getresponse()`` reads from: the recorded response, nothing sent to it."""

    def __init__(self, interaction: Interaction, schedule: Schedule, head: bool) -> None:
        self.response = interaction.response
        self.source = _ReplayRaw(interaction, schedule, head)

    def head_arrives(self) -> None:
        self.source.head_arrives()

    def makefile(self, mode: str = "rb", buffering: int | None = None, **kwargs: Any) -> Any:
        if buffering == 0:
            return self.source
        return io.BufferedReader(self.source)

    def settimeout(self, timeout: float | None) -> None:
        self.source.timeout = timeout

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        pass


class _WholeSocket:
    """``_ReplaySocket`` for a response with nothing to pace, hold, fail or wait for another
    request: its body, in at most one piece, read from memory."""

    def __init__(self, interaction: Interaction, piece: bytes) -> None:
        self.response = interaction.response
        self._piece = piece

    def makefile(self, mode: str = "rb", buffering: int | None = None, **kwargs: Any) -> Any:
        return io.BytesIO(self._piece)

    def head_arrives(self) -> None:
        pass

    def settimeout(self, timeout: float | None) -> None:
        pass

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        pass


def _socket_for(interaction: Interaction, schedule: Schedule, head: bool) -> Any:
    response = interaction.response
    assert response is not None
    if (
        not head
        and not schedule.paced
        and not schedule.held
        and schedule.precedents is None
        and interaction.error is None
        and not response.truncated
    ):
        pieces = wire.render_body(response, True)
        if len(pieces) <= 1:
            return _WholeSocket(interaction, pieces[0] if pieces else b"")
    return _ReplaySocket(interaction, schedule, head)


def _replay(
    urllib3: ModuleType,
    pool: Any,
    scratch: Any,
    interaction: Interaction,
    schedule: Schedule,
    arguments: dict[str, Any],
) -> Any:
    """What ``_make_request`` returns, from the connection that rendered the request: its own
    ``getresponse()`` builds urllib3's response over the replay socket, with the read timeout
    ``_make_request`` gives it. With the plain ``http.client`` response class the head is
    handed over as recorded, not parsed again; any other class reads it from the socket as it
    would live."""
    timeout = urllib3.util.Timeout
    read_timeout = pool._get_timeout(arguments.get("timeout", timeout.DEFAULT_TIMEOUT)).read_timeout
    scratch.timeout = timeout.resolve_default_timeout(read_timeout)
    parsed = scratch.response_class is http.client.HTTPResponse
    scratch.sock = _socket_for(interaction, schedule, head=not parsed)
    if parsed:
        scratch.response_class = _parsed_response
    pool.num_requests += 1
    try:
        response = scratch.getresponse()
    except TimeoutError:
        # The head was due after the client gave up: urllib3's own read timeout, as live.
        message = f"Read timed out. (read timeout={scratch.timeout})"
        raise urllib3.exceptions.ReadTimeoutError(pool, arguments["url"], message) from None
    # As _make_request sets them, for the pool to take the connection back.
    response.retries = arguments.get("retries")
    response._connection = arguments.get("response_conn")
    response._pool = pool
    return response


# The header fields begin() looks at.
_HEAD_FIELDS = frozenset(
    ("transfer-encoding", "content-length", "connection", "keep-alive", "proxy-connection")
)


def _parsed_response(
    sock: _ReplaySocket | _WholeSocket, *args: Any, **kwargs: Any
) -> http.client.HTTPResponse:
    """An ``http.client`` response over the replay socket, its head set as ``begin()`` sets
    it from the same bytes, so ``begin()`` finds it read and returns."""
    response = http.client.HTTPResponse(sock, *args, **kwargs)  # type: ignore[arg-type]
    recorded = sock.response
    assert recorded is not None
    sock.head_arrives()
    _set_head(response, recorded, _head_of(recorded))
    return response


@dataclass(slots=True)
class _Head:
    """What ``begin()`` makes of a recorded head; ``items`` are urllib3's header pairs for
    it, when asked for (None when urllib3 must work them out itself: it would log a defect
    or rewrite the message)."""

    version: int
    reason: str
    chunked: bool
    length: int | None
    closes: bool
    items: tuple[tuple[str, str], ...] | None


def _head_of(recorded: Response, items: bool = False) -> _Head:
    # The email parser yields these very pairs for the rendered head: names as sent, values
    # without the blank after the colon; begin() reads a few of them, the first of each name.
    seen: dict[str, str] = {}
    for name, value in recorded.headers:
        key = name.lower()
        if key in _HEAD_FIELDS and key not in seen:
            seen[key] = value
    version = 10 if recorded.http_version == "HTTP/1.0" else 11
    encoding = seen.get("transfer-encoding")
    chunked = encoding is not None and encoding.lower() == "chunked"
    length: int | None = None
    content_length = seen.get("content-length")
    if content_length and not chunked:
        try:
            length = int(content_length)
        except ValueError:
            length = None
        if length is not None and length < 0:
            length = None
    return _Head(
        version,
        recorded.reason.strip(),
        chunked,
        length,
        _will_close(version, seen),
        _urllib3_items(recorded) if items else None,
    )


def _message(recorded: Response) -> http.client.HTTPMessage:
    message = http.client.HTTPMessage()
    message._headers = list(recorded.headers)  # type: ignore[attr-defined]
    return message


def _urllib3_items(recorded: Response) -> tuple[tuple[str, str], ...] | None:
    """The header pairs urllib3's ``getresponse()`` gives its response for this head; None
    when it would log a defect or rewrite the message."""
    headers = recorded.headers
    if not any("\n" in value or "\r" in value for _, value in headers):
        # A message made from pairs has no defects, and with no line break in a value there
        # is no folded line to normalise: urllib3 takes the pairs as they are.
        return tuple(headers)
    import urllib3.connection
    import urllib3.util.response

    message = _message(recorded)
    try:
        urllib3.util.response.assert_header_parsing(message)
    except Exception:
        return None
    normalize = getattr(urllib3.connection, "_normalize_header_values", None)
    items = normalize(message) if normalize is not None else message.items()
    if message._headers != list(recorded.headers):  # type: ignore[attr-defined]
        return None
    return tuple(items)


def _set_head(response: http.client.HTTPResponse, recorded: Response, head: _Head) -> None:
    status = recorded.status
    response.code = response.status = status  # type: ignore[attr-defined]
    response.reason = head.reason
    response.version = head.version
    response.headers = response.msg = _message(recorded)
    response.chunked = head.chunked
    if head.chunked:
        response.chunk_left = None
    length = head.length
    if status in (204, 304) or 100 <= status < 200 or response._method == "HEAD":  # type: ignore[attr-defined]
        length = 0
    response.length = length
    response.will_close = head.closes or (not head.chunked and length is None)


def _will_close(version: int, seen: dict[str, str]) -> bool:
    """``HTTPResponse._check_close()``: whether the server closes after this response."""
    connection = seen.get("connection", "").lower()
    if version == 11:
        return "close" in connection
    if seen.get("keep-alive") or "keep-alive" in connection:
        return False
    return "keep-alive" not in seen.get("proxy-connection", "").lower()


def _socket_error(error: Failure) -> OSError:
    if error.kind in ("read_timeout", "connect_timeout", "write_timeout"):
        return TimeoutError(error.message or "timed out")
    return ConnectionResetError(error.message or "connection reset by peer")


def _exception_for(
    urllib3: ModuleType, error: Failure | None, pool: Any, conn: Any, url: str
) -> Exception:
    """The exception ``_make_request`` raised live (by class name when it is one of urllib3's
    or the standard library's, else by kind), so urlopen's retry logic and the caller's
    ``except`` clauses see what they saw when recording."""
    assert error is not None
    exceptions = urllib3.exceptions
    message = error.message
    kind = KIND_BY_EXCEPTION.get(error.type, error.kind)
    if kind == "connect_error":
        return exceptions.NewConnectionError(conn, message)  # type: ignore[no-any-return]
    if kind == "connect_timeout":
        return exceptions.ConnectTimeoutError(conn, message)  # type: ignore[no-any-return]
    if kind in ("read_timeout", "pool_timeout"):
        return exceptions.ReadTimeoutError(pool, url, message)  # type: ignore[no-any-return]
    if kind == "write_timeout":
        return TimeoutError(message)
    if kind == "proxy_error":
        return exceptions.ProxyError(message, OSError(message))  # type: ignore[no-any-return]
    if kind == "protocol_error":
        if error.type == "ProtocolError":
            return exceptions.ProtocolError(message)  # type: ignore[no-any-return]
        return http.client.RemoteDisconnected(message)
    if kind == "read_error":
        return ConnectionResetError(message)
    if kind == "write_error":
        return BrokenPipeError(message)
    if kind == "unsupported_protocol":
        return exceptions.LocationParseError(message)  # type: ignore[no-any-return]
    return exceptions.ProtocolError(message)  # type: ignore[no-any-return]


# -- recording --------------------------------------------------------------------------


def failure_of(exc: BaseException) -> Failure | None:
    """The failure one of urllib3's (or the standard library's) exceptions stands for;
    None for an exception that is not about the exchange (an interrupt)."""
    if not isinstance(exc, Exception):
        return None
    name = type(exc).__name__
    kind = KIND_BY_EXCEPTION.get(name)
    if kind is None:
        kind = "read_error" if isinstance(exc, OSError) else "transport_error"
    message = getattr(exc, "_message", None)
    return Failure(kind, name, message if isinstance(message, str) else str(exc))


def _hook_response(conn: Any, recording: Recording, method: str) -> Callable[[], None]:
    """Taps the response ``conn.getresponse()`` builds, right after its head is parsed and
    before urllib3 reads (or preloads) the body; returns the undo."""
    had_own = "getresponse" in vars(conn)

    def getresponse(*args: Any, **kwargs: Any) -> Any:
        inner = conn.response_class
        conn.response_class = _tapping_factory(inner, recording, method)
        try:
            return type(conn).getresponse(conn, *args, **kwargs)
        finally:
            conn.response_class = inner

    conn.getresponse = getresponse

    def undo() -> None:
        if not had_own:
            vars(conn).pop("getresponse", None)

    return undo


def _tapping_factory(inner: Any, recording: Recording, method: str) -> Callable[..., Any]:
    def build(*args: Any, **kwargs: Any) -> Any:
        response = inner(*args, **kwargs)
        begin = response.begin

        def tapped_begin() -> None:
            begin()
            _tap(response, recording, method)

        response.begin = tapped_begin
        return response

    return build


def _tap(response: http.client.HTTPResponse, recording: Recording, method: str) -> None:
    version = {9: "HTTP/0.9", 10: "HTTP/1.0"}.get(response.version, "HTTP/1.1")
    message = response.msg
    raw_headers = getattr(message, "_headers", None) or message.items()
    headers = [(str(name), str(value)) for name, value in raw_headers]
    recording.respond(response.status, response.reason, version, headers)
    length = response.length
    decoder = wire.BodyDecoder(chunked=bool(response.chunked), length=length)
    if decoder.done or method == "HEAD":
        recording.finish()
        return
    response.fp = _TeeFile(response.fp, recording, decoder)  # type: ignore[assignment]


class _TeeFile:
    """The socket file under ``http.client``: every body byte read through it reaches the
    caller at once and the recording too, framing removed, one piece per read."""

    def __init__(self, fp: Any, recording: Recording, decoder: wire.BodyDecoder) -> None:
        self._fp = fp
        self._recording = recording
        self._decoder = decoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fp, name)

    def _saw(self, data: bytes, asked: bool) -> None:
        recording = self._recording
        if recording.finished:
            return
        decoder = self._decoder
        if data:
            recording.chunk(decoder.feed(data))
            if decoder.done:
                recording.finish()
        elif asked:
            if decoder.runs_to_eof:
                recording.finish()
            else:
                recording.fail_as(
                    "protocol_error",
                    "IncompleteRead",
                    "connection closed before the whole response body arrived",
                )

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._fp, name)(*args)
        except Exception as exc:
            failure = failure_of(exc)
            if failure is not None and not self._recording.finished:
                if isinstance(exc, TimeoutError):
                    failure = Failure("read_timeout", "ReadTimeoutError", failure.message)
                self._recording.fail(failure)
            raise

    def read(self, size: int | None = -1) -> bytes:
        data: bytes = self._call("read", size)
        self._saw(data, size != 0)
        if size is None or size < 0 or len(data) < size:
            self._saw(b"", True)  # a buffered read comes back short only at the end
        return data

    def read1(self, size: int = -1) -> bytes:
        data: bytes = self._call("read1", size)
        self._saw(data, size != 0)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data: bytes = self._call("readline", size)
        self._saw(data, size != 0)
        return data

    def readinto(self, buffer: Any) -> int:
        count: int = self._call("readinto", buffer)
        self._saw(bytes(memoryview(buffer)[:count]), len(buffer) > 0)
        return count

    def readinto1(self, buffer: Any) -> int:
        count: int = self._call("readinto1", buffer)
        self._saw(bytes(memoryview(buffer)[:count]), len(buffer) > 0)
        return count

    def close(self) -> None:
        try:
            self._fp.close()
        finally:
            self._recording.finish(truncated=True)
