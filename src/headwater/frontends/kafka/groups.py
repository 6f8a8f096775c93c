"""Classic consumer groups on the event loop: the pure coordinator (core.groups.classic) driven by asyncio.

The coordinator never waits and never reads a clock. This module gives it both:

- **Time** is the loop's monotonic clock in whole milliseconds (``now_ms``).
- **Parking.** A JoinGroup or SyncGroup that has to wait is parked under a
  token; here the token *is* an ``asyncio.Future`` the handler awaits. Every
  coordinator reply carries ``completions`` (token, result) for requests parked
  earlier; each resolves its future. A future already done (its request went
  away) is skipped, so a late answer is dropped.
- **One timer.** After every coordinator call the single ``loop.call_at``
  handle is re-armed at ``next_deadline_ms()`` (or cancelled when there is
  none); when it fires, ``tick`` runs (session expiry, join and sync
  deadlines) and its completions are delivered the same way.

A parked request ends in one of three ways: its answer arrives; the peer
closes the connection (``ctx.peer_gone``, the server's read-ahead of the next
request, fails): nothing is sent and the member stays until its session
times out, as in Kafka; or the server shuts down (``ctx.closing``): the
request is answered COORDINATOR_NOT_AVAILABLE so the client retries
elsewhere or later. In the last two cases the future is cancelled, and the
coordinator's eventual answer for it is dropped.

Everything else (heartbeats, leaves, admin views, commit validation) is
answered at once; those calls may still complete other members' parked
requests (a leave can finish a join phase), so their completions are
delivered too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from ...config import KafkaConfig
from ...core.offsets import GROUP
from ...core.groups.classic import (
    Completion,
    Expired,
    GroupConfig,
    GroupCoordinator,
    JoinResult,
    LeaveResult,
    Outcome,
    Reply,
    State,
    SyncResult,
)

log = logging.getLogger("headwater.kafka.groups")


def group_config(config: KafkaConfig) -> GroupConfig:
    """The coordinator's limits from the ``[kafka]`` section (``group_*`` keys)."""
    return GroupConfig(
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        max_size=config.group_max_size or None,
    )


