"""QA, session 12: :mod:`test_qa_session12_crash` with ``HEADWATER_NO_EXTENSIONS=1`` (the pure-Python
hot loops), in a file of its own so pytest-xdist runs the two in parallel."""

from __future__ import annotations

from test_qa_session12_crash import sigkill_across_rolls_with_a_small_window_and_a_tight_budget


def test_sigkill_across_rolls_with_a_small_window_and_a_tight_budget_pure_python(tmp_path):
    sigkill_across_rolls_with_a_small_window_and_a_tight_budget(tmp_path, "pure-python")
