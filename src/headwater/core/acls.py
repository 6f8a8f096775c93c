"""Access control lists (Kafka's ACL model) and the one authorizer both protocols consult.

An ACL binding is (resource type, resource name, pattern type, principal, host,
operation, permission), with Kafka's numeric codes (``org.apache.kafka.common.acl``
and ``...resource``): stored persistently as one list (``persist("acls", [...])``).

Decisions (``Authorizer.allowed``) follow Kafka's AclAuthorizer, with Iggy's
permissions as a second source of ALLOW (docs/security.md has the table):

1. a super user (the root user, or a user with global ``manage_servers``) is allowed everything;
2. a matching DENY ACL refuses (DENY beats ALLOW, whatever grants the ALLOW);
3. a matching ALLOW ACL allows (ALLOW on READ, WRITE, DELETE or ALTER implies
   DESCRIBE; ALLOW on ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL covers every operation);
4. the user's Iggy permissions allow what ``iggy_grants`` maps them to;
5. the anonymous principal (no SASL on a listener that does not require it) is
   allowed when no ACL at all matches the resource (Kafka's
   ``allow.everyone.if.no.acl.found=true``), so a server without ACLs keeps
   serving unauthenticated clients as before;
6. otherwise refused.

An ACL matches a resource when its pattern does (LITERAL: equal name, or the
name ``*``; PREFIXED: the name starts with it), its principal is the caller's
or ``User:*``, and its host is the caller's or ``*``.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from .permissions import Checker
from .users import User

ANONYMOUS = "User:ANONYMOUS"
WILDCARD = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name

# the operations each resource type has (Kafka's AclEntry.supportedOperations), for authorized-operations bit sets
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
        Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}

_IMPLIES_DESCRIBE = (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER)


class InvalidAcl(ValueError):
    """A binding or filter that cannot be stored or used (Kafka: INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def validate(self) -> "AclBinding":
        if self.resource_type not in SUPPORTED_OPERATIONS:
            raise InvalidAcl(f"resource type {self.resource_type} cannot carry ACLs")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"pattern type {self.pattern_type} is not LITERAL (3) or PREFIXED (4)")
        if not self.resource_name:
            raise InvalidAcl("empty resource name")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME!r}")
        if not self.principal.startswith("User:") or len(self.principal) == 5:
            raise InvalidAcl(f"principal {self.principal!r} is not User:NAME")
        if not self.host:
            raise InvalidAcl("empty host (use '*')")
        if self.operation < Operation.ALL or self.operation > Operation.DESCRIBE_TOKENS:
            raise InvalidAcl(f"operation {self.operation} is not a concrete operation")
        if self.operation != Operation.ALL and self.operation not in SUPPORTED_OPERATIONS[ResourceType(self.resource_type)]:
            raise InvalidAcl(f"operation {Operation(self.operation).name} does not apply to {ResourceType(self.resource_type).name}")
        if self.permission not in (Permission.DENY, Permission.ALLOW):
            raise InvalidAcl(f"permission type {self.permission} is not DENY (2) or ALLOW (3)")
        return self

    def matches_resource(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None / ANY / MATCH widen a field (DescribeAcls, DeleteAcls)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def validate(self) -> "AclFilter":
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise InvalidAcl("filter with an UNKNOWN resource or pattern type")
        if self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN:
            raise InvalidAcl("filter with an UNKNOWN operation or permission type")
        return self

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Operation.ANY and self.operation != b.operation:
            return False
        if self.permission != Permission.ANY and self.permission != b.permission:
            return False
        if self.pattern_type == PatternType.MATCH:
            # bindings that would apply to the named resource: that literal, the wildcard, covering prefixes
            if self.resource_name is None:
                return True
            return b.matches_resource(b.resource_type, self.resource_name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
            return False
        return self.resource_name is None or self.resource_name == b.resource_name


class AclStore:
    """Every ACL binding, in memory and persisted under one key."""

    def __init__(self, persist: Callable[[str, Any], None], records: Iterable[dict[str, Any]] = ()):
        self._persist = persist
        self.bindings: list[AclBinding] = []
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}  # (type, name or "*") -> bindings
        self._prefixed: dict[int, list[AclBinding]] = {}  # type -> PREFIXED bindings
        self._index([AclBinding(**r) for r in records])

    def _index(self, bindings: list[AclBinding]) -> None:
        literal: dict[tuple[int, str], list[AclBinding]] = {}
        prefixed: dict[int, list[AclBinding]] = {}
        for b in bindings:
            if b.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(b.resource_type, []).append(b)
            else:
                literal.setdefault((b.resource_type, b.resource_name), []).append(b)
        self.bindings, self._literal, self._prefixed = bindings, literal, prefixed

    def _save(self, bindings: list[AclBinding]) -> None:
        self._persist("acls", [asdict(b) for b in bindings])  # durable first: a failed write changes nothing
        self._index(bindings)

    def on_resource(self, resource_type: int, name: str) -> list[AclBinding]:
        """Every binding whose pattern matches the resource (its literal name, ``*``, or a prefix of it)."""
        found = self._literal.get((resource_type, name), []) + self._literal.get((resource_type, WILDCARD), [])
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            found += [b for b in prefixed if name.startswith(b.resource_name)]
        return found

    def create(self, bindings: list[AclBinding]) -> None:
        """Store the new ones (an existing identical binding is kept once, as Kafka does)."""
        new = list(self.bindings)
        for b in bindings:
            if b not in new:
                new.append(b)
        self._save(new)

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings if f.matches(b)]

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; returns the matches per filter."""
        matched = [[b for b in self.bindings if f.matches(b)] for f in filters]
        gone = {b for group in matched for b in group}
        if gone:
            self._save([b for b in self.bindings if b not in gone])
        return matched


@dataclass(frozen=True, slots=True)
class Subject:
    """Who asks: a Kafka principal, the Headwater user behind it (None: anonymous), and the host."""

    principal: str
    user: User | None
    host: str = WILDCARD

    @classmethod
    def of(cls, user: User | None, host: str) -> "Subject":
        return cls(ANONYMOUS if user is None else f"User:{user.username}", user, host)


def is_super(user: User | None) -> bool:
    return user is not None and (user.is_root or bool(user.permissions and user.permissions.global_.manage_servers))


def iggy_grants(
    user: User | None, resource_type: int, operation: int, stream_id: int | None, topic_id: int | None
) -> bool:
    """What the user's Iggy permissions allow of a Kafka operation (docs/security.md, "Iggy permissions
    as Kafka operations"). ``stream_id`` is the Kafka stream's id (None when it does not exist yet),
    ``topic_id`` the topic's (None for a topic that does not exist, or for a stream-wide question)."""
    if user is None:
        return False
    c = Checker(user.permissions, user.is_root)
    op = Operation(operation)
    if resource_type == ResourceType.TOPIC:
        if op == Operation.READ:
            return c.poll_messages(stream_id, topic_id)
        if op == Operation.WRITE:
            return c.send_messages(stream_id, topic_id)
        if op == Operation.DESCRIBE:
            return c.poll_messages(stream_id, topic_id) or c.send_messages(stream_id, topic_id)
        if op == Operation.DESCRIBE_CONFIGS:
            return c.read_topic(stream_id, topic_id)
        if op == Operation.CREATE:
            return c.manage_topic(stream_id)
        return c.manage_topic(stream_id, topic_id)  # DELETE, ALTER, ALTER_CONFIGS
    if resource_type == ResourceType.GROUP:
        if op in (Operation.READ, Operation.DESCRIBE):
            return c.poll_messages(stream_id, None)
        return c.manage_topic(stream_id)  # DELETE
    if resource_type == ResourceType.TRANSACTIONAL_ID:
        return c.send_messages(stream_id, None)
    if resource_type == ResourceType.CLUSTER:
        if op in (Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS):
            return c.read_servers()
        if op == Operation.CREATE:
            return c.manage_topic(stream_id)
        if op == Operation.IDEMPOTENT_WRITE:
            return c.send_messages(stream_id, None)
        return c.manage_servers()  # ALTER, ALTER_CONFIGS, CLUSTER_ACTION
    return False


