"""The CLI's pure parts: value parsing and display helpers (no server needed)."""

from __future__ import annotations

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.cli.identity import parse_expiry, permissions_of
from headwater.cli.render import duration_us, jsonable
from headwater.cli.resources import option_value, options_block
from headwater.codec.headers import Kind, decode_options_block
from headwater.codec.iggy.commands.streams import StreamInfo


def test_durations_read_as_people_write_them():
    assert [duration_us(v) for v in (0, 2**64 - 1, 7 * 86400 * 10**6, 5400 * 10**6, 1500)] == [
        "never", "never", "7d", "1h30m", "1500 µs"]


@given(st.integers(1, 10**6))
def test_whole_seconds_round_trip_through_duration_text(seconds):
    text = duration_us(seconds * 10**6)
    total = 0
    number = ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[ch]
            number = ""
    assert total == seconds


def test_options_are_typed_from_their_text():
    assert option_value("true") == (Kind.BOOL, b"\x01")
    assert option_value("4096") == (Kind.UINT64, (4096).to_bytes(8, "little"))
    assert option_value("1 GiB") == (Kind.STRING, b"1 GiB")
    block = options_block(("segment_size=16 MiB",), compression_algorithm="gzip", max_topic_size=None)
    assert decode_options_block(block) == {"segment_size": (Kind.STRING, b"16 MiB"),
                                           "compression_algorithm": (Kind.STRING, b"gzip")}
    with pytest.raises(click.BadParameter):
        options_block(("novalue",))


def test_json_output_decodes_options_and_strips_trailing_underscores():
    info = StreamInfo(1, 2, 0, "s", options=options_block(("a=1", "b=x")))
    assert jsonable(info)["options"] == {"a": 1, "b": "x"}
    perms = permissions_of("m_str,read_streams", ("3:p_msg",))
    plain = jsonable(perms)
    assert plain["global"]["manage_streams"] and plain["global"]["read_streams"]
    assert plain["streams"][0]["stream_id"] == 3 and plain["streams"][0]["poll_messages"]


def test_permission_and_expiry_mistakes_are_usage_errors():
    assert permissions_of(None, ()) is None
    for bad in (("fly", ()), ("", ("x:p_msg",)), ("", ("1:fly",))):
        with pytest.raises(click.BadParameter):
            permissions_of(*bad)
    assert parse_expiry(None) == 0 and parse_expiry("never") == 2**64 - 1
    assert parse_expiry("15m") == 900 * 10**6 and parse_expiry("60") == 60 * 10**6
    for bad in ("0", "soon", "5w"):
        with pytest.raises(click.BadParameter):
            parse_expiry(bad)


def test_keyrings_alt_file_backends_count_as_no_keyring_unless_chosen(monkeypatch):
    """keyring picked keyrings.alt's plaintext file by itself: our 0600 file is used instead;
    the user named a backend in PYTHON_KEYRING_BACKEND: it is used."""
    keyring = pytest.importorskip("keyring")
    alt_file = pytest.importorskip("keyrings.alt.file")
    from keyring.backends import chainer

    from headwater.cli import contexts

    before = keyring.get_keyring()
    try:
        for backend in (alt_file.PlaintextKeyring(), _chain(chainer, alt_file.PlaintextKeyring())):
            keyring.set_keyring(backend)
            monkeypatch.delenv("PYTHON_KEYRING_BACKEND", raising=False)
            assert contexts._keyring() is None
            monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
            assert contexts._keyring() is keyring
    finally:
        keyring.set_keyring(before)


def _chain(chainer, *members):
    chain = chainer.ChainerBackend()
    chain.__dict__["backends"] = list(members)  # what keyring's own chainer holds after discovery
    return chain


def test_ids_are_u32_or_names_of_1_to_255_utf8_bytes():
    from headwater.cli.common import ID, NAME

    assert ID.convert("0", None, None) == 0 and ID.convert("4294967295", None, None) == 2**32 - 1
    assert ID.convert("\u00b2", None, None) == "\u00b2"  # isdigit() but not a number: a name
    assert ID.convert("a" * 255, None, None) == "a" * 255 and NAME.convert("é" * 127, None, None) == "é" * 127
    for bad in ("", "4294967296", "99999999999999999999", "a" * 256, "é" * 128):
        with pytest.raises(click.BadParameter):
            ID.convert(bad, None, None)
    for bad in ("", "a" * 256, "é" * 128, "\ud800"):
        with pytest.raises(click.BadParameter):
            NAME.convert(bad, None, None)


@given(st.text(min_size=1))
def test_every_text_is_an_id_in_range_a_name_that_fits_or_a_usage_error(text):
    from headwater.cli.common import ID

    try:
        value = ID.convert(text, None, None)
    except click.BadParameter:
        return
    if isinstance(value, int):
        assert 0 <= value < 2**32 and value == int(text) and text.isascii()
    else:
        assert 1 <= len(value.encode("utf-8")) <= 255


def test_a_failed_start_names_a_default_by_its_key_and_the_flag_that_changes_it():
    """A default nobody gave (e.g. QUIC's 8080 held by another program) has no flag or variable
    to quote: the line names the config key and the flag to change it; anything given is named
    as it was given."""
    from headwater.cli.main import _named

    assert _named("quic.address", {}) == "quic.address (the default; --quic-address changes it)"
    assert _named("quic.address", {"quic.address": "HEADWATER_QUIC_ADDRESS"}) == "HEADWATER_QUIC_ADDRESS"
    assert _named("http.tls_cert_file", {}) == "http.tls_cert_file"  # no flag for it


def test_the_lazily_loaded_command_modules_define_exactly_the_names_listed():
    import importlib
    import subprocess
    import sys

    from headwater.cli import main as cli_main

    for module_name, names in cli_main.COMMAND_MODULES.items():
        module = importlib.import_module(f"headwater.cli.{module_name}")
        defined = [c.name for c in (*getattr(module, "GROUPS", ()), *getattr(module, "COMMANDS", ()))]
        assert sorted(defined) == sorted(names), module_name
    ctx = click.Context(cli_main.main)
    listed = cli_main.main.list_commands(ctx)
    assert listed == sorted({"serve", *(n for names in cli_main.COMMAND_MODULES.values() for n in names)})
    assert all(cli_main.main.get_command(ctx, name) is not None for name in listed)
    # a process that only serves (or asks the version) imports none of them
    probe = ("import sys\nfrom headwater.cli import main\n"
             "print(sorted(m for m in ('identity', 'inspect_cmd', 'messaging', 'offline', 'resources')"
             " if 'headwater.cli.' + m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
