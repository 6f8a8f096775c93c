"""QA, session 11: :func:`test_qa_session11.sigkill_at_random_moments_across_rolls_with_spares` with
``HEADWATER_NO_EXTENSIONS=1`` (the pure-Python hot loops), in a file of its own so pytest-xdist
runs it beside the compiled one. One kill-restart cycle in the default run (the compiled test
does two: a kill of a recovered server); six with ``-m soak``."""

from __future__ import annotations

import pytest

from test_qa_session11 import sigkill_at_random_moments_across_rolls_with_spares

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)


@pytest.mark.parametrize("cycles", [1, pytest.param(6, marks=pytest.mark.soak)])
def test_sigkill_at_random_moments_across_rolls_with_spares_pure_python(tmp_path, cycles):
    sigkill_at_random_moments_across_rolls_with_spares(tmp_path, "pure-python", cycles)
