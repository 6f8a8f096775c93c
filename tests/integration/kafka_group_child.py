"""A Kafka group member in a process of its own, for tests that stop (SIGSTOP) or kill (SIGKILL) a
client without its LeaveGroup: ``python kafka_group_child.py LIB BOOTSTRAP TOPIC GROUP CONFIG_JSON``
(LIB ``confluent`` or ``aiokafka``; CONFIG_JSON: ``session``, ``rebalance`` in ms). Prints
``READY`` once it has an assignment; on SIGTERM it closes the consumer (LeaveGroup) and prints
``CLOSED``."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading


def main() -> None:
    lib, bootstrap, topic, group, config = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if lib == "aiokafka":
        from aiokafka import AIOKafkaConsumer

        async def run() -> None:
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"{group}-aiokafka",
                                 session_timeout_ms=config["session"], rebalance_timeout_ms=config["rebalance"],
                                 max_poll_interval_ms=config["rebalance"], heartbeat_interval_ms=300)
            await c.start()
            ready = False
            while not stop.is_set():
                await c.getmany(timeout_ms=50)
                if not ready and c.assignment():
                    print("READY", flush=True)
                    ready = True
            await c.stop()

        asyncio.run(run())
    else:
        import confluent_kafka

        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"{group}-confluent",
                                      "session.timeout.ms": config["session"],
                                      "max.poll.interval.ms": config["rebalance"], "heartbeat.interval.ms": 300})
        c.subscribe([topic])
        ready = False
        while not stop.is_set():
            c.poll(0.05)
            if not ready and c.assignment():
                print("READY", flush=True)
                ready = True
        c.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main()
