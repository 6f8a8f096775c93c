"""Topic options: the Iggy catalog's keys, value forms, bounds, updates, persistence."""

from __future__ import annotations

import struct

import pytest

from headwater.core import topic_options as to
from headwater.core.topic_options import (
    GIB,
    MIB,
    U64_MAX,
    InvalidOptionValue,
    InvalidTopicSize,
    TopicOptions,
    UnsupportedOptionKey,
    describe,
    parse_byte_size,
    parse_create,
    parse_duration_us,
)
from headwater.storage.api import SegmentPolicy


def test_absent_keys_resolve_to_the_documented_defaults():
    opts = parse_create({}, partitions_count=3)
    assert opts == TopicOptions()
    assert opts.explicit == frozenset()
    assert opts.values() == {
        "compression_algorithm": "none",
        "message_expiry": U64_MAX,
        "max_topic_size": U64_MAX,
        "segment_size": GIB,
        "enforce_fsync": False,
        "messages_required_to_save": 1024,
        "size_of_messages_required_to_save": MIB,
        "preallocate_segments": False,
        "durability": "replicated",
        "consumer_offset_durability": "replicated",
        "cleanup_policy": "delete",
        "min_cleanable_dirty_ratio": "0.5",
        "min_compaction_lag": 0,
        "max_compaction_lag": U64_MAX,
        "delete_retention": 86_400_000_000,
        "segment_roll": U64_MAX,
    }
    assert opts.derived_values() == opts.values()
    assert opts.compression_code == 1


def test_every_key_parses_from_its_typed_and_string_forms():
    typed = parse_create(
        {
            "compression_algorithm": 2,
            "message_expiry": 5_000_000,
            "max_topic_size": 10 * GIB,
            "segment_size": 128 * MIB,
            "enforce_fsync": True,
            "messages_required_to_save": 500,
            "size_of_messages_required_to_save": 2 * MIB,
            "preallocate_segments": True,
            "durability": "persisted",
            "consumer_offset_durability": "replicated",
            "cleanup_policy": "compact",
            "min_cleanable_dirty_ratio": "0.25",
            "min_compaction_lag": 0,
            "max_compaction_lag": 60_000_000,
            "delete_retention": 1_000_000,
            "segment_roll": 2_000_000,
        },
        partitions_count=4,
    )
    strings = parse_create(
        {
            "compression_algorithm": "GZIP",
            "message_expiry": "5s",
            "max_topic_size": "10 GiB",
            "segment_size": "128MiB",
            "enforce_fsync": "true",
            "messages_required_to_save": "500",
            "size_of_messages_required_to_save": "2 MiB",
            "preallocate_segments": "True",
            "durability": "PERSISTED",
            "consumer_offset_durability": "Replicated",
            "cleanup_policy": "COMPACT",
            "min_cleanable_dirty_ratio": "0.25",
            "min_compaction_lag": "0",
            "max_compaction_lag": "1m",
            "delete_retention": "1s",
            "segment_roll": "2s",
        },
        partitions_count=4,
    )
    assert typed == strings
    assert typed.explicit == frozenset(to.TOPIC_OPTION_KEYS)
    assert typed.compression_algorithm == "gzip" and typed.compression_code == 2
    assert typed.message_expiry_us == 5_000_000
    assert typed.max_topic_size == 10 * GIB
    assert typed.segment_size == 128 * MIB
    assert typed.enforce_fsync and typed.preallocate_segments
    assert typed.messages_required_to_save == 500
    assert typed.size_of_messages_required_to_save == 2 * MIB
    assert typed.derived_values() == {}


@pytest.mark.parametrize(
    "text, micros",
    [
        ("7 days", 7 * 86_400 * 10**6),
        ("1h 30m", 5_400 * 10**6),
        ("1h30m", 5_400 * 10**6),
        ("2 hours 5 seconds", 7_205 * 10**6),
        ("250ms", 250_000),
        ("15us", 15),
        ("1 week", 7 * 86_400 * 10**6),
        ("1M", 2_630_016 * 10**6),
        ("1y", 31_557_600 * 10**6),
    ],
)
def test_humantime_durations(text, micros):
    assert parse_duration_us(text) == micros
    assert parse_create({"message_expiry": text}, 1).message_expiry_us == micros


