"""Core errors -> Iggy codes: one table, covering every core error with a real Iggy code."""

from __future__ import annotations

import inspect

import pytest

from headwater.codec.iggy.codes import IggyErrorCode
from headwater.core import errors as core
from headwater.frontends.iggy.errors import ERROR_CODES, code_for

CORE_ERRORS = [c for _, c in inspect.getmembers(core, inspect.isclass) if issubclass(c, core.BrokerError)]


@pytest.mark.parametrize("cls", CORE_ERRORS, ids=lambda c: c.__name__)
def test_every_core_error_has_an_iggy_code(cls):
    assert cls in ERROR_CODES, f"{cls.__name__} is not mapped in frontends/iggy/errors.py"
    IggyErrorCode(ERROR_CODES[cls])  # raises if the code is not an Iggy error code


def test_well_known_codes():
    assert code_for(core.StreamNotFound("x")) == 1009
    assert code_for(core.TopicNotFound("x")) == 2010
    assert code_for(core.PartitionNotFound("x")) == 3007
    assert code_for(core.Unauthorized("x")) == 41
    assert code_for(core.Unauthenticated("x")) == 40


def test_a_batch_error_carries_its_own_code():
    assert code_for(core.InvalidBatch("frame checksum", 4027)) == 4027
    assert code_for(core.InvalidBatch("batch checksum", 4039)) == 4039


def test_damaged_data_codes():
    """A read that reaches a damaged batch: InvalidMessageChecksum; a fenced partition or a
    refused segment stays CannotReadMessage."""
    assert code_for(core.CorruptBatch("damaged", (1, 2, 3), 15)) == 4027
    assert code_for(core.CorruptData("partition fenced: ...")) == 4011
