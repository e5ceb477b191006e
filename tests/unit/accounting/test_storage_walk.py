"""The storage collector's walk holds against what a member can write: a tree deeper than
PATH_MAX, a link in place of a folder, a FIFO, a folder it may not read — each folder is still
measured as `du -sxB1` measures it, or reported, and every other folder is still sent."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from accounting import storage_collector
from accounting.models import UsageRecord
from tests.unit.accounting.test_storage_metering import _samples, areas, du, token

__all__ = ["areas", "token"]  # fixtures


def _deep(top: Path, levels: int, name: str) -> None:
    """`levels` nested folders named `name` below `top`, made relative to each other's
    handle (their path is longer than PATH_MAX), and a file at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        bottom = os.open("bottom.bin", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(bottom, os.urandom(100_000))
        os.close(bottom)
    finally:
        os.close(fd)


def test_a_tree_deeper_than_path_max_is_measured_and_the_others_still_sent(
    areas, token, live_server
):
    materials = areas / "projects" / "materials"
    _deep(materials / "data", 25, "d" * 200)  # 5000 bytes of path below it
    with contextlib.suppress(OSError):
        os.stat(materials / "data" / "/".join(["d" * 200] * 25))
        raise AssertionError("the tree is not past PATH_MAX")
    done = storage_collector.collect(live_server.url, token, every=3600)
    assert (done.folders, done.unreadable) == (3, 0)
    projects = _samples("projects")
    assert projects[("materials", "")] == du(materials)  # the bottom file counted
    assert du(materials) > 100_000
    assert projects[("climate", "")] == du(areas / "projects" / "climate")
    assert sum(v for (_, user), v in _samples("home").items() if user == "alice") == du(
        areas / "home" / "alice"
    )


def test_a_link_in_place_of_a_folder_is_not_followed(areas):
    materials, climate = areas / "projects" / "materials", areas / "projects" / "climate"
    _write_big(climate / "big.bin")
    shutil.rmtree(materials / "data")
    (materials / "data").symlink_to(climate)  # another project's tree
    followed = subprocess.run(
        ["du", "-sxLB1", str(materials)], capture_output=True, text=True, check=True
    )
    size = storage_collector.measure(str(materials))
    assert size is not None
    assert size.allocated == du(materials) < int(followed.stdout.split()[0]) - 1_000_000
    # The area's own folder as a link is not measured at all (the portal makes none).
    os.rename(materials, areas / "projects" / "materials-moved")
    (areas / "projects" / "materials").symlink_to(climate)
    assert storage_collector.measure(str(areas / "projects" / "materials")) is None


def test_a_link_swapped_in_while_it_walks_is_never_followed(areas):
    """A member swaps a folder for a link to another project's folder and back, over and
    over, while the collector walks: a walk by path follows the link about one time in four
    (after it looked at the folder, before it lists it); a walk by handles never does."""
    materials, climate = areas / "projects" / "materials", areas / "projects" / "climate"
    _write_big(climate / "big.bin")
    victim, aside = materials / "victim", materials / "victim.aside"
    victim.mkdir()
    for i in range(50):  # siblings to walk between looking at the folder and listing it
        (materials / f"sibling{i}").mkdir()
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            victim.rename(aside)
            victim.symlink_to(climate)
            time.sleep(0.0003)
            victim.unlink()
            aside.rename(victim)
            time.sleep(0.0003)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        sizes = [storage_collector.measure(str(materials)) for _ in range(60)]
    finally:
        stop.set()
        swapper.join()
    assert all(s is not None and s.allocated < du(materials) + 1_000_000 for s in sizes)


def _write_big(path: Path) -> None:
    path.write_bytes(os.urandom(2_000_000))


def test_a_fifo_is_counted_not_opened(areas):
    materials = areas / "projects" / "materials"
    os.mkfifo(materials / "data" / "pipe")
    result: list[storage_collector.Size | None] = []
    walker = threading.Thread(
        target=lambda: result.append(storage_collector.measure(str(materials))), daemon=True
    )
    walker.start()
    walker.join(timeout=30)
    assert not walker.is_alive(), "the walk hangs on a FIFO"
    assert result[0] is not None and result[0].allocated == du(materials)


@contextlib.contextmanager
def _as_a_plain_owner() -> Iterator[None]:
    """This thread without the capabilities that let root read any folder (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH), so a folder's mode holds for it as for any account; back after."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable × 2
    assert libc.capget(header, data) == 0, os.strerror(ctypes.get_errno())
    saved = data[0]
    data[0] &= ~((1 << 1) | (1 << 2))
    assert libc.capset(header, data) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        data[0] = saved
        assert libc.capset(header, data) == 0, os.strerror(ctypes.get_errno())


def test_a_folder_it_cannot_read_is_reported_and_the_rest_goes_on(
    areas, token, live_server, caplog
):
    materials, climate = areas / "projects" / "materials", areas / "projects" / "climate"
    locked = materials / "locked"
    locked.mkdir()
    (locked / "inside").mkdir()
    _write_big(locked / "inside" / "secret.bin")
    locked.chmod(0)
    whole_home = du(areas / "home" / "alice")
    caplog.set_level(logging.WARNING, logger=storage_collector.__name__)
    try:
        with _as_a_plain_owner():
            with contextlib.suppress(PermissionError):
                os.listdir(locked)
                raise AssertionError("the folder is still readable")
            climate.chmod(0)  # not even the folder itself
            done = storage_collector.collect(live_server.url, token, every=3600)
    finally:
        locked.chmod(0o755)
        climate.chmod(0o755)
    assert (done.folders, done.unreadable) == (2, 2)
    projects = _samples("projects")
    # What could be read is counted: materials but what is inside locked; climate not sent.
    inside = du(locked) - os.lstat(locked).st_blocks * 512
    assert projects[("materials", "")] == du(materials) - inside
    assert ("climate", "") not in projects
    assert sum(v for (_, user), v in _samples("home").items() if user == "alice") == whole_home
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert any(str(materials) in line and "1 entr" in line for line in lines)
    assert any(str(climate) in line and "not measured" in line for line in lines)
    assert UsageRecord.objects.filter(metric="storage").count() == 3
