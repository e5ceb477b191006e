"""The kernel's limits on a local job: its own control group holds it to the memory and CPUs
it asked for, including the memory the watchdog cannot see (docs/security.md, "Limits").

Real jobs in real control groups: the worker must be root (as in CI, where a machine
without them fails these tests rather than skipping them). The same attacks under the
watchdog alone show each hole the group closes.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.local import cgroup
from scheduling.decisions.types import NodeView
from tests.conftest import in_ci
from tests.unit.scheduling.local_backend.helpers import finished, request, running

NODE = NodeView(name="n1", cpus=8, memory_mib=16 * 1024, gpus=0)

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("control groups are made only when the worker is root")


@pytest.fixture
def make(make):
    def _make(**options):
        backend = make([NODE], **options)
        if options.get("cgroups", "auto") == "auto":
            assert backend.cgroups, backend.cgroups_off  # in CI: never a silent fallback
        return backend

    return _make


def group(backend, hierarchy: str, key: str) -> Path:
    """Where the job `key` of `backend` has its group in `hierarchy` (cgroup.py)."""
    return Path(backend.cgroups["where"][hierarchy], f"{backend.cgroups['tag']}-{key}")


# A memory file written, sent to the job's own socket and closed: the only descriptor left is
# in flight, so no process holds it and no /proc file shows it.
IN_FLIGHT = """
import os, socket, time
a, b = socket.socketpair(socket.AF_UNIX)
for _ in range(3):
    fd = os.memfd_create("hidden")
    for _ in range(64):
        os.write(fd, bytes(1 << 20))
    socket.send_fds(a, [b"x"], [fd])
    os.close(fd)
print("hid 192 MiB", flush=True)
time.sleep(3)
print("still running", flush=True)
"""

# A System V segment written 16 MiB at a time, each attached only while it is written: no
# process maps more than 16 MiB of it at once, and its IPC namespace keeps it whole.
SYSV = """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, 192 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
assert shmid >= 0, ctypes.get_errno()
for part in range(12):
    at = libc.shmat(shmid, None, 0)
    ctypes.memset(at + (part << 24), 1, 1 << 24)
    libc.shmdt(ctypes.c_void_p(at))
    time.sleep(0.3)  # the watchdog looks meanwhile
print("hid 192 MiB", flush=True)
time.sleep(3)
print("still running", flush=True)
"""


@pytest.mark.parametrize("code", [IN_FLIGHT, SYSV], ids=["memfd-in-flight", "sysv-shm"])
def test_memory_the_watchdog_cannot_see_is_held_to_the_request_by_the_group(make, code):
    hidden = ["python3", "-c", code]
    watchdog = make(cgroups="off")
    watchdog.submit(request("unseen", hidden, memory_mib=64))
    job = finished(watchdog, "unseen", timeout=30)
    # The hole: 192 MiB held past a 64 MiB request, the job never stopped.
    assert job.state is JobState.SUCCEEDED, (job.reason, watchdog.log("unseen"))
    assert watchdog.log("unseen") == "hid 192 MiB\nstill running\n"

    backend = make()
    backend.submit(request("seen", hidden, memory_mib=64))
    job = finished(backend, "seen", timeout=30)
    assert job.state is JobState.FAILED, (job.reason, backend.log("seen"))
    assert job.reason == (
        "memory limit: the job used all of the 64 MiB it asked for (resources.memory) "
        "and the kernel refused it more; killed"
    )
    assert "hid" not in backend.log("seen")


def test_files_in_tmp_and_dev_shm_are_memory_the_group_counts(make):
    """48 MiB in /tmp and 48 MiB in /dev/shm are over a 64 MiB request: the kernel refuses
    the second write part way (what the job's tmpfs held is named when the watchdog saw it
    before the job was gone)."""
    backend = make()
    fill = "head -c 48M /dev/zero > /tmp/a && head -c 48M /dev/zero > /dev/shm/b; sleep 5"
    backend.submit(request("tmpfs", ["bash", "-c", fill], memory_mib=64))
    job = finished(backend, "tmpfs", timeout=30)
    assert job.state is JobState.FAILED, (job.reason, backend.log("tmpfs"))
    assert re.fullmatch(
        r"memory limit: the job used all of the 64 MiB it asked for \(resources\.memory\)"
        r"(, 48 MiB in /tmp, \d+ MiB in /dev/shm,)? and the kernel refused it more; killed",
        job.reason,
    ), job.reason


def test_a_job_within_its_request_runs_and_its_group_goes_with_it(make):
    backend = make()
    fits = "x = bytearray(100 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('ok')"
    backend.submit(request("fits", ["python3", "-c", fits], memory_mib=192))
    job = finished(backend, "fits", timeout=30)
    assert (job.state, backend.log("fits")) == (JobState.SUCCEEDED, "ok\n")
    assert not group(backend, "memory", "fits").exists()
    assert not group(backend, "cpu", "fits").exists()


def test_the_group_holds_the_request_and_the_cpus_and_the_job_cannot_leave_it(make):
    backend = make()
    escape = (
        "exec 2>/dev/null; for f in /sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/cgroup.procs; do "
        'echo 0 > "$f" && echo "LEFT via $f"; done; '
        "mount -t cgroup -o memory none /mnt && echo MOUNTED; echo tried; sleep 30"
    )
    backend.submit(request("held", ["bash", "-c", escape], cpus=2, memory_mib=96))
    assert running(backend, "held").state is JobState.RUNNING
    state = backend.store.read_state("held")
    deadline = time.monotonic() + 10
    while "tried" not in backend.log("held") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert backend.log("held") == "tried\n"
    memory, cpu = group(backend, "memory", "held"), group(backend, "cpu", "held")
    assert (memory / "memory.limit_in_bytes").read_text() == f"{96 << 20}\n"
    assert (cpu / "cpu.cfs_quota_us").read_text() == f"{2 * cgroup.PERIOD_US}\n"
    # Every process of the job is in it: the sandbox's too.
    job_pids = {int(p) for p in (memory / "cgroup.procs").read_text().split()}
    assert state["child_pid"] in job_pids and state["sandbox_pid"] in job_pids
    assert {int(p) for p in (cpu / "cgroup.procs").read_text().split()} == job_pids
    backend.cancel("held")
    assert finished(backend, "held").state is JobState.CANCELLED
    assert not memory.exists() and not cpu.exists()


def test_a_job_gets_no_more_cpu_time_than_the_cpus_it_asked_for(make):
    """Three busy processes in a job that asked for one CPU, for 2 s: the kernel gives them
    one CPU's worth (the watchdog alone lets them take every idle core)."""
    backend = make()
    spin = (
        "import os, time\n"
        "for _ in range(2):\n"
        "    if os.fork() == 0: break\n"
        "end = time.monotonic() + 2\n"
        "while time.monotonic() < end: pass\n"
        "t = os.times()\n"
        "print(round(t.user + t.system, 2), flush=True)\n"
    )
    backend.submit(request("spin", ["python3", "-c", spin], cpus=1, memory_mib=128))
    job = finished(backend, "spin", timeout=30)
    assert job.state is JobState.SUCCEEDED, (job.reason, backend.log("spin"))
    used = sum(float(line) for line in backend.log("spin").split())
    # One CPU for 2 s, with the quota's period of slack; without the group, up to 6 s.
    assert used <= 2.0 * 1.15 + 0.1, backend.log("spin")