class Authorizer:
    """Decides (subject, operation, resource) over the ACL store and the users' Iggy permissions."""

    def __init__(self, acls: AclStore, kafka_stream: str = "kafka"):
        self.acls = acls
        self.kafka_stream = kafka_stream  # set by the Kafka front-end from ``[kafka] stream``

    def iggy_topic_allowed(self, user: User | None, iggy_allows: bool, operation: int, stream: str, topic: str) -> bool:
        """The Iggy protocol's answer for sending (WRITE) to or polling (READ) a topic: a DENY ACL on
        the topic's Kafka name refuses, an ALLOW ACL allows, else Iggy's own ``iggy_allows`` stands.
        The Kafka name is the bare topic name in the Kafka stream, ``stream.topic`` elsewhere."""
        if is_super(user) or not self.acls.bindings:
            return iggy_allows or is_super(user)
        name = topic if stream == self.kafka_stream else f"{stream}.{topic}"
        verdict = self.acl_verdict(Subject.of(user, WILDCARD), operation, ResourceType.TOPIC, name)
        return iggy_allows if verdict is None else verdict

    def _matching(self, who: Subject, resource_type: int, name: str) -> tuple[list[AclBinding], bool]:
        """(the ACLs for this subject on the resource, whether any ACL at all names the resource)."""
        on_resource = self.acls.on_resource(resource_type, name)
        mine = [
            b for b in on_resource
            if b.principal in (who.principal, "User:*") and b.host in (who.host, WILDCARD)
        ]
        return mine, bool(on_resource)

    def allowed(
        self,
        who: Subject,
        operation: int,
        resource_type: int,
        name: str,
        stream_id: int | None = None,
        topic_id: int | None = None,
    ) -> bool:
        if is_super(who.user):
            return True
        mine, any_acl = self._matching(who, resource_type, name) if self.acls.bindings else ([], False)
        if self.denied_by_acl(mine, operation):
            return False
        if self._allowed_by_acl(mine, operation):
            return True
        if iggy_grants(who.user, resource_type, operation, stream_id, topic_id):
            return True
        return who.user is None and not any_acl

    @staticmethod
    def denied_by_acl(mine: list[AclBinding], operation: int) -> bool:
        return any(
            b.permission == Permission.DENY and b.operation in (operation, Operation.ALL) for b in mine
        )

    @staticmethod
    def _allowed_by_acl(mine: list[AclBinding], operation: int) -> bool:
        for b in mine:
            if b.permission != Permission.ALLOW:
                continue
            if b.operation in (operation, Operation.ALL):
                return True
            if operation == Operation.DESCRIBE and b.operation in _IMPLIES_DESCRIBE:
                return True
            if operation == Operation.DESCRIBE_CONFIGS and b.operation == Operation.ALTER_CONFIGS:
                return True
        return False

    def acl_verdict(self, who: Subject, operation: int, resource_type: int, name: str) -> bool | None:
        """What the ACLs alone say: False (a DENY matches), True (an ALLOW matches), None (neither).
        The Iggy front-end combines it with its own permission check for topics of the Kafka stream."""
        if not self.acls.bindings:
            return None
        mine, _ = self._matching(who, resource_type, name)
        if self.denied_by_acl(mine, operation):
            return False
        return True if self._allowed_by_acl(mine, operation) else None

    def operations_bitset(
        self, who: Subject, resource_type: int, name: str, stream_id: int | None = None, topic_id: int | None = None
    ) -> int:
        """Kafka's authorized-operations int32: bit ``operation`` set for each supported operation allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[ResourceType(resource_type)]:
            if self.allowed(who, op, resource_type, name, stream_id, topic_id):
                bits |= 1 << int(op)
        return bits
