"""TLS for the listeners: a server certificate from config, or a self-signed one made once.

A listener with TLS on (``[tcp] tls_enabled``, ``[websocket] tls_enabled``,
``[kafka] tls_enabled``; QUIC always) loads ``cert_file``/``key_file`` (PEM: the
certificate chain, then the private key; an encrypted key is refused). With no
``cert_file`` configured, :func:`self_signed` writes a certificate and key to
``<data_dir>/certs/server_cert.pem`` and ``server_key.pem`` (mode 0600) on the
first start and reuses them after: ECDSA P-256, SHA-256, valid 10 years from
one hour before it was made, subject CN ``headwater``, subject alternative names
``localhost``, ``127.0.0.1`` and ``::1``. Iggy generates an ephemeral one in memory at
each start instead (docs/gaps.md); a file survives restarts, so a client can pin
it (``tls_ca_file``). Never use a self-signed certificate beyond development.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl

CERTS_DIR = "certs"
SELF_SIGNED_CERT = "server_cert.pem"
SELF_SIGNED_KEY = "server_key.pem"


class TlsConfigError(Exception):
    """A certificate or key cannot be used. ``option``: the config key at fault."""

    def __init__(self, option: str, problem: str):
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


def self_signed(data_dir: str) -> tuple[str, str]:
    """(cert_path, key_path) of the data directory's self-signed pair, made if missing.
    Raises OSError when the files cannot be written."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = os.path.join(data_dir, CERTS_DIR)
    cert_path, key_path = os.path.join(directory, SELF_SIGNED_CERT), os.path.join(directory, SELF_SIGNED_KEY)
    if os.path.exists(cert_path) and os.path.exists(key_path):
        return cert_path, key_path
    os.makedirs(directory, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "headwater")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName([
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    for path, data, mode in ((key_path, key_pem, 0o600), (cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)):
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return cert_path, key_path


def cert_pair(cert_file: str, key_file: str, data_dir: str, option: str) -> tuple[str, str]:
    """The (cert, key) paths a listener uses: the configured ones (``key_file`` defaults to
    ``cert_file``, a combined PEM), else the data directory's self-signed pair.
    Raises TlsConfigError naming ``option`` (e.g. ``tcp.tls_cert_file``)."""
    if not cert_file:
        try:
            return self_signed(data_dir)
        except OSError as e:
            raise TlsConfigError(option, f"cannot write a self-signed certificate into {data_dir}: {e}") from None
    key_file = key_file or cert_file
    for path in (cert_file, key_file):
        if not os.path.isfile(path):
            raise TlsConfigError(option, f"{path} is not a file")
    return cert_file, key_file


def server_context(cert_file: str, key_file: str, data_dir: str, option: str) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or later, no client certificate) for a TCP listener.
    Raises TlsConfigError when the pair does not load."""
    cert, key = cert_pair(cert_file, key_file, data_dir, option)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(option, f"cannot load the certificate {cert} with the key {key}: {e}") from None
    return ctx