def test_a_configured_folder_that_cannot_hold_groups_fails_jobs_rather_than_run_them(
    make, tmp_path
):
    backend = make(cgroups=str(tmp_path))
    backend.submit(request("unbounded", ["true"]))
    job = finished(backend, "unbounded")
    assert (job.state, job.reason) == (
        JobState.FAILED,
        f"SWITCHYARD_JOB_CGROUP: {tmp_path} is not on a cgroup2 file system",
    )


def test_locate_names_why_a_job_has_no_group(tmp_path, monkeypatch):
    assert cgroup.locate("off", str(tmp_path)) == (
        None,
        "switched off (SWITCHYARD_JOB_CGROUP=off)",
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    assert cgroup.locate("plain", str(tmp_path)) == (None, "plain is not an absolute path")
    assert cgroup.locate(str(plain), str(tmp_path)) == (
        None,
        f"{plain} is not on a cgroup2 file system",
    )
    (tmp_path / "link").symlink_to(plain)
    assert cgroup.locate(str(tmp_path / "link"), str(tmp_path)) == (
        None,
        f"{tmp_path / 'link'} is a link (name the folder it leads to)",
    )
    # cgroup v2 does not run on this machine: the folder stands in for a cgroup2 mount.
    monkeypatch.setattr(cgroup, "_v2_mounts", lambda: [str(tmp_path)])
    where, why = cgroup.locate(str(plain), str(tmp_path))
    assert where is None and why.startswith(f"{plain} is not a cgroup v2 folder: ")
    (plain / "cgroup.subtree_control").write_text("cpu io\n")
    where, why = cgroup.locate(str(plain), str(tmp_path))
    assert (where, why) == (
        None,
        f"{plain}/cgroup.subtree_control lacks memory (write '+memory +cpu' to it)",
    )
    (plain / "cgroup.subtree_control").write_text("cpu io memory\n")  # delegated
    where, why = cgroup.locate(str(plain), str(tmp_path))
    assert why == "" and where is not None
    assert where["where"] == {"unified": str(plain)} and where["tag"].startswith("r")
    # Written with a doubled slash or a trailing one: the same folder, not "a link".
    assert cgroup.locate(f"/{plain}/", str(tmp_path))[0]["where"] == {"unified": str(plain)}
    # Another backend's folder: another tag, so two jobs of one key never share a group.
    assert cgroup.locate(str(plain), str(tmp_path / "other"))[0]["tag"] != where["tag"]


@pytest.mark.django_db
def test_manage_py_check_reports_a_cgroup_folder_that_cannot_hold_jobs_groups(settings, tmp_path):
    from django.core import checks

    local = settings.COMPUTE_BACKENDS["local"]
    assert "switchyard.E104" not in {m.id for m in checks.run_checks()}
    options = {**local["OPTIONS"], "cgroups": str(tmp_path)}
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "local": {**local, "OPTIONS": options},
    }
    [error] = [m for m in checks.run_checks() if m.id == "switchyard.E104"]
    assert error.msg == (
        f"SWITCHYARD_JOB_CGROUP: {tmp_path} is not on a cgroup2 file system; got {tmp_path}"
    )