class KafkaGroups:
    """The coordinator of every classic group of this node, with its timer and parked futures."""

    def __init__(self, config: KafkaConfig):
        self.coordinator = GroupCoordinator(group_config(config), observer=self._observe,
                                            on_expired=self._log_expired)
        self._timer: asyncio.TimerHandle | None = None
        self._due_ms: int | None = None

    # ------------------------------------------------------------------ clock and timer
    @staticmethod
    def now_ms() -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    def _settle(self, completions: Iterable[Completion]) -> None:
        """Answer parked requests, then re-arm the timer for the coordinator's next deadline."""
        for c in completions:
            fut = c.token
            if not fut.done():
                fut.set_result(c.result)
        due = self.coordinator.next_deadline_ms()
        if due == self._due_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due_ms = due
        if due is not None:
            # one millisecond late, so that the tick's whole-ms clock has reached the deadline
            self._timer = asyncio.get_running_loop().call_at((due + 1) / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._due_ms = None
        try:
            completions = self.coordinator.tick(self.now_ms())
        except Exception:  # a coordinator bug: keep the timer alive for the other groups
            log.exception("group timer failed")
            completions = []
        self._settle(completions)

    @staticmethod
    def _log_expired(e: Expired) -> None:
        """One line per member a deadline removed: who, and why (:class:`Expired`: its session ran
        out, its join as a new member, or a rebalance deadline passed without its join or sync). A
        member that vanished from a test's group is otherwise only a ``member-removed`` state line."""
        log.info("group member timed out", extra={"kv": {
            "group": e.group_id, "member": e.member_id, "client": e.client_id, "why": e.why,
            "session_ms": e.session_timeout_ms, "state": e.state.value, "generation": e.generation}})

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._due_ms = None

    @staticmethod
    def _observe(group_id: str, prev: State, event: Any, nxt: State) -> None:
        if prev is not nxt:
            log.info("group state", extra={"kv": {"group": group_id, "from": prev.value, "event": event.value,
                                                  "to": nxt.value}})

    # ------------------------------------------------------------------ parked requests
    async def _park(self, ctx, fut: asyncio.Future, reply: Reply, on_shutdown: Any) -> Any:
        """The result of a request the coordinator may have parked under ``fut``.

        Returns None when the peer went away while it waited (send nothing).
        """
        self._settle(reply.completions)
        if reply.result is not None:
            return reply.result
        gone = ctx.peer_gone() if ctx.peer_gone is not None else None
        closing = asyncio.ensure_future(ctx.closing.wait()) if ctx.closing is not None else None
        waiters = {w for w in (fut, gone, closing) if w is not None}
        try:
            while True:
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                if fut in done:
                    return fut.result()
                if closing is not None and closing in done:
                    return on_shutdown
                if gone is not None and gone in done:
                    if gone.cancelled() or gone.exception() is not None:
                        return None  # the peer closed: nobody to answer
                    waiters.discard(gone)  # the next request arrived early; it waits its turn
        finally:
            if closing is not None:
                closing.cancel()
            if not fut.done():
                fut.cancel()

    async def join(self, ctx, group_id: str, **request: Any) -> JoinResult | None:
        fut = asyncio.get_running_loop().create_future()
        reply = self.coordinator.join(group_id, now_ms=self.now_ms(), token=fut, **request)
        return await self._park(ctx, fut, reply,
                                JoinResult(Outcome.COORDINATOR_UNAVAILABLE, request.get("member_id", "")))

    async def sync(self, ctx, group_id: str, **request: Any) -> SyncResult | None:
        fut = asyncio.get_running_loop().create_future()
        reply = self.coordinator.sync(group_id, now_ms=self.now_ms(), token=fut, **request)
        return await self._park(ctx, fut, reply, SyncResult(Outcome.COORDINATOR_UNAVAILABLE))

    # ------------------------------------------------------------------ immediate requests
    def heartbeat(self, group_id: str, **request: Any) -> Outcome:
        outcome = self.coordinator.heartbeat(group_id, now_ms=self.now_ms(), **request)
        self._settle(())
        return outcome

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> LeaveResult:
        reply = self.coordinator.leave(group_id, now_ms=self.now_ms(), members=members)
        self._settle(reply.completions)
        assert reply.result is not None
        for m in reply.result.members:
            if m.outcome is Outcome.UNKNOWN_MEMBER:  # gone already: timed out, or never joined
                log.info("group leave of an unknown member", extra={"kv": {"group": group_id, "member": m.member_id}})
        return reply.result

    def validate_commit(self, group_id: str, **request: Any) -> Outcome:
        outcome = self.coordinator.validate_commit(group_id, now_ms=self.now_ms(), **request)
        self._settle(())
        return outcome

    def delete(self, group_id: str) -> Outcome:
        outcome = self.coordinator.delete(group_id, now_ms=self.now_ms())
        self._settle(())
        return outcome

    # ------------------------------------------------------------------ offset retention
    def expire_offsets(self, broker, retention_ms: int) -> int:
        """Kafka's ``offsets.retention.minutes`` (KIP-211): delete the committed offsets of
        groups that are not in use (no group here, or Empty for at least ``retention_ms``)
        and not committed for ``retention_ms`` (``Broker.expire_group_offsets``); an Empty
        group left with no offsets is removed, as Kafka's goes Dead. Returns the offsets
        deleted."""
        now = self.now_ms()

        def in_use(name: str) -> bool:
            g = self.coordinator.get(name)
            if g is None:
                return False
            if g.state is not State.EMPTY:
                return True
            return g.state_since_ms is not None and now - g.state_since_ms < retention_ms

        doomed = broker.expire_group_offsets(retention_ms, in_use)
        if not doomed:
            return 0
        names = {k[4] for k in doomed}
        for name in names - broker.committed_names(GROUP):
            g = self.coordinator.get(name)
            if g is not None and g.state is State.EMPTY:
                self.delete(name)
        log.info("committed offsets expired", extra={"kv": {"groups": sorted(names), "offsets": len(doomed)}})
        return len(doomed)
