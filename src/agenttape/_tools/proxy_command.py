"""``agenttape proxy`` and the proxy ``agenttape run`` starts for the programs it cannot patch.

The proxy runs in a thread of the agenttape process, serving one cassette. A program is
pointed at it through its environment (``environment``): the proxy variables, the variables
that make it trust the agenttape CA, and for Node, whose built-in ``fetch`` ignores proxy
variables before Node 24 unless told, ``NODE_USE_ENV_PROXY=1`` and a small preload that routes
``fetch`` through the proxy on older versions.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .._adapters.libcurl import RUN_USER_PROXIES
from .._core.cassette import Cassette
from .._core.errors import AgentTapeError, UnmatchedInteractionError
from .._core.faults import Fault
from .._core.text import counted

if TYPE_CHECKING:
    from .._proxy.ca import CertificateAuthority
    from .._proxy.listener import ProxyServer
    from .._proxy.upstream import Origin

USER_PROXIES_VARIABLE = RUN_USER_PROXIES
"""The proxy settings the user had (``urllib.request.getproxies()``, as JSON) before
``agenttape run`` pointed the command at the recording proxy: Python processes, recorded
in-process, keep using those (a corporate proxy, ``NO_PROXY``) instead of the recording
proxy."""
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")
BUNDLE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
NODE_PRELOAD = Path(__file__).resolve().parent.parent / "_bootstrap" / "node_proxy.cjs"


def available() -> bool:
    """Whether the proxy's extra (``agenttape-recorder[proxy]``) is installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("cryptography", "h11"))


def certificate_authority() -> CertificateAuthority:
    from .._proxy.ca import (
        CertificateAuthority,
        ProxyUnavailableError,
        UnsafeCAError,
        config_directory,
    )

    if not available():
        raise AgentTapeError(
            "the recording proxy needs the 'proxy' extra: pip install 'agenttape-recorder[proxy]'"
        )
    alpn = ("h2", "http/1.1") if importlib.util.find_spec("h2") is not None else ("http/1.1",)
    try:
        return CertificateAuthority(config_directory(), alpn=alpn)
    except (ProxyUnavailableError, UnsafeCAError) as exc:
        raise AgentTapeError(str(exc)) from None
    except OSError as exc:
        raise AgentTapeError(
            f"cannot create the proxy's CA in {config_directory()}: {exc.strerror or exc} "
            "(set AGENTTAPE_CONFIG_DIR to a writable directory)"
        ) from None


def parse_routes(routes: Iterable[str]) -> dict[Origin, Origin]:
    """``FROM=TO`` pairs of origins (``https://api.openai.com=http://127.0.0.1:8765``)."""
    from .._proxy.upstream import origin_of

    parsed = {}
    for route in routes:
        source, equals, target = route.partition("=")
        if not equals:
            raise ValueError(f"--route {route!r} is not FROM=TO")
        parsed[origin_of(source.strip())] = origin_of(target.strip())
    return parsed


class Proxy:
    """The recording proxy serving ``cassette`` (already started) from a thread."""

    def __init__(
        self,
        cassette: Cassette,
        *,
        port: int = 0,
        upstream: str | None = None,
        routes: dict[Origin, Origin] | None = None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        from .._proxy.adapter import ProxyAdapter
        from .._proxy.listener import ProxyServer

        self.cassette = cassette
        self.ca = certificate_authority()
        self.adapter = ProxyAdapter(cassette, log)
        try:
            self.server: ProxyServer = ProxyServer(
                self.adapter,
                self.ca,
                port=port,
                upstream=upstream,
                routes=routes,
                log=log,
                live=cassette.is_recording,
            )
        except OSError as exc:
            raise AgentTapeError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}"
            ) from None
        self.server.start()
        self.url = self.server.url
        # The adapter's and the server's own lists, which they add to while serving.
        self.misses: list[UnmatchedInteractionError] = self.adapter.misses
        self.distrusted: list[tuple[str, str]] = self.server.distrusted

    def close(self) -> None:
        """Stops serving, then closes the cassette: what was recorded is saved."""
        self.server.stop()
        with warnings.catch_warnings():
            # "nothing was recorded" is the caller's to say, in its own words.
            warnings.simplefilter("ignore")
            self.cassette.stop()

    def environment(self, scratch: Path, base: dict[str, str]) -> dict[str, str]:
        """The variables that send a program's HTTP through the proxy and make it trust the
        CA. ``base`` is the environment they go into (the bundles keep what it trusted);
        files go to ``scratch``."""
        url = self.url
        variables = dict.fromkeys(PROXY_VARIABLES, url)
        import urllib.request

        variables[USER_PROXIES_VARIABLE] = json.dumps(urllib.request.getproxies())
        variables["NODE_USE_ENV_PROXY"] = "1"
        user_bundle = base.get("SSL_CERT_FILE")
        bundle = self.ca.write_bundle(
            scratch / "ca-bundle.pem", Path(user_bundle) if user_bundle else None
        )
        variables.update(dict.fromkeys(BUNDLE_VARIABLES, str(bundle)))
        extra = base.get("NODE_EXTRA_CA_CERTS")
        if extra and Path(extra).is_file():
            node_bundle = scratch / "node-extra-ca.pem"
            node_bundle.write_bytes(
                Path(extra).read_bytes().rstrip(b"\n") + b"\n" + self.ca.cert_pem
            )
            variables["NODE_EXTRA_CA_CERTS"] = str(node_bundle)
        else:
            variables["NODE_EXTRA_CA_CERTS"] = str(self.ca.cert_path)
        preload = f"--require {_node_quote(str(NODE_PRELOAD))}"
        options = base.get("NODE_OPTIONS", "")
        variables["NODE_OPTIONS"] = f"{options} {preload}".strip()
        return variables


