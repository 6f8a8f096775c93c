"""QA, session 11: a data directory on tmpfs (no block reservation there; spares are still made)
under SIGKILL while both protocols produce across rolls of 1 MiB segments (split from
``test_qa_session11``, whose helpers it uses, so pytest-xdist can run it on another worker).
One kill-restart cycle in the default run, four with ``-m soak``."""

from __future__ import annotations

import os
import random

import pytest

from hw_server import ServerProcess, free_port
from test_qa_session11 import _setup, check_acked, mounted, offline_checks, produce_then_kill, spare_files
from test_robustness_wire import run

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)


@pytest.mark.parametrize("cycles", [1, pytest.param(4, marks=pytest.mark.soak)])
def test_tmpfs_data_dir_spares_without_reservations_survive_sigkill(tmp_path, cycles):
    with mounted("tmpfs", tmp_path / "mnt", 1024) as mnt:
        server = ServerProcess(mnt / "data", free_port(), free_port())
        server.start()
        try:
            run(_setup(server))
            rng = random.Random("qa11-tmpfs")
            acked: dict = {}
            for _ in range(cycles):
                produce_then_kill(server, acked, rng, rng.uniform(1.5, 3.0))
                for path in spare_files(server.data_dir):  # made, with nothing reserved
                    assert os.stat(path).st_size == 0
                server.start()
                assert not spare_files(server.data_dir)
                check_acked(server, acked)
            server.stop()
            offline_checks(server)
        finally:
            if server.proc is not None:
                server.stop()
