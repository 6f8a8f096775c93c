"""How ``message poll`` and ``dump`` show messages: one line (or one JSON object) per message.

A message is a frame of a stored batch (:mod:`headwater.codec.batch`): its offset is
``base_offset + offset_delta``, its ``timestamp`` the batch's ``base_timestamp``
(server append time, µs), its ``origin_timestamp`` the producer's time
(``origin_timestamp + timestamp_delta``, µs). Headers are the frame's Iggy user
headers, typed; a message produced over Kafka carries its key and headers under
the reserved ``kafka.*`` keys (``docs/kafka-mapping.md``), shown here as Kafka
shows them: ``kafka_key`` and the Kafka headers.

JSON output is one object per line (NDJSON), so ``--follow`` can stream it::

    {"partition_id", "offset", "timestamp", "origin_timestamp", "id", "checksum",
     "payload", "headers": {key: value}, "kafka_key": text or {"hex": ...} or null}
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import click

from ..codec import batch as batch_codec
from ..codec.errors import CodecError
from ..codec.headers import decode_user_headers
from ..codec.kafka.convert import kafka_fields_of

FORMATS = ("text", "json", "hex")


def _text_or_hex(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": raw.hex()}


def format_payload(payload: bytes, fmt: str) -> Any:
    """The payload as text (UTF-8, undecodable bytes replaced), parsed JSON, or hex."""
    if fmt == "hex":
        return payload.hex()
    if fmt == "json":
        try:
            return json.loads(payload)
        except ValueError:
            return {"not_json": payload.decode("utf-8", "replace")}
    return payload.decode("utf-8", "replace")


def header_view(payload: bytes, user_headers: bytes) -> tuple[dict[str, Any], Any]:
    """``(headers, kafka_key)`` of a frame, as described in the module doc."""
    if not user_headers:
        return {}, None
    try:
        pairs = decode_user_headers(user_headers)
    except CodecError:
        return {"_undecodable_hex": user_headers.hex()}, None
    if any(p.key.startswith(b"kafka.") for p in pairs):
        key, _value, headers, _ts = kafka_fields_of(payload, user_headers)
        return {bytes(k).decode("utf-8", "replace"): _text_or_hex(None if v is None else bytes(v))
                for k, v in headers}, _text_or_hex(key)
    out = {}
    for p in pairs:
        name = p.key.decode("utf-8", "replace")
        try:
            value = p.to_python()
        except CodecError:
            value = {"hex": p.value.hex()}
        out[name] = _text_or_hex(value) if isinstance(value, (bytes, bytearray)) else value
    return out, None


def messages_of(batches: bytes | memoryview, start_offset: int = 0, partition_id: int | None = None
                ) -> Iterator[dict[str, Any]]:
    """Every message of back-to-back stored batches at or after ``start_offset``, raw payloads."""
    for one in batch_codec.split_batches(batches):
        header = batch_codec.read_header(one)
        for frame in batch_codec.iter_frames(one):
            offset = header.base_offset + frame.offset_delta
            if offset < start_offset:
                continue
            yield {
                "partition_id": header.partition_id if partition_id is None else partition_id,
                "offset": offset,
                "timestamp": header.base_timestamp,
                "origin_timestamp": header.origin_timestamp + frame.timestamp_delta,
                "id": frame.id,
                "checksum": frame.checksum,
                "payload": bytes(frame.payload),
                "user_headers": bytes(frame.user_headers),
            }


def show(message: dict[str, Any], fmt: str, output: str) -> None:
    """Print one message (see the module doc)."""
    headers, kafka_key = header_view(message["payload"], message["user_headers"])
    shown = {k: v for k, v in message.items() if k not in ("payload", "user_headers")}
    shown["payload"] = format_payload(message["payload"], fmt)
    shown["headers"] = headers
    shown["kafka_key"] = kafka_key
    if output == "json":
        click.echo(json.dumps(shown, ensure_ascii=False))
        return
    from .render import time_us

    parts = [f"offset={shown['offset']}", f"time={time_us(shown['timestamp'])}"]
    if kafka_key is not None:
        parts.append(f"key={json.dumps(kafka_key, ensure_ascii=False)}")
    if headers:
        parts.append(f"headers={json.dumps(headers, ensure_ascii=False)}")
    payload = shown["payload"]
    parts.append(payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False))
    click.echo(" ".join(parts))
