"""Both implementations of the Kafka conversion loops: the compiled ``_convert_c`` and the
pure-Python reference in ``convert.py``. A test module that sets
``pytestmark = pytest.mark.usefixtures("implementation")`` runs once with each."""

from __future__ import annotations

import pytest

from headwater.codec.kafka import convert

COMPILED = convert._compiled


@pytest.fixture(params=["compiled", "python"])
def implementation(request, monkeypatch):
    """Select one implementation for the test (the compiled one is skipped when not built)."""
    if request.param == "compiled":
        if COMPILED is None:
            pytest.skip("headwater.codec.kafka._convert_c is not built (or HEADWATER_NO_EXTENSIONS=1)")
        monkeypatch.setattr(convert, "_compiled", COMPILED)
    else:
        monkeypatch.setattr(convert, "_compiled", None)
    return request.param
