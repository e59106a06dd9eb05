"""The recording proxy's certificate authority: made once per user, trusted by the programs
the proxy serves, and signing a certificate for each host a program connects to.

The CA lives in the user's configuration directory (``AGENTTAPE_CONFIG_DIR`` overrides it):
``ca-cert.pem`` and ``ca-key.pem`` are made with mode 0600 whatever the umask (the key never
leaves the folder), and a folder or file others could write is fixed or refused.
Host certificates share one key made when the proxy starts and exist only in memory once
loaded: Python's ``ssl`` reads them from files, so they pass through a private temporary
directory that is emptied at once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import ipaddress
import os
import ssl
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

CA_CERT = "ca-cert.pem"
CA_KEY = "ca-key.pem"
CA_BUNDLE = "ca-bundle.pem"
CONFIG_VARIABLE = "AGENTTAPE_CONFIG_DIR"
CA_NAME = "agenttape recording proxy CA"


class ProxyUnavailableError(RuntimeError):
    """The proxy's extra is not installed."""


class UnsafeCAError(RuntimeError):
    """The CA's folder or files could have been changed by another user of the machine."""


_POSIX = hasattr(os, "getuid")


def _write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically, readable and writable by the user alone, whatever
    the umask (a file made by ``Path.write_bytes`` under umask 000 is 0666)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if _POSIX:
            os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    os.replace(temporary, path)


