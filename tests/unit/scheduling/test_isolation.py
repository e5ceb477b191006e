"""Attacks from inside real local jobs, for every type: no root, no capabilities, no view of
the portal, and every limit enforced with a reason that names it (docs/security.md).

Real processes, real bubblewrap, real Unix accounts (`make test` creates switchyard-job,
sy-alice and sy-bob). Running jobs as other accounts needs root: outside CI, a test run by
another user skips the tests that need it; in CI they must run.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings

from scheduling import host
from scheduling.backends.base import JobState
from scheduling.backends.jobnet import SLIRP_MISSING
from scheduling.backends.local import LocalBackend
from scheduling.decisions.processes import job_processes, process_budget
from scheduling.decisions.types import NodeView
from scheduling.spec import TASK_TYPES
from tests import netprobe
from tests.conftest import ROOT, in_ci
from tests.unit.scheduling.local_backend.helpers import PACK, finished, request, running

NODE = NodeView(name="n1", cpus=64, memory_mib=64 * 1024, gpus=0)
BATCH_TYPES = ("hpc-simulation", "ai-training", "ai-inference")

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("jobs run as other accounts only when the worker is root")


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


@pytest.fixture
def make(make) -> Callable[..., LocalBackend]:
    """conftest's backends, on one node big enough for every attack."""
    return lambda **options: make([NODE], **options)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port that answers, on the host's loopback."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


CHANGES = """mount -o remount,bind,rw /etc 2>/dev/null && echo REMOUNTED-ETC
mount -o remount,bind,rw /usr 2>/dev/null && echo REMOUNTED-USR
echo x > /etc/switchyard-probe 2>/dev/null && echo WROTE-ETC"""


def probe(port: int, changes: str = CHANGES) -> str:
    """What an attacker inside a job tries first (`changes`: what would change a host)."""
    database = settings.DATABASES["default"]["NAME"]
    return f"""
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status
{changes}
for f in /etc/shadow /etc/gshadow /etc/shadow- /etc/gshadow-; do
  head -c1 "$f" >/dev/null 2>&1 && echo "READ $f"
done
test -e {database} && echo SAW-DATABASE
test -e {ROOT}/manage.py && echo SAW-CODE
test -e {settings.VAR_DIR}/secret-key && echo SAW-SECRET-KEY
ls {settings.VAR_DIR}/local-backend >/dev/null 2>&1 && echo SAW-LOCAL-BACKEND
test -e {settings.BROKER_DIR} && echo SAW-BROKER
cat /proc/1/environ >/dev/null 2>&1 && grep -qa DJANGO /proc/1/environ && echo SAW-PORTAL-ENV
echo "processes=$(ls /proc | grep -c '^[0-9]')"
(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo NETWORK
unshare -U true 2>/dev/null && echo NESTED-USERNS
echo done
"""


@pytest.mark.parametrize("type", TASK_TYPES)
def test_a_job_of_any_type_runs_unprivileged_and_sees_nothing_of_the_portal(make, listener, type):
    backend = make()
    backend.submit(request("probe", ["bash", "-c", probe(listener)], type=type))
    job = finished(backend, "probe")
    log = backend.log("probe")
    assert job.state is JobState.SUCCEEDED, (job.reason, log)
    account = uid_of("switchyard-job")
    assert f"uid={account} gid={pwd.getpwuid(account).pw_gid} " in log
    assert "CapEff:\t0000000000000000" in log
    assert "CapPrm:\t0000000000000000" in log
    for leak in ("REMOUNTED", "WROTE-ETC", "READ /etc", "SAW-", "NESTED-USERNS"):
        assert leak not in log, log
    # Its own pid namespace: the sandbox's init, bash and its few commands.
    assert int(log.split("processes=")[1].split()[0]) < 10
    # The host's loopback is not the job's, whatever its type (the probe works: below).
    assert "NETWORK" not in log
    assert log.rstrip().endswith("done")


def test_the_probe_sees_the_portal_when_run_outside_the_sandbox(listener):
    """The checks above can fail: the same probe, as root on the host, finds everything (less
    the tries that would change the host)."""
    import subprocess

    out = subprocess.run(["bash", "-c", probe(listener, "")], capture_output=True, text=True).stdout
    assert "uid=0 " in out and "SAW-CODE" in out and "SAW-SECRET-KEY" in out and "NETWORK" in out


