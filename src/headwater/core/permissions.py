"""Permissions: global, per-stream and per-topic grants, and the checks on them.

Source: Iggy ``server/security.mdx`` ("Permission matrix", "Scoped permissions",
"How permissions cascade"). The root user bypasses every check (the caller
passes ``is_root``). Implications applied here:

- every ``manage_*`` includes its ``read_*``; global ``manage_streams``
  includes ``manage_topics``; ``read_streams`` includes ``read_topics``;
  ``read_topics`` includes ``poll_messages``; ``manage_topics`` (and
  ``manage_stream``, ``manage_topic`` in their scopes) includes
  ``send_messages`` (the SDK's permission docs and Iggy's permissioner);
- stream scope: ``manage_stream`` includes ``read_stream`` and ``manage_topics``;
  ``read_stream`` includes ``read_topics`` and ``poll_messages`` in that stream;
- topic scope: ``manage_topic`` includes ``read_topic``; ``read_topic``
  includes ``poll_messages``.
A grant at a higher level covers everything below it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GlobalPermissions:
    manage_servers: bool = False
    read_servers: bool = False
    manage_users: bool = False
    read_users: bool = False
    manage_streams: bool = False
    read_streams: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class TopicPermissions:
    manage_topic: bool = False
    read_topic: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class StreamPermissions:
    manage_stream: bool = False
    read_stream: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False
    topics: dict[int, TopicPermissions] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Permissions:
    global_: GlobalPermissions = field(default_factory=GlobalPermissions)
    streams: dict[int, StreamPermissions] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "global": asdict(self.global_),
            "streams": {
                str(sid): {
                    **{k: v for k, v in asdict(sp).items() if k != "topics"},
                    "topics": {str(tid): asdict(tp) for tid, tp in sp.topics.items()},
                }
                for sid, sp in self.streams.items()
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Permissions | None":
        if d is None:
            return None
        streams = {}
        for sid, sp in d.get("streams", {}).items():
            topics = {int(tid): TopicPermissions(**tp) for tid, tp in sp.get("topics", {}).items()}
            fields = {k: v for k, v in sp.items() if k != "topics"}
            streams[int(sid)] = StreamPermissions(**fields, topics=topics)
        return cls(GlobalPermissions(**d.get("global", {})), streams)


ALL_GLOBAL = GlobalPermissions(*([True] * 10))
NO_GLOBAL = GlobalPermissions()  # frozen: one shared instance for users without grants


class Checker:
    """Answers "may this user do X here?" for one user's permissions (None = no grants)."""

    __slots__ = ("_p", "_root")

    def __init__(self, permissions: Permissions | None, is_root: bool):
        self._p = permissions
        self._root = is_root

    def _g(self) -> GlobalPermissions:
        return self._p.global_ if self._p else NO_GLOBAL

    def _s(self, stream_id: int | None) -> StreamPermissions | None:
        if self._p is None or stream_id is None:
            return None
        return self._p.streams.get(stream_id)

    def _t(self, stream_id: int | None, topic_id: int | None) -> TopicPermissions | None:
        s = self._s(stream_id)
        if s is None or topic_id is None:
            return None
        return s.topics.get(topic_id)

    # --- server and users ---
    def read_servers(self) -> bool:
        g = self._g()
        return self._root or g.read_servers or g.manage_servers

    def manage_servers(self) -> bool:
        return self._root or self._g().manage_servers

    def read_users(self) -> bool:
        g = self._g()
        return self._root or g.read_users or g.manage_users

    def manage_users(self) -> bool:
        return self._root or self._g().manage_users

    # --- streams ---
    def manage_stream(self, stream_id: int | None = None) -> bool:
        if self._root or self._g().manage_streams:
            return True
        s = self._s(stream_id)
        return bool(s and s.manage_stream)

    def read_stream(self, stream_id: int | None = None) -> bool:
        g = self._g()
        if self._root or g.read_streams or g.manage_streams:
            return True
        s = self._s(stream_id)
        return bool(s and (s.read_stream or s.manage_stream))

    # --- topics ---
    def manage_topic(self, stream_id: int | None, topic_id: int | None = None) -> bool:
        g = self._g()
        if self._root or g.manage_streams or g.manage_topics:
            return True
        s = self._s(stream_id)
        if s and (s.manage_stream or s.manage_topics):
            return True
        t = self._t(stream_id, topic_id)
        return bool(t and t.manage_topic)

    def read_topic(self, stream_id: int | None, topic_id: int | None = None) -> bool:
        g = self._g()
        if self._root or g.read_streams or g.manage_streams or g.read_topics or g.manage_topics:
            return True
        s = self._s(stream_id)
        if s and (s.read_stream or s.manage_stream or s.read_topics or s.manage_topics):
            return True
        t = self._t(stream_id, topic_id)
        return bool(t and (t.read_topic or t.manage_topic))

    # --- messages ---
    def poll_messages(self, stream_id: int, topic_id: int) -> bool:
        if self.read_topic(stream_id, topic_id):
            return True
        if self._g().poll_messages:
            return True
        s = self._s(stream_id)
        if s and s.poll_messages:
            return True
        t = self._t(stream_id, topic_id)
        return bool(t and t.poll_messages)

    def send_messages(self, stream_id: int, topic_id: int) -> bool:
        g = self._g()
        if self._root or g.send_messages or g.manage_streams or g.manage_topics:
            return True
        s = self._s(stream_id)
        if s and (s.send_messages or s.manage_stream or s.manage_topics):
            return True
        t = self._t(stream_id, topic_id)
        return bool(t and (t.send_messages or t.manage_topic))
