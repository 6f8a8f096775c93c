"""Settings for the whole test tree: hypothesis profiles.

``ci`` (what every run loads unless ``HYPOTHESIS_PROFILE`` names another) turns off
hypothesis's per-example deadline: a deadline is a duration assertion, and on a loaded
machine (two pytest-xdist workers, other processes) an example of the byte-walk
differential tests can take longer than its 200 ms default without anything being wrong,
which failed them as DeadlineExceeded/Flaky. Example counts stay those the tests set.
``HYPOTHESIS_PROFILE=thorough`` runs 10x the default count where a test sets none.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", deadline=None)
settings.register_profile("thorough", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    """pytest-xdist's ``--no-loadscope-reorder`` as the default (``--loadscope-reorder`` on the
    command line still turns the reorder on): ``--dist loadfile`` then hands files out in the
    order below instead of re-sorting them. Set here, not in pyproject's addopts, so that a run
    without xdist (``-p no:xdist``, to debug with ``--pdb``) still starts."""
    if config.pluginmanager.hasplugin("xdist") and "--loadscope-reorder" not in config.invocation_params.args:
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """Files marked ``slow`` (``pytestmark = pytest.mark.slow``: the crash loops and the smoke
    runs, tens of seconds each) go first, every file's tests staying together and in order, the
    rest keeping their order. pytest-xdist's ``--dist loadfile`` hands files out in this order,
    one at a time to whichever worker is free, so the long files no longer come last and leave
    one worker alone at the end of the run (longest first: the two workers end close together)."""
    def slow_file(item) -> bool:
        marks = getattr(getattr(item, "module", None), "pytestmark", [])
        return any(m.name == "slow" for m in (marks if isinstance(marks, list) else [marks]))

    items.sort(key=lambda item: not slow_file(item))  # a stable sort: order within each group kept