@pytest.fixture
def network() -> Iterator[tuple[netprobe.TestHost, list[tuple[str, str, int]]]]:
    """A test host in a namespace of its own, stand-ins for the control plane, and every
    target a job tries (tests/netprobe.py)."""
    with netprobe.test_host() as host, netprobe.control_plane() as ports:
        yield host, netprobe.targets(ports, host)


def blocking_through_settings(settings, host: netprobe.TestHost) -> None:
    """Three of the test host's addresses are the control plane's: one listed by the
    operator, one the broker's host, one a database's (an alias the portal's open
    connections never use: they keep the settings they started with)."""
    settings.SWITCHYARD_JOB_BLOCKED_NETWORKS = [f"{host.listed}/32"]
    settings.REDIS_URL = f"redis://{host.broker}:6379/0"
    settings.DATABASES = {**settings.DATABASES, "reports": {"HOST": host.database}}


# Django warns of any DATABASES override; this one adds an alias nothing connects to.
IGNORE_DATABASES_OVERRIDE = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@IGNORE_DATABASES_OVERRIDE
def test_no_job_reaches_the_control_plane_and_batch_jobs_reach_other_hosts(make, settings, network):
    host, found = network
    blocking_through_settings(settings, host)
    # From the host's own network every stand-in and the test host answer.
    stand_ins = {
        label
        for label, address, _ in found
        if label.startswith(("db@", "broker@", "web@", "host:"))
        and address != netprobe.SLIRP_GATEWAY
    }
    assert stand_ins <= netprobe.reachable_from_here(found)
    backend = make()
    for type in TASK_TYPES:  # all at once, waited for once
        backend.submit(request(f"net-{type}", netprobe.probe_argv(found), type=type))
    for type in TASK_TYPES:
        job = finished(backend, f"net-{type}")
        log = backend.log(f"net-{type}")
        assert job.state is JobState.SUCCEEDED, (type, job.reason, log)
        assert netprobe.tried(log) == {label for label, _, _ in found}, log
        if type in ("agent", "sandbox"):
            assert netprobe.reached(log) == set(), log  # no network at all
        else:
            # Out through slirp4netns to another host; never the control plane: not the
            # host's loopback, gateway or addresses, not the broker's host, not the
            # operator's networks.
            assert netprobe.reached(log) == {"host:reachable"}, log
            assert f"REACHED host:reachable {netprobe.GREETING}" in log


def test_without_slirp4netns_a_batch_job_fails_and_never_gets_the_hosts_network(make):
    backend = make(slirp4netns="/nonexistent/slirp4netns")
    for type in TASK_TYPES:
        backend.submit(request(f"noslirp-{type}", ["true"], type=type))
    for type in TASK_TYPES:
        job = finished(backend, f"noslirp-{type}")
        if type in ("agent", "sandbox"):  # they have no network anyway
            assert job.state is JobState.SUCCEEDED, (type, job.reason)
        else:
            assert (job.state, job.reason) == (JobState.FAILED, SLIRP_MISSING)
            assert job.started_at is None, type  # it never ran


def test_a_researcher_with_a_cluster_account_runs_as_it_and_others_cannot_read_their_folder(
    make,
):
    backend = make()
    backend.submit(
        request(
            "mine",
            ["sh", "-c", "id -un; echo TOPSECRET > secret; sleep 30"],
            extra={"run_as": "sy-alice"},
        )
    )
    running(backend, "mine")
    mine = Path(backend.root) / "jobs" / "mine" / "work"
    deadline = time.monotonic() + 10
    while not (mine / "secret").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (mine.stat().st_uid, mine.stat().st_mode & 0o777) == (uid_of("sy-alice"), 0o700)
    # Another researcher's job, knowing the path, finds nothing: not in its sandbox, and the
    # folder is not theirs to read even outside it.
    backend.submit(
        request(
            "theirs",
            ["sh", "-c", f"id -un; cat {mine}/secret; ls {mine}; echo end"],
            extra={"run_as": "sy-bob"},
        )
    )
    finished(backend, "theirs")
    log = backend.log("theirs")
    assert log.startswith("sy-bob\n") and "TOPSECRET" not in log and log.endswith("end\n")
    assert backend.log("mine").startswith("sy-alice\n")


@pytest.mark.parametrize(
    ("run_as", "reason"),
    [
        ("root", "refusing to run a job as 'root': it is root"),
        ("no-such-user-xyz", "no Unix account 'no-such-user-xyz'"),
    ],
)
def test_a_job_is_never_started_as_root_or_as_an_account_that_does_not_exist(
    make, tmp_path, run_as, reason
):
    backend = make()
    marker = tmp_path / "ran"
    backend.submit(request("bad-account", ["touch", str(marker)], extra={"run_as": run_as}))
    job = finished(backend, "bad-account")
    assert job.state is JobState.FAILED and job.reason.startswith(reason), job.reason
    assert not marker.exists()