def _node_quote(text: str) -> str:
    """A path as NODE_OPTIONS reads it: in double quotes when it holds a space."""
    if not any(c.isspace() for c in text) and '"' not in text:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def describe_misses(misses: list[UnmatchedInteractionError]) -> str:
    """What ``agenttape run`` and ``agenttape proxy`` say when requests went unanswered."""
    return (
        f"{counted(len(misses), 'request')} through the proxy had no recorded interaction "
        f"(each was answered with status 599); the first:\n{misses[0]}"
    )


def describe_distrust(proxy: Proxy) -> str:
    """What ``agenttape run`` says when TLS handshakes of the command with the proxy failed:
    the hosts, the first failure's reason, and what to do."""
    hosts = sorted({host for host, _reason in proxy.distrusted})
    reason = proxy.distrusted[0][1]
    return (
        f"{counted(len(proxy.distrusted), 'TLS handshake')} with the proxy failed, for "
        f"{', '.join(hosts)} (the first: {reason}), so nothing the command sent over them was "
        "recorded or replayed: the client does not trust the agenttape CA, or checked the "
        f"certificate against another name. Trust {proxy.ca.cert_path} (agenttape proxy "
        "--print-ca prints it); agenttape run sets SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, "
        "REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE, which most programs read"
    )


def serve(
    cassette_path: Path,
    mode: Any,
    *,
    port: int,
    upstream: str | None,
    routes: dict[Origin, Origin],
    out: TextIO,
    err: TextIO,
    faults: Sequence[Fault] = (),
) -> int:
    """``agenttape proxy``: serve until interrupted (Ctrl-C or SIGTERM), then save;
    ``faults`` are injected into what it serves (``--fault``)."""
    cassette = Cassette(cassette_path, mode=mode, faults=faults)
    cassette.mode_label = f"{mode!r}, through agenttape proxy"
    cassette.rerecord_hint = (
        "To re-record: agenttape proxy --mode all, or --mode new_episodes to add only the "
        "missing requests."
    )

    def log(line: str) -> None:
        err.write(f"agenttape proxy: {line}\n")
        err.flush()

    cassette.start()
    try:
        proxy = Proxy(cassette, port=port, upstream=upstream, routes=routes, log=log)
    except BaseException:
        cassette.stop()
        raise
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        _banner(proxy, cassette, upstream, out, faults)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        proxy.close()
    if cassette.is_recording:
        if cassette.interactions:
            log(f"saved {counted(len(cassette.interactions), 'interaction')} to {cassette_path}")
        else:
            log(f"nothing was recorded; {cassette_path} was left as it was")
    else:
        log(
            f"replayed {cassette.play_count} of {counted(len(cassette.interactions), 'interaction')}"
        )
    if proxy.misses:
        log(describe_misses(proxy.misses))
        return 1
    return 0


def _banner(
    proxy: Proxy, cassette: Cassette, upstream: str | None, out: TextIO, faults: Sequence[Fault]
) -> None:
    what = "recording" if cassette.is_recording else "replaying, offline"
    user_bundle = os.environ.get("SSL_CERT_FILE")
    bundle = proxy.ca.bundle(Path(user_bundle) if user_bundle else None)
    lines = [
        f"agenttape proxy listening on {proxy.url}: cassette {cassette.path}, mode "
        f"{cassette.mode!r} ({what})",
        "point a program at it with:",
        "  export " + " ".join(f"{name}={proxy.url}" for name in PROXY_VARIABLES[:2]),
        "  export " + " ".join(f"{name}={shlex.quote(str(bundle))}" for name in BUNDLE_VARIABLES),
        f"  export NODE_EXTRA_CA_CERTS={shlex.quote(str(proxy.ca.cert_path))} NODE_USE_ENV_PROXY=1",
        "  export NODE_OPTIONS="
        + shlex.quote(f"--require {_node_quote(str(NODE_PRELOAD))}")
        + "  # Node before 24: fetch through the proxy",
    ]
    if upstream:
        lines.append(f"base URL: {proxy.url} forwards to {upstream}")
    lines += [f"injecting the fault {item.describe()}" for item in faults]
    lines.append("stop with Ctrl-C: what was recorded is saved then")
    out.write("\n".join(lines) + "\n")
    out.flush()


def print_ca(out: TextIO) -> int:
    """``agenttape proxy --print-ca``: where the CA certificate is (made now if need be)."""
    ca = certificate_authority()
    out.write(f"{ca.cert_path}\n")
    return 0
