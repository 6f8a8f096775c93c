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