def test_a_service_account_that_is_root_is_refused(make):
    backend = make(job_account="root")
    backend.submit(request("as-root", ["true"]))
    job = finished(backend, "as-root")
    assert (job.state, job.reason) == (
        JobState.FAILED,
        "refusing to run a job as 'root': it is root (uid or gid 0)",
    )


# -- limits -------------------------------------------------------------------------------
# Memory: the watchdog alone, as without control groups (the kernel's: test_cgroup_limits.py).


def test_a_job_over_its_memory_request_is_killed_with_that_reason(make):
    backend = make(cgroups="off")  # the watchdog alone
    touch = "x = bytearray(1536 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
    backend.submit(
        request("greedy", ["python3", "-c", touch + "import time; time.sleep(30)"], memory_mib=256)
    )
    job = finished(backend, "greedy", timeout=30)
    assert job.state is JobState.FAILED
    assert job.reason.startswith("memory limit: the job used ")
    assert "over the 256 MiB it asked for (resources.memory); killed" in job.reason


def test_a_job_within_its_memory_request_runs(make):
    backend = make()
    fits = "x = bytearray(100 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('ok')"
    backend.submit(request("fits", ["python3", "-c", fits], memory_mib=512))
    job = finished(backend, "fits", timeout=30)
    assert (job.state, backend.log("fits")) == (JobState.SUCCEEDED, "ok\n")


def test_files_written_to_tmp_and_dev_shm_count_as_memory_and_kill_the_job_naming_them(make):
    """tmpfs is memory: 48 MiB in /tmp and 48 MiB in /dev/shm are over a 64 MiB request."""
    backend = make(cgroups="off")  # the watchdog alone
    fill = "head -c 48M /dev/zero > /tmp/a && head -c 48M /dev/zero > /dev/shm/b && sleep 5"
    backend.submit(request("tmpfs-hog", ["bash", "-c", fill], memory_mib=64))
    job = finished(backend, "tmpfs-hog", timeout=30)
    assert job.state is JobState.FAILED, (job.reason, backend.log("tmpfs-hog"))
    # Killed as soon as it is over: while it writes to /dev/shm.
    assert re.match(
        r"memory limit: the job used \d+ MiB \(48 MiB in /tmp, \d+ MiB in /dev/shm\), over the "
        r"64 MiB it asked for \(resources.memory\); killed$",
        job.reason,
    ), job.reason


def test_a_tmpfs_write_past_the_memory_request_stops_at_the_request_and_kills_the_job(make):
    """256 MiB written beyond a 64 MiB request: /tmp holds no more than the request (the
    write fails, no space left), and what it holds there is over the request with the
    job's own processes."""
    backend = make(cgroups="off")  # the watchdog alone
    fill = "head -c 320M /dev/zero > /tmp/big; sleep 5"
    backend.submit(request("tmp-big", ["bash", "-c", fill], memory_mib=64))
    job = finished(backend, "tmp-big", timeout=30)
    assert job.state is JobState.FAILED, (job.reason, backend.log("tmp-big"))
    found = re.match(
        r"memory limit: the job used \d+ MiB \((\d+) MiB in /tmp\), over the 64 MiB it asked "
        r"for \(resources.memory\); killed$",
        job.reason,
    )
    assert found and 60 <= int(found[1]) <= 64, job.reason


def test_an_anonymous_memory_file_counts_as_memory(make):
    """memfd_create: memory in no mount and, written but not mapped, in no RSS."""
    backend = make(cgroups="off")  # the watchdog alone
    job_code = """
import os, time
fd = os.memfd_create("hoard")
chunk = bytes(1 << 20)
for _ in range(100):
    os.write(fd, chunk)
print("wrote", flush=True)
time.sleep(5)
"""
    backend.submit(request("memfd", ["python3", "-c", job_code], memory_mib=64))
    job = finished(backend, "memfd", timeout=30)
    assert job.state is JobState.FAILED, (job.reason, backend.log("memfd"))
    assert re.match(
        r"memory limit: the job used \d+ MiB \(\d+ MiB in memfd files\), over the 64 MiB",
        job.reason,
    ), job.reason


