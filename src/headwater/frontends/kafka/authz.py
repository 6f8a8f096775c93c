"""Authorization of Kafka requests: the caller (``ctx.session``) against ``core.acls.Authorizer``.

Each handler asks before acting, by resource, as Kafka's KafkaApis does
(docs/security.md lists which API needs which operation); a refusal is the
per-resource error code Kafka gives: TOPIC_AUTHORIZATION_FAILED (29),
GROUP_AUTHORIZATION_FAILED (30), CLUSTER_AUTHORIZATION_FAILED (31),
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53).

A topic's Iggy permissions are those of its own stream and topic ids (a topic
Kafka names ``S.T`` is Iggy topic ``T`` of stream ``S``); a topic that does
not exist yet, a group and a transactional id are judged at the Kafka stream.
"""

from __future__ import annotations

from ...core.acls import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType, Subject
from ...core.catalog import Topic
from .registry import Context

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

_ANONYMOUS = Subject(ANONYMOUS, None)


def subject(ctx: Context) -> Subject:
    return ctx.session.subject if ctx.session is not None else _ANONYMOUS


def _stream_id(ctx: Context) -> int | None:
    s = ctx.frontend.names.stream()
    return s.id if s is not None else None


def topic(ctx: Context, op: Operation, name: str, t: Topic | None = None) -> bool:
    """May the caller do ``op`` on topic ``name`` (``t``: the topic it resolves to, if any)?"""
    if t is None:
        return ctx.broker.authorizer.allowed(subject(ctx), op, ResourceType.TOPIC, name, _stream_id(ctx), None)
    return ctx.broker.authorizer.allowed(subject(ctx), op, ResourceType.TOPIC, name, t.stream_id, t.id)


def group(ctx: Context, op: Operation, group_id: str) -> bool:
    return ctx.broker.authorizer.allowed(subject(ctx), op, ResourceType.GROUP, group_id, _stream_id(ctx))


def cluster(ctx: Context, op: Operation) -> bool:
    return ctx.broker.authorizer.allowed(subject(ctx), op, ResourceType.CLUSTER, CLUSTER_NAME, _stream_id(ctx))


def transactional_id(ctx: Context, op: Operation, txn_id: str) -> bool:
    return ctx.broker.authorizer.allowed(subject(ctx), op, ResourceType.TRANSACTIONAL_ID, txn_id, _stream_id(ctx))


def create_topic(ctx: Context, name: str) -> bool:
    """CreateTopics and auto-creation: CREATE on the cluster or on the topic (Kafka checks both)."""
    return cluster(ctx, Operation.CREATE) or topic(ctx, Operation.CREATE, name)


def topic_operations(ctx: Context, name: str, t: Topic | None) -> int:
    """The authorized-operations bit set of a topic (Metadata v8+, include_topic_authorized_operations)."""
    if t is None:
        return ctx.broker.authorizer.operations_bitset(subject(ctx), ResourceType.TOPIC, name, _stream_id(ctx))
    return ctx.broker.authorizer.operations_bitset(subject(ctx), ResourceType.TOPIC, name, t.stream_id, t.id)


def cluster_operations(ctx: Context) -> int:
    return ctx.broker.authorizer.operations_bitset(subject(ctx), ResourceType.CLUSTER, CLUSTER_NAME, _stream_id(ctx))


def group_operations(ctx: Context, group_id: str) -> int:
    return ctx.broker.authorizer.operations_bitset(subject(ctx), ResourceType.GROUP, group_id, _stream_id(ctx))


def any_topic_writable(ctx: Context) -> bool:
    """WRITE on some topic Kafka can see (InitProducerId without a transactional id, KIP-679)."""
    return any(topic(ctx, Operation.WRITE, name, t) for name, t in ctx.frontend.names.visible())
