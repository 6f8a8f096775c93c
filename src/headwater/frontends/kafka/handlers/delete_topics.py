"""DeleteTopics (key 20), versions 1-6: delete topics by name (or id from v6).

v1-3 add throttle time and nothing else we use; v4 is flexible; v5 adds
error_message; v6 takes topics as (name, topic_id) pairs. Any topic Kafka
can see may be deleted, Iggy ``S.T`` topics included. Unknown names get
UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import uuid

from ....core import errors as core_errors
from .. import errors
from ..names import topic_id
from ..registry import ApiKey, Context, kafka_api


def _one(ctx: Context, name: str | None, tid):
    names = ctx.frontend.names
    if name is None:
        found = names.by_id(tid) if tid is not None and tid.int else None
        if found is None:
            return name, tid, errors.UNKNOWN_TOPIC_ID, "unknown topic id"
        name, topic = found
    else:
        topic = names.resolve(name)
        if topic is None:
            return name, tid, errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} not found"
    tid = topic_id(topic)
    try:
        ctx.broker.delete_topic(topic.stream_id, topic.id)
    except core_errors.BrokerError as e:
        return name, tid, errors.code_for(e), str(e)
    return name, tid, 0, None


@kafka_api(ApiKey.DELETE_TOPICS, versions=(1, 6))
def delete_topics(ctx: Context, request):
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, None) for n in request.topic_names]
    results = []
    for name, tid in wanted:
        name, tid, code, message = _one(ctx, name, tid)
        results.append(
            ctx.build(
                "DeletableTopicResult",
                name=name,
                topic_id=tid or uuid.UUID(int=0),
                error_code=code,
                error_message=message,
            )
        )
    return ctx.response(throttle_time=0, responses=tuple(results))
