"""QA, session 12: :mod:`test_qa_session12_crash` with ``HEADWATER_NO_EXTENSIONS=1`` (the pure-Python
hot loops), in a file of its own so pytest-xdist runs the two in parallel. One kill-restart cycle
in the default run (the compiled test does two), five with ``-m soak``."""

from __future__ import annotations

import pytest

from test_qa_session12_crash import sigkill_across_rolls_with_a_small_window_and_a_tight_budget

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)


@pytest.mark.parametrize("cycles", [1, pytest.param(5, marks=pytest.mark.soak)])
def test_sigkill_across_rolls_with_a_small_window_and_a_tight_budget_pure_python(tmp_path, cycles):
    sigkill_across_rolls_with_a_small_window_and_a_tight_budget(tmp_path, "pure-python", cycles)