def test_a_mapped_tmpfs_file_counts_once(make):
    """A file in /dev/shm that the job maps is in its shared memory and in the mount: the
    watchdog counts it once. 96 MiB mapped in /dev/shm fit a 192 MiB request; another
    120 MiB written to /tmp do not, and the reason shows each counted once."""
    backend = make(cgroups="off")  # the watchdog alone
    job_code = """
import mmap, os, time
fd = os.open("/dev/shm/shared", os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 96 << 20)
m = mmap.mmap(fd, 96 << 20)
for i in range(0, 96 << 20, 4096):
    m[i] = 1
print("mapped", flush=True)
time.sleep(1.5)
print("still running", flush=True)
with open("/tmp/scratch", "wb") as f:
    for _ in range(120):
        f.write(bytes(1 << 20))
time.sleep(5)
"""
    backend.submit(request("mapped", ["python3", "-c", job_code], memory_mib=192))
    job = finished(backend, "mapped", timeout=30)
    assert "mapped\nstill running\n" in backend.log("mapped"), (job.reason, backend.log("mapped"))
    assert job.state is JobState.FAILED
    # Killed as soon as it is over: during the write, or after it.
    found = re.match(
        r"memory limit: the job used (\d+) MiB \((\d+) MiB in /tmp, 96 MiB in /dev/shm\), "
        r"over the 192 MiB",
        job.reason,
    )
    assert found, job.reason
    used, in_tmp = int(found[1]), int(found[2])
    # The mapped file once, with the interpreter's own few MiB: not 96 MiB more.
    assert in_tmp + 96 < used < in_tmp + 96 + 32, job.reason


def test_the_tmpfs_that_hides_other_jobs_and_the_sandbox_root_and_dev_are_read_only(make):
    """Only /tmp and /dev/shm are memory a job can fill with files (both bounded)."""
    backend = make()
    hidden = backend.root
    probe = (
        f"for d in / /dev {hidden} {hidden}/jobs; do "
        "(head -c 1M /dev/zero > $d/fill) 2>/dev/null && echo WROTE $d; done; "
        "df --output=size,target -B1M /tmp /dev/shm | tail -n +2; echo done"
    )
    backend.submit(request("ro-tmpfs", ["bash", "-c", probe], memory_mib=100))
    job = finished(backend, "ro-tmpfs")
    log = backend.log("ro-tmpfs")
    assert job.state is JobState.SUCCEEDED, (job.reason, log)
    assert "WROTE" not in log, log
    assert log.split() == ["100", "/tmp", "100", "/dev/shm", "done"], log


def test_a_thousand_forks_are_bounded_and_the_job_killed_naming_the_limit(make):
    backend = make(max_processes=200)
    bomb = "for i in $(seq 1000); do sleep 60 & done 2>/dev/null; wait"
    backend.submit(request("forks", ["bash", "-c", bomb]))
    work = str(Path(backend.root) / "jobs" / "forks" / "work")
    job = finished(backend, "forks", timeout=30)
    assert job.state is JobState.FAILED
    assert job.reason.startswith("process limit: the job reached "), job.reason
    assert "(200); killed" in job.reason
    # Nothing of it is left running.
    deadline = time.monotonic() + 10
    while in_work(work) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert in_work(work) == []


def test_a_queue_that_runs_many_jobs_at_once_gives_each_fewer_processes_to_fit_pid_max(make):
    """The jobs a queue may run at once, each at its process limit, fit the host's pids."""
    pid_max = host.pid_max()
    concurrency = process_budget(pid_max) // 40  # room for ~40 processes a job
    limit = job_processes(512, concurrency, pid_max)
    assert 40 <= limit < 48
    queue = dataclasses.replace(PACK, max_concurrency=concurrency, cpu_oversubscription=1000)
    backend = make(max_processes=512)
    bomb = "for i in $(seq 100); do sleep 3 & done 2>/dev/null; wait"
    backend.submit(request("crowded", ["bash", "-c", bomb], queue=queue))
    job = finished(backend, "crowded", timeout=30)
    assert job.state is JobState.FAILED, job.reason
    assert job.reason.startswith("process limit: the job reached "), job.reason
    assert job.reason.endswith(
        f"({limit}: queue agents may run {concurrency} jobs at once, within this host's "
        f"{pid_max} process ids); killed"
    ), job.reason


def in_work(folder: str) -> list[int]:
    from tests.unit.scheduling.local_backend.helpers import in_folder

    return in_folder(folder)


