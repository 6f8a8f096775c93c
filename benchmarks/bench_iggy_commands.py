"""Micro-benchmark of the Iggy command codecs (headwater.codec.iggy.commands) on one core.

Decodes and encodes a few metadata request bodies and reply payloads, plus the
PollMessages request (the one metadata-shaped body on the poll path). Reports
nanoseconds per call, the best of ``--repeat`` timeit runs of ``--number`` calls,
timed in process CPU time (``time.process_time``) so that other load on a shared
machine counts less (``--wall`` for wall-clock time).

    .venv/bin/python benchmarks/bench_iggy_commands.py
    .venv/bin/python benchmarks/bench_iggy_commands.py --number 20000 --repeat 7

Run it on two checkouts (before / after a codec change) in one sitting on a
quiet machine; only the ratio between runs means anything.
"""

from __future__ import annotations

import argparse
import time
import timeit

from headwater.codec.iggy.codes import ConsumerKind, PollingKind
from headwater.codec.iggy.commands import groups as G
from headwater.codec.iggy.commands import messages as M
from headwater.codec.iggy.commands import offsets as O
from headwater.codec.iggy.commands import streams as ST
from headwater.codec.iggy.commands import system as S
from headwater.codec.iggy.commands import topics as TP
from headwater.codec.iggy.commands import users as U
from headwater.codec.iggy.primitives import Consumer, Permissions, PollingStrategy


def cases() -> list[tuple[str, object, object, object]]:
    """``(name, value, encode, decode)`` for each measured codec."""
    topic = TP.TopicInfo(1, 1_700_000_000_000_000, 3, "orders", 0, 1, 0, 1024, 10, b"", b"")
    details = TP.TopicDetails(
        1, 2, "orders", 0, 1, 0, 1024, 10, b"", b"",
        tuple(TP.PartitionInfo(i, 2, 1, 100, 1024, 10) for i in range(4)),
    )
    return [
        ("GetStream", ST.GetStream("orders"), ST.encode_get_stream, ST.decode_get_stream),
        ("CreateTopic", TP.CreateTopic(1, 3, "orders", b""), TP.encode_create_topic,
         TP.decode_create_topic),
        ("StoreConsumerOffset",
         O.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 7), 1, 2, 0, 42),
         O.encode_store_consumer_offset, O.decode_store_consumer_offset),
        ("UpdateUser", U.UpdateUser(3, "bob", 1, b""), U.encode_update_user,
         U.decode_update_user),
        ("PollMessages",
         M.PollMessages(Consumer(ConsumerKind.CONSUMER, 7), 1, 2, 0,
                        PollingStrategy(PollingKind.OFFSET, 10), 100, True),
         M.encode_poll_messages, M.decode_poll_messages),
        ("TopicDetails(4 partitions)", details, TP.encode_topic_details,
         TP.decode_topic_details),
        ("Streams(10)", tuple(ST.StreamInfo(i, 2, 3, f"s{i}", 4, 5, b"") for i in range(10)),
         ST.encode_streams, ST.decode_streams),
        ("Topics(10)", (topic,) * 10, TP.encode_topics, TP.decode_topics),
        ("UserDetails", U.UserDetails(1, 2, 1, "bob", b"", Permissions()),
         U.encode_user_details, U.decode_user_details),
        ("Stats", S.Stats(hostname="h", os_name="linux"), S.encode_stats, S.decode_stats),
        ("ConsumerGroupDetails",
         G.ConsumerGroupDetails(1, 4, "g", (G.ConsumerGroupMember(1, (0, 1)),
                                            G.ConsumerGroupMember(2, (2, 3)))),
         G.encode_consumer_group_details, G.decode_consumer_group_details),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--wall", action="store_true", help="time wall-clock, not CPU, time")
    args = parser.parse_args()
    timer = time.perf_counter if args.wall else time.process_time
    print(f"{'codec':28} {'decode ns':>10} {'encode ns':>10}")
    for name, value, encode, decode in cases():
        body = encode(value)
        assert decode(body) == value, name
        dec = min(
            timeit.repeat(lambda: decode(body), timer, number=args.number, repeat=args.repeat)
        )
        enc = min(
            timeit.repeat(lambda: encode(value), timer, number=args.number, repeat=args.repeat)
        )
        print(f"{name:28} {dec / args.number * 1e9:10.0f} {enc / args.number * 1e9:10.0f}")


if __name__ == "__main__":
    main()
