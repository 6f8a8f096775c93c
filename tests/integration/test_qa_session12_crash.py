"""QA, session 12, about branches hw12-prealloc and hw12-startstop together: SIGKILL at random
moments while the apache-iggy SDK (default policy and ``enforce_fsync``) and confluent-kafka
(acks=all) produce across rolls of 1 MiB segments, with a window much smaller than a segment
(128 KiB: a top-up every 64 KiB appended, a spare of one window) and a budget that bites
(512 KiB across five partitions: reservations refused and granted in turn), so kills meet
top-ups, spares being made, rolls onto them and the budget's refusals. After each restart every
acknowledged message reads back byte-identical at its offset, offsets contiguous, no spare is
left and nothing is held past any file's data; at the end a clean stop is followed by a
clean ``headwater verify``. (Session 11's helpers: tests/integration/test_qa_session11.py.)"""

from __future__ import annotations

import glob
import os
import random

import pytest

from headwater.storage.local import prealloc
from hw_server import ServerProcess, free_port
from test_qa_session11 import _setup, check_acked, offline_checks, partition_dirs, produce_then_kill, spare_files
from test_robustness_wire import healthy, run

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)


def held_anywhere(data_dir) -> list[str]:
    out = []
    for d in partition_dirs(data_dir):
        for path in glob.glob(os.path.join(d, "*")):
            if os.path.isfile(path) and prealloc.held_past_data(os.stat(path)) > prealloc.SLACK_BYTES:
                out.append(path)
    return out


def sigkill_across_rolls_with_a_small_window_and_a_tight_budget(tmp_path, workers: str, cycles: int) -> None:
    env = {"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": str(128 << 10),
           "HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES": str(512 << 10)}
    if workers == "pure-python":
        env["HEADWATER_NO_EXTENSIONS"] = "1"
    server = ServerProcess(tmp_path / "data", free_port(), free_port(), extra_env=env)
    server.start()
    try:
        run(_setup(server))
        rng = random.Random(f"qa12-crash-{workers}")
        acked: dict = {}
        for _ in range(cycles):
            produce_then_kill(server, acked, rng, rng.uniform(1.0, 3.0))
            server.start()
            assert not spare_files(server.data_dir), "a spare segment survived the restart's recovery"
            assert not held_anywhere(server.data_dir), "recovery left reserved blocks past a file's data"
            check_acked(server, acked)
        assert len(acked) > 200
        healthy(server)
        assert server.stop() == 0
        assert not held_anywhere(server.data_dir), "a clean stop left reserved blocks past a file's data"
        offline_checks(server)
    finally:
        if server.proc is not None:
            server.stop()


# Two kill-restart cycles in the default run (the second kills a recovered server under the same
# budget), five with ``-m soak`` (README, "Soak and fuzz runs"); the kill moments come from a seeded
# generator, so the default run's kills are the first ones of the soak's.
@pytest.mark.parametrize("cycles", [2, pytest.param(5, marks=pytest.mark.soak)])
def test_sigkill_across_rolls_with_a_small_window_and_a_tight_budget(tmp_path, cycles):
    sigkill_across_rolls_with_a_small_window_and_a_tight_budget(tmp_path, "compiled", cycles)