def test_200_mb_of_output_leaves_a_capped_log(make):
    backend = make(max_output_bytes=4 << 20)
    started = time.monotonic()
    backend.submit(request("chatty", ["sh", "-c", "yes switchyard | head -c 200000000; echo"]))
    job = finished(backend, "chatty", timeout=60)
    assert job.state is JobState.SUCCEEDED, job.reason
    log_file = Path(backend.root) / "jobs" / "chatty" / "output.log"
    size = log_file.stat().st_size
    assert 4 << 20 <= size < (4 << 20) + 1024
    tail = backend.log("chatty", offset=(4 << 20) - 10)
    assert "[switchyard: output cut at 4 MiB" in tail
    assert time.monotonic() - started < 30


def test_a_file_bigger_than_the_disk_limit_kills_the_job(make):
    backend = make(max_disk_bytes=8 << 20)
    backend.submit(request("big-file", ["sh", "-c", "head -c 50000000 /dev/zero > big"]))
    job = finished(backend, "big-file", timeout=30)
    assert job.state is JobState.FAILED
    assert job.reason.startswith("disk limit: a file reached 8 MiB"), job.reason


def test_many_files_over_the_disk_limit_kill_the_job(make):
    backend = make(max_disk_bytes=8 << 20)
    fill = "for i in 1 2 3 4 5 6; do head -c 3000000 /dev/urandom > f$i; done; sleep 30"
    backend.submit(request("many-files", ["sh", "-c", fill]))
    job = finished(backend, "many-files", timeout=30)
    assert job.state is JobState.FAILED
    assert job.reason.startswith("disk limit: the job's folder holds "), job.reason
    assert "over the 8 MiB a job may keep here; killed" in job.reason


def test_old_job_folders_disappear_after_retention_and_their_log_stays(make):
    backend = make(retention_s=3600)
    backend.submit(request("old", ["sh", "-c", "echo kept; echo x > work-file"]))
    assert finished(backend, "old").state is JobState.SUCCEEDED
    jobdir = Path(backend.root) / "jobs" / "old"
    assert backend.housekeep() == 0  # too recent
    assert jobdir.exists()
    assert backend.housekeep(now=time.time() + 3601) == 1
    assert not jobdir.exists()
    assert backend.log("old") == "kept\n"
    assert backend.poll(["old"])["old"].state is JobState.SUCCEEDED
    assert backend.housekeep(now=time.time() + 7200) == 0  # nothing left to remove


def write_job(backend: LocalBackend, key: str, mib: int, **changes) -> None:
    """A real job that leaves `mib` MiB in its folder and ends."""
    job = request(key, ["sh", "-c", f"head -c {mib}M /dev/urandom > data"])
    backend.submit(dataclasses.replace(job, **changes))
    assert finished(backend, key).state is JobState.SUCCEEDED


def test_a_projects_ended_folders_stay_within_its_total_oldest_removed_first(make):
    backend = make(max_folder_bytes_per_project=7 << 20)
    # Ended in this order (keys in another, so that the order is the ends').
    for key in ("zz-oldest", "aa-middle", "mm-newest"):
        write_job(backend, key, 3)
    write_job(backend, "other-project", 5, project="climate")
    # A running job of the same project, over the total on its own: never touched.
    backend.submit(request("running", ["sh", "-c", "head -c 8M /dev/urandom > data; sleep 30"]))
    jobs = Path(backend.root) / "jobs"
    deadline = time.monotonic() + 10
    while not (jobs / "running" / "work" / "data").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)

    assert backend.housekeep() == 1  # 3 × 3 MiB ended in materials: the oldest goes
    assert sorted(p.name for p in jobs.iterdir()) == [
        "aa-middle",
        "mm-newest",
        "other-project",
        "running",
    ]
    assert backend.poll(["running"])["running"].state is JobState.RUNNING
    assert (jobs / "running" / "work" / "data").stat().st_size == 8 << 20
    # What retention keeps of a removed folder is kept: the final state and the log.
    assert backend.poll(["zz-oldest"])["zz-oldest"].state is JobState.SUCCEEDED
    assert (Path(backend.root) / "logs" / "zz-oldest.log").exists()
    assert backend.housekeep() == 0  # within the total now


def test_a_users_ended_folders_stay_within_their_total_across_projects(make):
    backend = make(max_folder_bytes_per_user=5 << 20)
    write_job(backend, "first", 3)
    write_job(backend, "second", 3, project="climate")
    write_job(backend, "bobs", 3, user="bob")
    assert backend.housekeep() == 1
    assert sorted(p.name for p in (Path(backend.root) / "jobs").iterdir()) == ["bobs", "second"]
