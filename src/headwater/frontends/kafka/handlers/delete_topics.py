"""DeleteTopics (key 20), versions 1-6: delete topics by name (or id from v6).

v1-3 add throttle time and nothing else we use; v4 is flexible; v5 adds
error_message; v6 takes topics as (name, topic_id) pairs. Any topic Kafka
can see may be deleted, Iggy ``S.T`` topics included. Unknown names get
UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID.

Refused with INVALID_REQUEST and left alone, as in Kafka's
``ControllerApis.deleteTopics``: a name (or id) given more than once (one
result for it, "Duplicate topic name." / "Duplicate topic id."); a v6 entry
with neither a name nor an id, or with both; a name that maps to a topic
also given by id. Results are in request order (Kafka shuffles them).
"""

from __future__ import annotations

import uuid
from collections import Counter

from ....core import errors as core_errors
from .. import errors
from ..names import topic_id
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

ZERO = uuid.UUID(int=0)


def _entries(ctx: Context, request) -> list[tuple[str | None, uuid.UUID]]:
    if ctx.version >= 6:
        return [(t.name, t.topic_id or ZERO) for t in request.topics]
    return [(n, ZERO) for n in request.topic_names]


def _plan(ctx: Context, request) -> list[list]:
    """One slot per answer, in request order: [name, topic id, error, message, topic to delete]."""
    names = ctx.frontend.names
    slots: list[list] = []
    first: dict[tuple[str, object], list] = {}  # ("n", name) or ("i", id) -> its slot
    for name, tid in _entries(ctx, request):
        if name is None and not tid.int:
            slots.append([None, ZERO, errors.INVALID_REQUEST, "Neither topic name nor id were specified.", None])
            continue
        if name is not None and tid.int:
            slots.append([name, tid, errors.INVALID_REQUEST, "You may not specify both topic name and topic id.", None])
            continue
        key = ("n", name) if name is not None else ("i", tid)
        slot = first.get(key)
        if slot is None:
            first[key] = slot = [name, tid, 0, None, None]
            slots.append(slot)
        else:
            message = "Duplicate topic name." if name is not None else "Duplicate topic id."
            slot[2:] = [errors.INVALID_REQUEST, message, None]
    by_id: dict[uuid.UUID, list] = {}
    refused_ids: set[uuid.UUID] = set()
    for (kind, value), slot in first.items():
        if kind != "i":
            continue
        if slot[2]:
            refused_ids.add(value)
            continue
        found = names.by_id(value)
        if found is None:
            slot[2:4] = [errors.UNKNOWN_TOPIC_ID, "unknown topic id"]
        elif not authz.topic(ctx, Operation.DELETE, found[0], found[1]):
            slot[2:4] = [authz.TOPIC_AUTHORIZATION_FAILED, None]
        else:
            slot[0], slot[4] = found
            by_id[value] = slot
    for (kind, value), slot in first.items():
        if kind != "n" or slot[2]:
            continue
        topic = names.resolve(value)
        if not authz.topic(ctx, Operation.DELETE, value, topic):
            slot[2:4] = [authz.TOPIC_AUTHORIZATION_FAILED, None]
            continue
        if topic is None:
            slot[2:4] = [errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {value!r} not found"]
            continue
        slot[1] = tid = topic_id(topic)
        if tid in by_id or tid in refused_ids:
            other = by_id.pop(tid, None)
            if other is not None:
                slots.remove(other)  # answered here, once, and not deleted
            slot[2:4] = [errors.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied."]
        else:
            slot[4] = topic
    return slots


@kafka_api(ApiKey.DELETE_TOPICS)
def delete_topics(ctx: Context, request):
    results = []
    for name, tid, code, message, topic in _plan(ctx, request):
        if topic is not None:
            try:
                ctx.broker.delete_topic(topic.stream_id, topic.id)
            except core_errors.BrokerError as e:
                code, message = errors.code_for(e), str(e)
        results.append(
            ctx.build("DeletableTopicResult", name=name, topic_id=tid, error_code=code, error_message=message)
        )
    return ctx.response(throttle_time=0, responses=tuple(results))
