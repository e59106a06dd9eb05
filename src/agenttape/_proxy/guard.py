"""What the recording proxy refuses before anything is forwarded, recorded or replayed: requests
whose framing two parsers could read differently (request smuggling), and requests that did not
come from a program on this machine talking to the proxy on purpose (a web page reaching
127.0.0.1 through DNS rebinding, or by addressing it directly).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from .._core.models import Headers

# What a browser adds to a request a web page made; ``none`` is a user typing the address.
_PAGE_SITES = frozenset({"cross-site", "same-site", "same-origin"})


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]").split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def framing_problem(headers: Headers) -> str | None:
    """Why the request's body framing is ambiguous, or None when one reading is possible.

    ``Content-Length`` together with ``Transfer-Encoding``, several of either, a length that is
    not plain digits, or a transfer coding other than ``chunked``: a server behind the proxy
    may read such a request differently from the proxy (as two requests, say)."""
    lengths = [value for name, value in headers if name.lower() == "content-length"]
    codings = [value for name, value in headers if name.lower() == "transfer-encoding"]
    if lengths and codings:
        return "both Content-Length and Transfer-Encoding"
    if len(lengths) > 1:
        return "more than one Content-Length"
    if len(codings) > 1:
        return "more than one Transfer-Encoding"
    if lengths and not (lengths[0].isascii() and lengths[0].isdigit()):
        return f"Content-Length {lengths[0]!r} is not a number"
    if codings and codings[0].strip().lower() != "chunked":
        return f"Transfer-Encoding {codings[0]!r} is not 'chunked'"
    return None


def host_of(authority: str) -> str:
    """The host of a ``Host`` header or ``:authority`` (``[::1]:80`` → ``::1``)."""
    try:
        return urlsplit(f"//{authority.strip()}").hostname or ""
    except ValueError:
        return ""


def foreign_host(authority: str | None) -> str | None:
    """Why a request addressed to the proxy by ``authority`` (its ``Host``) is refused, or None
    when it names this machine: a name that resolves to 127.0.0.1 only because a web page's DNS
    says so (rebinding) is not this machine's name."""
    if authority is None:
        return "no Host header"
    host = host_of(authority).lower()
    if host == "localhost" or host.endswith(".localhost") or is_loopback(host):
        return None
    return f"Host {authority!r} is not this machine (127.0.0.1, ::1 or localhost)"


def from_web_page(headers: Headers) -> str | None:
    """Why the request is a web page's (a browser marks those with ``Sec-Fetch-Site``), or
    None: no program the proxy serves sends it."""
    for name, value in headers:
        if name.lower() == "sec-fetch-site" and value.strip().lower() in _PAGE_SITES:
            return f"a web page's request (Sec-Fetch-Site: {value.strip()})"
    return None