@pytest.mark.parametrize("text", ["", "7", "7 fortnights", "days", "1h and 5m", "-5s"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration_us(text)


@pytest.mark.parametrize(
    "text, size",
    [
        ("1048576", 1_048_576),
        ("128 MiB", 128 * MIB),
        ("128MiB", 128 * MIB),
        ("128mib", 128 * MIB),
        ("1 GB", 10**9),
        ("1gb", 10**9),
        ("1 G", 10**9),
        ("4KiB", 4096),
        ("4 Ki", 4096),
        ("1.5 KiB", 1536),
        ("512 B", 512),
        ("unlimited", 0),
        ("none", 0),
    ],
)
def test_byte_sizes(text, size):
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("text", ["", "MiB", "12 parsecs", "0.3 B", "1.5", "99999999 EiB", "1 Mbit"])
def test_bad_byte_sizes(text):
    with pytest.raises(ValueError):
        parse_byte_size(text)


def test_expiry_and_size_sentinels():
    never = parse_create({"message_expiry": "none", "max_topic_size": "unlimited"}, 1)
    assert never.message_expiry_us is None and never.max_topic_size is None
    assert never.explicit == {"message_expiry", "max_topic_size"}  # chosen, though equal to the default
    assert never.values()["message_expiry"] == U64_MAX
    maxed = parse_create({"message_expiry": U64_MAX, "max_topic_size": U64_MAX}, 1)
    assert maxed.message_expiry_us is None and maxed.max_topic_size is None
    zero = parse_create(
        {"message_expiry": 0, "max_topic_size": 0, "segment_size": 0, "size_of_messages_required_to_save": "0"}, 1
    )
    assert zero == TopicOptions()  # 0 is "server default": the keys count as absent
    assert zero.explicit == frozenset()
    assert parse_create({"message_expiry": "server_default"}, 1).explicit == frozenset()
    assert parse_create({"message_expiry": "1000"}, 1).message_expiry_us == 1000  # lenient: µs


def test_unknown_keys_are_rejected_by_name():
    with pytest.raises(UnsupportedOptionKey) as err:
        parse_create({"segment_size": "128MiB", "partitions_count": 7}, 1)
    assert err.value.key == "partitions_count"
    with pytest.raises(UnsupportedOptionKey):
        parse_create({"Segment_Size": 1}, 1)


@pytest.mark.parametrize(
    "key, value",
    [
        ("compression_algorithm", "zstd"),
        ("compression_algorithm", 0),
        ("compression_algorithm", 3),
        ("compression_algorithm", True),
        ("message_expiry", -1),
        ("message_expiry", U64_MAX + 1),
        ("message_expiry", True),
        ("message_expiry", "4294967296s"),  # over u32::MAX seconds
        ("message_expiry", 1.5),
        ("max_topic_size", "lots"),
        ("segment_size", MIB - 512),
        ("segment_size", GIB + 512),
        ("segment_size", MIB + 100),  # not a 512-byte multiple
        ("segment_size", "2 GiB"),
        ("segment_size", False),
        ("enforce_fsync", 1),
        ("enforce_fsync", "yes"),
        ("messages_required_to_save", 0),
        ("messages_required_to_save", "0"),
        ("messages_required_to_save", 16 * 1024 * 1024 + 1),
        ("messages_required_to_save", "1k"),
        ("size_of_messages_required_to_save", GIB + 1),
        ("preallocate_segments", "maybe"),
    ],
)
def test_bad_values_name_their_key(key, value):
    with pytest.raises(InvalidOptionValue) as err:
        parse_create({key: value}, 1)
    assert err.value.key == key


def test_bounds_that_are_allowed():
    assert parse_create({"segment_size": MIB}, 1).segment_size == MIB
    assert parse_create({"segment_size": GIB}, 1).segment_size == GIB
    assert parse_create({"messages_required_to_save": 16 * 1024 * 1024}, 1).messages_required_to_save == 16 * 1024 * 1024
    assert parse_create({"size_of_messages_required_to_save": GIB}, 1).size_of_messages_required_to_save == GIB


def test_max_topic_size_must_cover_one_segment():
    with pytest.raises(InvalidTopicSize) as err:
        parse_create({"max_topic_size": "512 MiB"}, 1)  # below the 1 GiB default segment
    assert err.value.key == "max_topic_size"
    assert isinstance(err.value, InvalidOptionValue)
    ok = parse_create({"max_topic_size": "512 MiB", "segment_size": "256 MiB"}, 1)
    assert ok.max_topic_size == 512 * MIB


def test_preallocation_is_capped_at_64_gib_per_create():
    assert parse_create({"preallocate_segments": True}, 64).preallocate_segments
    with pytest.raises(InvalidOptionValue) as err:
        parse_create({"preallocate_segments": True}, 65)
    assert err.value.key == "preallocate_segments"
    assert parse_create({"preallocate_segments": True, "segment_size": "512 MiB"}, 128).preallocate_segments
    assert not parse_create({"preallocate_segments": False}, 100_000).preallocate_segments


def test_update_patches_only_the_updatable_keys():
    created = parse_create({"segment_size": "256 MiB", "enforce_fsync": True}, 2)
    updated = created.apply_update({"message_expiry": "1h", "compression_algorithm": "gzip"})
    assert updated.message_expiry_us == 3_600 * 10**6
    assert updated.compression_algorithm == "gzip"
    assert updated.segment_size == 256 * MIB and updated.enforce_fsync  # untouched
    assert updated.explicit == {"segment_size", "enforce_fsync", "message_expiry", "compression_algorithm"}
    assert updated.apply_update({}) == updated
    assert updated.apply_update({"message_expiry": 0}) == updated  # sentinel: keep
    assert updated.apply_update({"message_expiry": "none"}).message_expiry_us is None
    assert updated.apply_update({"max_topic_size": "1 GiB"}).max_topic_size == GIB
    with pytest.raises(InvalidTopicSize):
        updated.apply_update({"max_topic_size": "100 MiB"})
    for key, value, why in [("segment_size", "128 MiB", "create-only"), ("preallocate_segments", True, "create-only"),
                            ("bogus", 1, "not accepted")]:
        with pytest.raises(UnsupportedOptionKey) as err:
            updated.apply_update({key: value})
        assert err.value.key == key and why in str(err.value), str(err.value)
    relaxed = updated.apply_update({"enforce_fsync": False, "messages_required_to_save": 10,
                                    "size_of_messages_required_to_save": "4 KiB"})
    assert not relaxed.enforce_fsync and relaxed.segment_size == 256 * MIB
    policy = relaxed.to_segment_policy(2)
    assert (policy.enforce_fsync, policy.messages_required_to_save, policy.size_of_messages_required_to_save) == (
        False, 10, 4096)
    assert relaxed.apply_update({"durability": "persisted"}).to_segment_policy(2).enforce_fsync
    with pytest.raises(InvalidOptionValue):
        updated.apply_update({"compression_algorithm": "lz4"})
    assert created.compression_algorithm == "none"  # frozen: updates return new objects


def test_segment_policy_splits_the_topic_cap_per_partition():
    opts = parse_create(
        {
            "segment_size": "16 MiB",
            "max_topic_size": "1 GiB",
            "message_expiry": "10s",
            "enforce_fsync": True,
            "messages_required_to_save": 10,
            "size_of_messages_required_to_save": 4096,
            "preallocate_segments": True,
        },
        4,
    )
    assert opts.to_segment_policy(4, validate_checksum=False) == SegmentPolicy(
        segment_size=16 * MIB,
        enforce_fsync=True,
        messages_required_to_save=10,
        size_of_messages_required_to_save=4096,
        message_expiry_us=10 * 10**6,
        max_partition_bytes=256 * MIB,
        preallocate_segments=True,
        validate_checksum=False,
    )
    assert opts.to_segment_policy(1000).max_partition_bytes == 16 * MIB  # floored at one segment
    defaults = TopicOptions().to_segment_policy(3)
    assert (defaults.max_partition_bytes, defaults.message_expiry_us) == (0, 0)
    assert defaults.validate_checksum


def test_dict_round_trip():
    for opts in (
        TopicOptions(),
        parse_create({"message_expiry": "7 days", "segment_size": "1 MiB", "max_topic_size": "5 MiB"}, 2),
        parse_create({"compression_algorithm": "gzip", "preallocate_segments": True, "enforce_fsync": "false"}, 1),
    ):
        data = opts.to_dict()
        assert TopicOptions.from_dict(data) == opts
        assert all(isinstance(v, (str, int, bool, list)) for v in data.values())
    with pytest.raises(UnsupportedOptionKey):
        TopicOptions.from_dict({"nope": 1})
    with pytest.raises(InvalidOptionValue):
        TopicOptions.from_dict({"explicit": ["nope"]})


def test_describe_lists_the_catalog_with_encoded_defaults():
    specs = describe()
    assert [s.key for s in specs] == list(to.TOPIC_OPTION_KEYS)
    by_key = {s.key: s for s in specs}
    assert (by_key["compression_algorithm"].kind, by_key["compression_algorithm"].default_bytes) == (2, b"none")
    assert by_key["message_expiry"].kind == 12
    assert by_key["message_expiry"].default_bytes == struct.pack("<Q", U64_MAX)
    assert by_key["segment_size"].default_bytes == struct.pack("<Q", GIB)
    assert (by_key["enforce_fsync"].kind, by_key["enforce_fsync"].default_bytes) == (3, b"\x00")
    assert by_key["messages_required_to_save"].kind == 11
    assert by_key["messages_required_to_save"].default_bytes == struct.pack("<I", 1024)
    assert by_key["messages_required_to_save"].kind_name == "uint32"
    assert all(s.description for s in specs)


def test_durability_keys_the_sdk_always_sends_are_accepted():
    # apache-iggy 0.9 sends both keys as "replicated" on every create_topic.
    opts = parse_create({"durability": "replicated", "consumer_offset_durability": "Persisted"}, partitions_count=1)
    assert opts.durability == "replicated" and opts.consumer_offset_durability == "persisted"
    assert parse_create({"durability": "persisted"}, 1).to_segment_policy(1).enforce_fsync is True
    with pytest.raises(InvalidOptionValue):
        parse_create({"durability": "eventually"}, partitions_count=1)


def test_compaction_options_parse_update_and_reach_the_segment_policy():
    opts = parse_create({"cleanup_policy": "Delete, compact", "segment_roll": "5s", "delete_retention": 1000}, 1)
    assert opts.cleanup_policy == "compact,delete" and opts.compact and opts.delete
    assert opts.segment_roll_us == 5_000_000 and opts.delete_retention_us == 1000
    updated = opts.apply_update({"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.1", "max_compaction_lag": "1m"})
    policy = updated.to_segment_policy(1)
    assert policy.compact and policy.min_cleanable_dirty_ratio == 0.1 and policy.max_compaction_lag_us == 60_000_000
    assert policy.segment_roll_us == 5_000_000
    # compact without delete: expiry and size caps delete nothing (as Kafka)
    capped = parse_create({"cleanup_policy": "compact", "message_expiry": "1h", "max_topic_size": "2 GiB"}, 1)
    assert capped.to_segment_policy(1).message_expiry_us == 0 and capped.to_segment_policy(1).max_partition_bytes == 0
    assert TopicOptions.from_dict(updated.to_dict()) == updated
    for key, bad in (("cleanup_policy", "shred"), ("cleanup_policy", ""), ("min_cleanable_dirty_ratio", "1.5"),
                     ("min_cleanable_dirty_ratio", "x"), ("segment_roll", 0), ("max_compaction_lag", "soon")):
        with pytest.raises(InvalidOptionValue):
            parse_create({key: bad}, 1)
