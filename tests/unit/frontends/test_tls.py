"""frontends/tls.py: the self-signed pair is made once and reused; a configured pair that
does not load is refused naming its option."""

from __future__ import annotations

import ipaddress
import ssl

import pytest
from cryptography import x509

from headwater.frontends import tls


def test_self_signed_is_made_once_with_a_private_key_and_loopback_names(tmp_path):
    cert, key = tls.self_signed(str(tmp_path))
    first = open(cert, "rb").read()
    assert (tmp_path / "certs" / "server_key.pem").stat().st_mode & 0o777 == 0o600
    assert tls.self_signed(str(tmp_path)) == (cert, key)
    assert open(cert, "rb").read() == first  # reused, not remade
    san = x509.load_pem_x509_certificate(first).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    ctx = tls.server_context("", "", str(tmp_path), "tcp.tls_cert_file")
    assert isinstance(ctx, ssl.SSLContext) and ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_missing_or_unloadable_pair_names_its_option(tmp_path):
    with pytest.raises(tls.TlsConfigError) as e:
        tls.server_context(str(tmp_path / "nope.pem"), "", str(tmp_path), "kafka.tls_cert_file")
    assert e.value.option == "kafka.tls_cert_file" and "is not a file" in e.value.problem
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"not a certificate")
    with pytest.raises(tls.TlsConfigError) as e:
        tls.server_context(str(junk), str(junk), str(tmp_path), "websocket.tls_cert_file")
    assert e.value.option == "websocket.tls_cert_file" and "cannot load" in e.value.problem
    cert, _ = tls.self_signed(str(tmp_path / "a"))
    _, other_key = tls.self_signed(str(tmp_path / "b"))
    with pytest.raises(tls.TlsConfigError):  # a key that is not the certificate's
        tls.server_context(cert, other_key, str(tmp_path), "tcp.tls_cert_file")
