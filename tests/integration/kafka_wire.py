"""A raw Kafka client for wire-level tests: kio encodes requests and decodes responses.

Requests are kio entities sent with a request header v1/v2 (by the
request's flexibility); responses are read whole and decoded with the
response class of the same version (header v0, or v1 for flexible versions
except ApiVersions). Nothing of the server is imported.
"""

from __future__ import annotations

import io
import socket
import struct
import time

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from headwater.codec.kafka.record_batch import Record, build_record_batch


def message_classes(api_key: int, version: int):
    req = load_payload_module(api_key, version, EntityType.request)
    res = load_payload_module(api_key, version, EntityType.response)
    return req, res


def main_class(module, kind: EntityType):
    for v in vars(module).values():
        if isinstance(v, type) and getattr(v, "__type__", None) is kind:
            return v
    raise LookupError(module)


class Closed(Exception):
    pass


class KafkaWire:
    def __init__(self, address: str, timeout: float = 20.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, request, correlation: int | None = None) -> tuple[bytes, int]:
        """A size-prefixed request frame for a kio request entity (or raw body bytes)."""
        if correlation is None:
            self.correlation += 1
            correlation = self.correlation
        flexible = getattr(type(request), "__flexible__", False)
        client = b"wire-test"
        head = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
        if flexible:
            head += b"\x00"
        if isinstance(request, (bytes, bytearray)):
            body = bytes(request)
        else:
            buf = io.BytesIO()
            entity_writer(type(request))(buf, request)
            body = buf.getvalue()
        payload = head + body
        return struct.pack(">i", len(payload)) + payload, correlation

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise Closed(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read_response(self, api_key: int, version: int):
        """(correlation_id, decoded response) of the next frame."""
        data = self.read_frame()
        (correlation,) = struct.unpack_from(">i", data, 0)
        _, res = message_classes(api_key, version)
        cls = main_class(res, EntityType.response)
        pos = 4
        if cls.__flexible__ and api_key != 18:
            assert data[4] == 0, "response header v1 must have an empty tagged-field section"
            pos = 5
        entity, size = entity_reader(cls)(data, pos)
        assert pos + size == len(data), f"{len(data) - pos - size} bytes after the response body"
        return correlation, entity

    def call(self, api_key: int, version: int, request):
        frame, correlation = self.frame(api_key, version, request)
        self.send_raw(frame)
        got, response = self.read_response(api_key, version)
        assert got == correlation
        return response

    def closed_by_server(self, wait_s: float = 10.0) -> bool:
        """True when the server closes the connection (EOF) within ``wait_s``."""
        self.sock.settimeout(wait_s)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def record_batch(values, *, keys=None, headers=None, base_timestamp: int | None = None, **kw) -> bytes:
    """A RecordBatch v2 holding ``values`` (with optional keys/headers lists)."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    records = []
    for i, v in enumerate(values):
        k = keys[i] if keys else None
        h = headers[i] if headers else ()
        records.append(Record(i, 0, k, v, h))
    return build_record_batch(records, base_timestamp=ts, **kw)
