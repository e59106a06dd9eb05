"""The network guard (``block_network``): while a cassette that blocks the network is
active, an outbound connection or datagram that no adapter serves raises
``NetworkBlockedError``.

Adapters open their live connections inside ``runtime.enter_adapter`` (where no cassette is
active), so only traffic that bypasses every adapter reaches the check: a library without an
adapter, ``http.client``, a raw ``socket.create_connection``, a UDP ``sendto``. Host names
are remembered from ``getaddrinfo`` so the error names the host, not only the address it
resolved to. A Python child process inherits the guard (see ``children``): there no
cassette is active, and the guard it inherited decides.

While a cassette records, every connection the process opens is seen by one audit hook on
``socket.connect`` (``sys.addaudithook``; it catches the non-blocking connects of asyncio and
the ones made through ``_socket`` directly, which a patch of ``socket.socket`` misses). One
opened inside an adapter's exchange is that adapter's; any other is told to the cassette,
which names it when it stops. Audit hooks cannot be removed: the one hook is added the first
time a cassette becomes active and does nothing while none records.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import re
import socket as _socket
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from .._core import runtime
from .._core.blame import passed_through
from .._core.errors import NetworkBlockedError
from .._core.tape import Tape
from . import ledger

__tracebackhide__ = passed_through

_INET = (_socket.AF_INET, _socket.AF_INET6)
_names: OrderedDict[str, str] = OrderedDict()
_NAMES_KEPT = 1024


@dataclass(frozen=True)
class Guard:
    """The network guard a child process inherited: what its errors name, and who may pass.
    It replays nothing; every connection outside ``allowed_hosts`` is refused."""

    path: Path
    mode: str
    allowed_hosts: tuple[str, ...]
    block_network: bool = True


_inherited: Guard | None = None  # the guard a child process got from its parent


def inherit(guard: Guard) -> None:
    """Guards this process as ``guard`` says whenever no cassette of its own is active."""
    global _inherited
    _inherited = guard


def install(socket: ModuleType) -> list[ledger.Patch]:
    """The socket methods that reach out, guarded; the audit hook (which Python cannot
    remove, and which does nothing while no cassette records) is added once, with them."""
    socket_class = socket.socket
    return [
        ledger.wrap(socket_class, "connect", _guarded_connect),
        ledger.wrap(socket_class, "connect_ex", _guarded_connect_ex),
        ledger.wrap(socket_class, "sendto", _guarded_sendto),
        ledger.wrap(socket_class, "sendmsg", _guarded_sendmsg),
        ledger.Patch(socket, "getaddrinfo", _remembering_getaddrinfo, "module attribute"),
    ]


def _guarded_connect(connect: Any) -> Any:
    _watch_connections()

    def guarded_connect(self: Any, address: Any) -> None:
        _check(self, address)
        connect(self, address)

    return guarded_connect


def _guarded_connect_ex(connect_ex: Any) -> Any:
    def guarded_connect_ex(self: Any, address: Any) -> int:
        _check(self, address)
        result: int = connect_ex(self, address)
        return result

    return guarded_connect_ex


def _guarded_sendto(sendto: Any) -> Any:
    def guarded_sendto(self: Any, data: Any, *rest: Any) -> int:
        # sendto(data, address) or sendto(data, flags, address): a datagram needs no connect.
        if rest:
            _check(self, rest[-1], "a datagram")
        result: int = sendto(self, data, *rest)
        return result

    return guarded_sendto


def _guarded_sendmsg(sendmsg: Any) -> Any:
    def guarded_sendmsg(self: Any, buffers: Any, *rest: Any) -> int:
        if len(rest) >= 3 and rest[2] is not None:  # ancdata, flags, address
            _check(self, rest[2], "a datagram")
        result: int = sendmsg(self, buffers, *rest)
        return result

    return guarded_sendmsg


def _remembering_getaddrinfo(getaddrinfo: Any) -> Any:
    def remembering_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        results = getaddrinfo(host, *args, **kwargs)
        if isinstance(host, (str, bytes)):
            name = host.decode("idna") if isinstance(host, bytes) else host
            for *_ignored, sockaddr in results:
                _remember(str(sockaddr[0]), name)
        return results

    return remembering_getaddrinfo


def _remember(address: str, name: str) -> None:
    """The latest name resolved to ``address`` wins; an address literal clears the name."""
    if address == name:
        _names.pop(address, None)
        return
    _names[address] = name
    _names.move_to_end(address)
    while len(_names) > _NAMES_KEPT:
        _names.popitem(last=False)


REGEX_PREFIX = "re:"
"""An allow-list pattern that starts so is a regular expression, matched from the start of
the host (``re.match``, as pytest-recording reads its ``allowed_hosts``); no host name or
address starts so."""


def allowed(host: str, patterns: tuple[str, ...]) -> bool:
    """True when ``host`` (a name or an address) matches one of the allow-list patterns
    (exact names, addresses, globs such as ``*.internal``, or ``re:`` and a regular
    expression)."""
    host = host.lower().strip("[]")
    for pattern in patterns:
        if pattern.startswith(REGEX_PREFIX):
            if _regex(pattern[len(REGEX_PREFIX) :]).match(host):
                return True
        elif fnmatch.fnmatchcase(host, pattern.lower().strip("[]")):
            return True
    return False


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_watching = False


def watching() -> bool:
    """Whether the audit hook is in place (it stays for the life of the process)."""
    return _watching


def _watch_connections() -> None:
    """Adds the process's one audit hook (once: a hook stays for the life of the process)."""
    global _watching
    if not _watching:
        _watching = True
        sys.addaudithook(_audit)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Called for every audit event in the process: anything but ``socket.connect`` returns
    at once, and so does a connect while no cassette records."""
    if event != "socket.connect":
        return
    with contextlib.suppress(Exception):  # a hook that raised would fail the connect itself
        _account(*args)


def _account(sock: Any, address: Any) -> None:
    """A connection about to be opened (``socket.connect`` audit event) outside every
    adapter while a cassette records: the cassette is told (host, port, and the library whose
    code opened it, where the stack shows one). Adapters open their live connections inside
    ``runtime.enter_adapter``, where ``runtime.active()`` is None: those are accounted for."""
    tape = runtime.active()
    if tape is None or not tape.is_recording:
        return
    note = getattr(tape, "unaccounted", None)
    if note is None or sock.family not in _INET:
        return
    ip, port = str(address[0]), int(address[1])
    # Frames up: this function, the hook, then the code that called connect (a C function).
    note(_names.get(ip, ip), port, _library_of(sys._getframe(2)))


_PLUMBING = frozenset(("socket", "asyncio", "ssl", "selectors", "agenttape", "concurrent"))


def _library_of(frame: FrameType | None) -> str | None:
    """The first module up the stack that is not socket plumbing: the library that opened the
    connection (its top-level package)."""
    while frame is not None:
        name = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if name and name not in _PLUMBING and not name.startswith("_"):
            return name
        frame = frame.f_back
    return None


def _check(sock: Any, address: Any, what: str = "a connection") -> None:
    if sock.family not in _INET:
        return
    tape: Tape | Guard | None = runtime.active() or _inherited
    if tape is None or not tape.block_network:
        return
    ip, port = str(address[0]), address[1]
    name = _names.get(ip, ip)
    if allowed(ip, tape.allowed_hosts) or allowed(name, tape.allowed_hosts):
        return
    target = f"{name}:{port}" if name == ip else f"{name}:{port} ({ip})"
    where = "" if tape is not _inherited else " in the parent process"
    raise NetworkBlockedError(
        f"agenttape blocked {what} to {target}: cassette {tape.path}{where} "
        f"(mode {tape.mode!r}) blocks the network and no recorded interaction serves it "
        "(it comes from code agenttape does not intercept, a raw socket, or a child process). "
        f"Let it through with allowed_hosts=({name!r},), or pass block_network=False.",
        host=name,
        port=port,
        cassette_path=str(tape.path),
    )
