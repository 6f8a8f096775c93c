"""The test run's own settings (pyproject ``[tool.pytest.ini_options]``, tests/conftest.py).

QA session 13: ``--no-loadscope-reorder`` (pytest-xdist's option, so its ``--dist loadfile``
keeps the slow-first file order) was put in ``addopts``, which made every pytest run without
xdist refuse to start (``-p no:xdist``, the usual way to debug a test with ``--pdb``:
"unrecognized arguments: --no-loadscope-reorder")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_without_xdist_starts():
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                        "--collect-only", "tests/unit/test_config.py"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tests collected" in p.stdout or "collected" in p.stdout, p.stdout


def test_xdist_keeps_the_collected_file_order(request):
    """With xdist loaded, its loadscope reorder is off (tests/conftest.py's slow-first order holds)."""
    if not request.config.pluginmanager.hasplugin("xdist"):
        return
    assert request.config.getoption("loadscopereorder") is False