def _secure_directory(directory: Path) -> None:
    """The CA's folder is the user's alone: one others may write is made so (when it is the
    user's), else refused, and a CA file others could have written is refused."""
    if not _POSIX:
        return
    info = directory.stat()
    if info.st_uid != os.getuid():
        raise UnsafeCAError(
            f"the CA folder {directory} belongs to another user: set AGENTTAPE_CONFIG_DIR to a "
            "folder of your own"
        )
    if info.st_mode & 0o077:
        os.chmod(directory, 0o700)
    for name in (CA_CERT, CA_KEY, CA_BUNDLE):
        path = directory / name
        try:
            file_info = path.lstat()
        except FileNotFoundError:
            continue
        if path.is_symlink() or file_info.st_uid != os.getuid() or file_info.st_mode & 0o022:
            raise UnsafeCAError(
                f"{path} is writable by other users or not yours (mode "
                f"{oct(file_info.st_mode & 0o777)}): someone could have replaced the CA every "
                f"program under agenttape run trusts. Delete {directory} to make a new CA"
            )
        if file_info.st_mode & 0o077:
            os.chmod(path, 0o600)


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ProxyUnavailableError(
            "the recording proxy needs the 'proxy' extra: pip install 'agenttape-recorder[proxy]'"
        ) from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def config_directory() -> Path:
    """Where the CA lives: ``$AGENTTAPE_CONFIG_DIR``, else the platform's per-user config
    directory (``~/.config/agenttape`` on Linux, ``$XDG_CONFIG_HOME`` when set)."""
    override = os.environ.get(CONFIG_VARIABLE)
    if override:
        return Path(override)
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "agenttape"


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class CertificateAuthority:
    """The CA on disk, and a cache of server-side TLS contexts, one per host."""

    def __init__(self, directory: Path, alpn: tuple[str, ...] = ("http/1.1",)) -> None:
        x509, _hashes, serialization, ec, _eku, _name = _crypto()
        self.directory = directory
        self.alpn = alpn
        self._ensure()
        self.cert_pem = self.cert_path.read_bytes()
        self._cert = x509.load_pem_x509_certificate(self.cert_pem)
        self._key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._contexts: dict[tuple[str, tuple[str, ...]], ssl.SSLContext] = {}
        self._lock = threading.Lock()

    @property
    def cert_path(self) -> Path:
        return self.directory / CA_CERT

    @property
    def key_path(self) -> Path:
        return self.directory / CA_KEY

    def _ensure(self) -> None:
        """Makes the CA the first time; a second process starting at once waits for the
        first one's files instead of making another CA."""
        from .._core.locking import locked

        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _secure_directory(self.directory)
        if self.cert_path.exists() and self.key_path.exists():
            return
        with locked(self.key_path):
            if self.cert_path.exists() and self.key_path.exists():
                return
            key_pem, cert_pem = _new_ca()
            with contextlib.suppress(FileNotFoundError):
                self.key_path.unlink()  # a key without its certificate is of no use
            _write_private(self.key_path, key_pem)
            _write_private(self.cert_path, cert_pem)

    def bundle(self, base: Path | None = None) -> Path:
        """A CA bundle holding the system's (or ``base``'s) CAs and this one, written beside
        the CA, for the variables that replace a program's trust store (``SSL_CERT_FILE``):
        a connection that does not go through the proxy still verifies."""
        return self.write_bundle(self.directory / CA_BUNDLE, base)

    def write_bundle(self, path: Path, base: Path | None = None) -> Path:
        pieces = [_system_bundle(base), self.cert_pem]
        text = b"\n".join(piece.rstrip(b"\n") + b"\n" for piece in pieces if piece)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(path, text)
        return path

    def context_for(self, host: str, alpn: tuple[str, ...] | None = None) -> ssl.SSLContext:
        """A server-side context presenting a certificate for ``host`` signed by the CA, and
        offering ``alpn`` (those of ``self.alpn`` it names; all of them when None)."""
        host = host.lower()
        offered = tuple(p for p in (alpn or self.alpn) if p in self.alpn) or ("http/1.1",)
        with self._lock:
            context = self._contexts.get((host, offered))
            if context is None:
                context = self._contexts[(host, offered)] = self._make_context(host, offered)
            return context

    def _make_context(self, host: str, alpn: tuple[str, ...]) -> ssl.SSLContext:
        _x509, _hashes, serialization, _ec, _eku, _name = _crypto()
        leaf = self._issue(host)
        chain = leaf.public_bytes(serialization.Encoding.PEM) + self.cert_pem
        key = self._leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(list(alpn))
        with tempfile.TemporaryDirectory(prefix="agenttape-leaf-") as scratch:
            cert_file, key_file = Path(scratch) / "cert.pem", Path(scratch) / "key.pem"
            cert_file.write_bytes(chain)
            descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(key)
            context.load_cert_chain(cert_file, key_file)
        return context

    def _issue(self, host: str) -> Any:
        x509, hashes, _serialization, _ec, eku, name_oid = _crypto()
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            alternative: Any = x509.DNSName(host)
        else:
            alternative = x509.IPAddress(address)
        now = _now()
        public = self._leaf_key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, host[:64])]))
            .issuer_name(self._cert.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(days=1))
            .not_valid_after(now + _dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(key_agreement=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([eku.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )


def _key_usage(**allowed: bool) -> Any:
    """A KeyUsage extension allowing digital signatures and what ``allowed`` names."""
    x509 = _crypto()[0]
    usages = dict.fromkeys(
        (
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "key_cert_sign",
            "crl_sign",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    return x509.KeyUsage(digital_signature=True, **{**usages, **allowed})


def _new_ca() -> tuple[bytes, bytes]:
    x509, hashes, serialization, ec, _eku, name_oid = _crypto()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(name_oid.ORGANIZATION_NAME, "agenttape"),
            x509.NameAttribute(name_oid.COMMON_NAME, CA_NAME),
        ]
    )
    now = _now()
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(days=1))
        .not_valid_after(now + _dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _system_bundle(base: Path | None) -> bytes:
    """The CAs a program trusted before: ``base`` when given, else OpenSSL's default file
    (the system's store), else certifi's when it is installed; empty when none can be read."""
    candidates: list[str] = []
    if base is not None:
        candidates.append(str(base))
    else:
        paths = ssl.get_default_verify_paths()
        candidates += [p for p in (paths.cafile, paths.openssl_cafile) if p]
        with contextlib.suppress(ImportError):
            import certifi

            candidates.append(certifi.where())
    for candidate in candidates:
        with contextlib.suppress(OSError):
            return Path(candidate).read_bytes()
    return b""
