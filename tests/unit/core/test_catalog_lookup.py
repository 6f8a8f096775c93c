"""Catalog.topic's lookup cache against the catalog itself, through a real broker on real files.

Every send and poll resolves its (stream, topic) idents through ``Catalog.topic``, which keeps
the topics it found in a dict emptied whenever a stream or topic is added, removed or renamed.
These tests drive random creates, renames, deletes and re-creates and check after every step
that each lookup, by id or by name, answers exactly what a scan of the current catalog answers
(the same Topic object, or the same NotFound error).
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.core import errors
from headwater.core.broker import Broker
from headwater.storage.api import open_engine

NAMES = ["a", "b"]  # few idents, so random steps hit the same streams and topics


def scan(broker: Broker, stream, topic):
    """The answer without the cache: the catalog's records walked by id or name."""
    streams = broker.catalog.streams
    s = streams.get(stream) if isinstance(stream, int) else next(
        (x for x in streams.values() if x.name == stream), None)
    if s is None:
        return errors.StreamNotFound
    t = s.topics.get(topic) if isinstance(topic, int) else next(
        (x for x in s.topics.values() if x.name == topic), None)
    return errors.TopicNotFound if t is None else t


def lookup(broker: Broker, stream, topic):
    try:
        return broker.catalog.topic(stream, topic)
    except (errors.StreamNotFound, errors.TopicNotFound) as e:
        return type(e)


ident = st.one_of(st.integers(0, 1), st.sampled_from(NAMES))
op = st.one_of(
    st.tuples(st.just("create_stream"), st.sampled_from(NAMES)),
    st.tuples(st.just("rename_stream"), ident, st.sampled_from(NAMES)),
    st.tuples(st.just("delete_stream"), ident),
    st.tuples(st.just("create_topic"), ident, st.sampled_from(NAMES)),
    st.tuples(st.just("rename_topic"), ident, ident, st.sampled_from(NAMES)),
    st.tuples(st.just("delete_topic"), ident, ident),
    st.tuples(st.just("lookup"), ident, ident),
)


def apply(broker: Broker, step) -> None:
    kind, *args = step
    try:
        if kind == "create_stream":
            broker.create_stream(args[0])
        elif kind == "rename_stream":
            broker.update_stream(args[0], args[1])
        elif kind == "delete_stream":
            broker.delete_stream(args[0])
        elif kind == "create_topic":
            broker.create_topic(args[0], args[1], 1, {})
        elif kind == "rename_topic":
            broker.update_topic(args[0], args[1], args[2], {})
        elif kind == "delete_topic":
            broker.delete_topic(args[0], args[1])
        else:
            lookup(broker, args[0], args[1])  # fills the cache with whatever is found
    except errors.BrokerError:
        pass  # a refused change (name taken, not found) changes nothing


def check_all(broker: Broker) -> None:
    for s in [*range(3), *NAMES, "c"]:
        for t in [*range(3), *NAMES, "c"]:
            want, got = scan(broker, s, t), lookup(broker, s, t)
            assert got is want, (s, t, got, want)


@settings(max_examples=100)
@given(st.lists(op, min_size=3, max_size=25))
def test_every_lookup_answers_what_the_catalog_holds_after_each_change(steps):
    with tempfile.TemporaryDirectory() as d:
        broker = Broker(open_engine(d))
        try:
            for step in steps:
                apply(broker, step)
                check_all(broker)
        finally:
            broker.close()


def test_a_topic_deleted_and_created_again_under_its_name_is_the_new_one(tmp_path):
    broker = Broker(open_engine(str(tmp_path)))
    try:
        s = broker.create_stream("s")
        old = broker.create_topic(s.id, "t", 1, {})
        assert broker.catalog.topic("s", "t") is old
        broker.delete_topic("s", "t")
        with pytest.raises(errors.TopicNotFound):
            broker.catalog.topic("s", "t")
        new = broker.create_topic(s.id, "t", 1, {})
        assert new is not old
        assert broker.catalog.topic("s", "t") is new
        assert broker.catalog.topic(s.id, new.id) is new
    finally:
        broker.close()


def test_lookups_after_a_restart_find_the_loaded_topics(tmp_path):
    broker = Broker(open_engine(str(tmp_path)))
    s = broker.create_stream("s")
    broker.create_topic(s.id, "t", 1, {})
    broker.close()
    broker = Broker(open_engine(str(tmp_path)))
    try:
        t = broker.catalog.topic("s", "t")
        assert (t.stream_id, t.name) == (s.id, "t")
        assert broker.catalog.topic(0, 0) is t
    finally:
        broker.close()
