"""A directory whose fdatasync fails for real with EIO (a uniquely named module, imported by tests).

ext4 on a loop device whose backing file is a sparse 64 MiB file on a 6 MiB tmpfs:
the filesystem believes it has room, so writes land in the page cache, and once
about 6 MiB were written back the device fails writes; fdatasync then returns EIO
(and, as Linux does, reports it once: the next fdatasync succeeds). Needs root,
losetup, mkfs.ext4 and mount; :func:`failing_disk` skips the test otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def failing_disk(workdir: Path, backing_mb: int = 6):
    """Yield a mounted directory under ``workdir`` whose writeback fails after ~``backing_mb`` MiB."""
    if os.geteuid() != 0 or not all(shutil.which(c) for c in ("losetup", "mkfs.ext4", "mount")):
        pytest.skip("needs root, losetup and mkfs.ext4 (a loop device on a full tmpfs)")
    back, mnt = workdir / "back", workdir / "mnt"
    back.mkdir()
    mnt.mkdir()
    loop = None
    try:
        _sh("mount", "-t", "tmpfs", "-o", f"size={backing_mb}m", "tmpfs", str(back))
        image = back / f"disk-{uuid.uuid4().hex}.img"
        with open(image, "wb") as f:
            f.truncate(64 << 20)
        loop = _sh("losetup", "-f", "--show", str(image))
        _sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", loop)
        _sh("mount", loop, str(mnt))
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"cannot build a failing disk here: {exc}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        subprocess.run(["umount", "-l", str(back)], capture_output=True)