@pytest.mark.parametrize(
    ("files", "blamed"),
    [
        ({"memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"}, True),
        # Killed by the host's out-of-memory killer: the job never reached its limit.
        ({"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\n"}, False),
        # It reached its limit (page cache is reclaimed there), and later the host killed it.
        ({"memory.events": "low 0\nhigh 0\nmax 5\noom 0\noom_kill 1\n"}, False),
        (
            {
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
                "memory.limit_in_bytes": "67108864\n",
                "memory.max_usage_in_bytes": "67108864\n",
            },
            True,
        ),
        (
            {
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
                "memory.limit_in_bytes": "67108864\n",
                "memory.max_usage_in_bytes": "20000000\n",
            },
            False,
        ),
    ],
    ids=["v2-own-limit", "v2-host", "v2-host-after-reclaim", "v1-own-limit", "v1-host"],
)
def test_only_a_kill_at_the_jobs_own_limit_is_blamed_on_its_request(tmp_path, files, blamed):
    """The counters as cgroup v2 and v1 write them (v2 does not run on this machine)."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert cgroup.over_limit([str(tmp_path)]) is blamed


def test_on_cgroup_v1_a_kill_is_blamed_on_the_limit_only_when_the_kernel_noticed_it(tmp_path):
    """v1 counts kills by any killer: its peak at its limit (page cache counts) and a later
    kill by the host's would look like its own. The kernel's notice tells them apart."""
    files = {
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        "memory.limit_in_bytes": "67108864\n",
        "memory.max_usage_in_bytes": "67108864\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    folder = str(tmp_path)
    cgroup._OOM_NOTICE[folder] = notice = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        assert not cgroup.over_limit([folder])  # the host's killer: no notice
        os.eventfd_write(notice, 1)
        assert cgroup.over_limit([folder])
        assert cgroup.over_limit([folder])  # read once, remembered
    finally:
        cgroup.remove([folder], wait_s=0)
    assert folder not in cgroup._OOM_NOTICE and folder not in cgroup._OOM_SEEN


def _own_v1(controller: str) -> Path:
    where, why = cgroup.locate("auto", "/nonexistent")
    assert where is not None, why
    return Path(where["where"][controller]).parent


def test_the_kernel_notices_a_groups_own_out_of_memory_kill():
    base = _own_v1("memory") / f"test-oom-{os.getpid()}"
    limits = {"where": {"memory": str(base)}, "tag": "t", "memory_bytes": 32 << 20, "cpus": 1}
    [folder] = cgroup.make(limits, "oom")
    try:
        assert folder in cgroup._OOM_NOTICE and not cgroup.over_limit([folder])
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            try:
                cgroup.join([folder])
                _held = b"x" * (96 << 20)
            finally:
                os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
        assert cgroup.over_limit([folder])
    finally:
        cgroup.remove([folder])
        base.rmdir()


def test_a_job_gets_no_more_cpu_time_than_the_groups_above_it_allow():
    """cgroup v1 refuses a group a quota over its parent's (the job would fail to start):
    it gets its parent's."""
    base = _own_v1("cpu") / f"test-quota-{os.getpid()}"
    base.mkdir()
    try:
        (base / "cpu.cfs_quota_us").write_text("50000")  # half a CPU for all below it
        limits = {"where": {"cpu": str(base)}, "tag": "t", "memory_bytes": 1 << 30, "cpus": 4}
        [folder] = cgroup.make(limits, "big")
        try:
            assert Path(folder, "cpu.cfs_quota_us").read_text().strip() == "50000"
        finally:
            cgroup.remove([folder])
    finally:
        base.rmdir()


def test_favordynmods_is_read_from_the_cgroup_mounts(tmp_path):
    mounts = tmp_path / "mounts"
    v1 = "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
    mounts.write_text(v1 + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
    assert cgroup.lacks_dynmods(str(mounts))
    mounts.write_text(v1 + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime,favordynmods 0 0\n")
    assert not cgroup.lacks_dynmods(str(mounts))
    mounts.write_text(v1)  # no cgroup2 for the script to set it on: nothing to warn of
    assert not cgroup.lacks_dynmods(str(mounts))
