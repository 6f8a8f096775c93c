"""The three implementations of the Kafka conversion: the compiled loops (``_convert_c``), their
pure-Python twin (``_convert_py``) and the reference code alone (``convert.py`` with no fast loop).
A test module that sets ``pytestmark = pytest.mark.usefixtures("implementation")`` runs once
with each."""

from __future__ import annotations

import pytest

from headwater.codec.kafka import _convert_py, convert

COMPILED = convert._compiled
LOOPS = {"compiled": COMPILED, "python": _convert_py, "reference": None}


@pytest.fixture(params=list(LOOPS))
def implementation(request, monkeypatch):
    """Select one implementation for the test (the compiled one is skipped when not built)."""
    if request.param == "compiled" and COMPILED is None:
        pytest.skip("headwater.codec.kafka._convert_c is not built (or HEADWATER_NO_EXTENSIONS=1)")
    monkeypatch.setattr(convert, "_loops", LOOPS[request.param])
    return request.param
