"""A job sees exactly the device files of its GPUs, under their own names, and the control devices.

The device files are real character devices made with mknod (root) under the test's folder,
with numbers of their own, configured as the node's device files; the jobs really run in
bubblewrap (the local backend's launch path, or the Slurm script run by bash as the job's
account), and what they see is read from inside: `ls /dev` and `stat -c %t:%T`, and
`nvidia-smi -L` as its stand-in (tests/fixtures/nvidia-smi) prints it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import ConfigVersion
from scheduling import engine
from scheduling.backends import SubmitRequest
from scheduling.backends.base import JobState
from scheduling.backends.slurm import SlurmBackend
from scheduling.decisions.devices import (
    DEFAULT_CONTROL_DEVICES,
    DeviceFiles,
    DeviceTable,
    control_devices_error,
    device_binds,
    device_table,
    gpu_pattern_error,
)
from scheduling.decisions.storage import JobStorage, Mount
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.engine import get_backend
from scheduling.models import Node, Pool
from scheduling.selectors import site_view, site_view_invalidate
from scheduling.spec import Resources, TaskSpec
from tests.conftest import descriptor, submit
from tests.unit.scheduling.local_backend.helpers import (
    finished,
    request,
    running,
    state_file,
)

GPU_MAJOR, CONTROL_MAJOR = 240, 241  # the kernel's range for local and experimental use
CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
BIG = NodeView("g1", cpus=16, memory_mib=65536, gpus=8)
# What the job prints: its /dev, then each nvidia file with its device numbers.
SHOW = (
    'ls /dev; echo ---; for f in /dev/nvidia*; do [ -e "$f" ] && echo "$f $(stat -c %t:%T $f)"; done; '
    'echo "cuda=$CUDA_VISIBLE_DEVICES"'
)


def numbers(path: Path | str) -> str:
    """A device file's major:minor as `stat -c %t:%T` prints them (hex)."""
    rdev = os.stat(path).st_rdev
    return f"{os.major(rdev):x}:{os.minor(rdev):x}"


def make_devices(folder: Path, nodes: tuple[str, ...] = ("",)) -> None:
    """8 fake GPUs per node (`<folder>/<node>/nvidiaN`) and the control devices."""
    if os.geteuid() != 0:
        pytest.skip("making device files (mknod) needs root")
    minor = 0
    for node in nodes:
        (folder / node).mkdir(parents=True, exist_ok=True)
        (folder / node).chmod(0o755)  # the job's account reaches them (the umask is 077)
        for index in range(8):
            path = folder / node / f"nvidia{index}"
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, minor))
            minor += 1
    for at, name in enumerate(CONTROL):
        os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(CONTROL_MAJOR, at))
    folder.chmod(0o755)


def seen(log: str) -> tuple[list[str], dict[str, str], str]:
    """(the names in /dev, {nvidia path: numbers}, CUDA_VISIBLE_DEVICES) from SHOW's output."""
    listing, _, rest = log.partition("---\n")
    files = dict(line.split() for line in rest.splitlines() if line.startswith("/dev/"))
    cuda = rest.split("cuda=", 1)[1].strip()
    return listing.split(), files, cuda


@pytest.fixture
def fake_gpus(job_root) -> Path:
    folder = job_root / "dev"
    make_devices(folder)
    return folder


def files_in(folder: Path, gpu: str = "nvidia{index}") -> DeviceFiles:
    return DeviceFiles(str(folder / gpu), tuple(str(folder / name) for name in CONTROL))


# -- which files, in plain values -----------------------------------------------------------


def test_a_jobs_gpus_keep_their_names_and_the_control_devices_follow():
    files = DeviceFiles("/dev/nvidia{index}", DEFAULT_CONTROL_DEVICES)
    assert device_binds(files, "g1", (3, 6)) == (
        ("/dev/nvidia3", "/dev/nvidia3", "GPU 3 of node g1"),
        ("/dev/nvidia6", "/dev/nvidia6", "GPU 6 of node g1"),
        ("/dev/nvidiactl", "/dev/nvidiactl", "control device of node g1"),
        ("/dev/nvidia-uvm", "/dev/nvidia-uvm", "control device of node g1"),
        ("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools", "control device of node g1"),
    )


def test_a_job_without_gpus_or_on_virtual_gpus_gets_no_device_file():
    files = DeviceFiles("/dev/nvidia{index}", DEFAULT_CONTROL_DEVICES)
    assert device_binds(files, "g1", ()) == ()
    assert device_binds(None, "g1", (0, 1)) == ()


def test_a_node_of_its_own_overrides_its_pool_and_a_pattern_may_name_the_node():
    pool = DeviceFiles("/dev/nvidia{index}")
    own = DeviceFiles("/srv/{node}/gpu{index}", ("/srv/{node}/ctl",))
    table = device_table(pool, [("a", pool), ("b", own), ("c", None)])
    assert table.nodes == (("b", own), ("c", None))  # only those that differ
    assert table.for_node("a") is pool and table.for_node("zz") is pool
    assert device_binds(table.for_node("b"), "b", (2,)) == (
        ("/srv/b/gpu2", "/dev/gpu2", "GPU 2 of node b"),
        ("/srv/b/ctl", "/dev/ctl", "control device of node b"),
    )
    assert device_binds(table.for_node("c"), "c", (0,)) == ()
    assert DeviceTable.from_dict(json.loads(json.dumps(table.as_dict()))) == table


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("dev/nvidia{index}", "absolute"),
        ("/dev/nvidia", "{index}"),
        ("/dev/{index}/nvidia", "{index}"),
        ("/dev/nvidia{index} ; rm -rf /", "only letters"),
        ("/dev/$(id){index}", "only letters"),
        ("/dev/../etc/x{index}", ".."),
        ("/dev/nvidia{idx}{index}", "only letters"),
    ],
)
def test_a_gpu_pattern_that_cannot_name_each_gpus_file_is_refused(pattern, why):
    assert why in (gpu_pattern_error(pattern) or "")


def test_good_patterns_and_control_lists_pass_and_bad_lists_are_refused():
    assert gpu_pattern_error("/dev/nvidia{index}") is None
    assert gpu_pattern_error("/var/tmp/x/{node}/nvidia{index}") is None
    assert gpu_pattern_error("") is None  # no device files: virtual GPUs
    assert control_devices_error(list(DEFAULT_CONTROL_DEVICES)) is None
    assert control_devices_error("/dev/nvidiactl") is not None
    assert "{index}" in (control_devices_error(["/dev/nvidia{index}"]) or "")
    assert "same name" in (control_devices_error(["/a/nvidiactl", "/b/nvidiactl"]) or "")
    assert "cannot be" in (control_devices_error(["/dev/null"]) or "")


# -- the local backend: its launch path, real bubblewrap ------------------------------------


def test_a_2_gpu_job_on_an_8_gpu_node_sees_exactly_its_2_gpus_and_the_control_devices(
    make, fake_gpus
):
    backend = make([BIG])
    devices = DeviceTable(files_in(fake_gpus))
    # Another job holds the first GPUs: ours are not the host's 0 and 1.
    backend.submit(with_devices(request("first", ["sleep", "30"], gpus=3), devices))
    assert running(backend, "first").state is JobState.RUNNING
    backend.submit(with_devices(request("ours", ["sh", "-c", SHOW], gpus=2), devices))
    job = finished(backend, "ours")
    assert job.state is JobState.SUCCEEDED, job.reason
    [held] = state_file(backend, "first")["allocations"]
    [allocation] = state_file(backend, "ours")["allocations"]
    host = allocation["gpu_indices"]
    assert len(host) == 2 and not set(host) & set(held["gpu_indices"]) and host != [0, 1]
    listing, files, cuda = seen(backend.log("ours"))
    assert sorted(name for name in listing if name.startswith("nvidia")) == sorted(
        [f"nvidia{host[0]}", f"nvidia{host[1]}", *CONTROL]
    )
    assert files == {
        f"/dev/nvidia{host[0]}": numbers(fake_gpus / f"nvidia{host[0]}"),
        f"/dev/nvidia{host[1]}": numbers(fake_gpus / f"nvidia{host[1]}"),
        **{f"/dev/{name}": numbers(fake_gpus / name) for name in CONTROL},
    }
    assert cuda == "0,1"


# A stand-in for NVIDIA's tool: lists the GPUs whose device files it sees, numbered from 0.
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVIDIA_SMI = FIXTURES / "nvidia-smi"


def test_nvidia_smi_in_the_sandbox_lists_exactly_the_jobs_2_gpus_of_8(make, fake_gpus):
    backend = make([BIG])
    devices = DeviceTable(files_in(fake_gpus))
    backend.submit(with_devices(request("first", ["sleep", "30"], gpus=3), devices))
    assert running(backend, "first").state is JobState.RUNNING
    # The stand-in reaches the sandbox as a site's read-only folder would, at its own path.
    tools = JobStorage(mounts=(Mount(str(FIXTURES), read_only=True, owner="site"),))
    ours = with_devices(request("ours", [str(NVIDIA_SMI), "-L"], gpus=2), devices)
    backend.submit(dataclasses.replace(ours, storage=tools))
    job = finished(backend, "ours")
    assert job.state is JobState.SUCCEEDED, (job.reason, backend.log("ours"))
    [allocation] = state_file(backend, "ours")["allocations"]
    host = sorted(allocation["gpu_indices"])
    assert host != [0, 1]  # the first job holds three of the host's GPUs
    minors = [os.minor(os.stat(fake_gpus / f"nvidia{index}").st_rdev) for index in host]
    listed = [line for line in backend.log("ours").splitlines() if line.startswith("GPU ")]
    assert listed == [
        f"GPU {at}: NVIDIA H200 (UUID: GPU-5f3e2b1a-9c4d-4e8f-a6b7-{minor:012x})"
        for at, minor in enumerate(minors)
    ]


def test_the_nvidia_smi_stand_in_fails_as_the_real_one_without_the_driver():
    # Outside a sandbox on this machine: no /dev/nvidiactl (or no GPU), as on a CPU node.
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has NVIDIA's driver: the stand-in is not what runs here")
    done = subprocess.run([NVIDIA_SMI, "-L"], capture_output=True, text=True)
    assert done.returncode == 9 and "couldn't communicate with the NVIDIA driver" in done.stdout


def test_a_cpu_only_job_gets_no_gpu_device(make, fake_gpus):
    backend = make([BIG])
    backend.submit(
        with_devices(request("cpu", ["sh", "-c", SHOW]), DeviceTable(files_in(fake_gpus)))
    )
    job = finished(backend, "cpu")
    assert job.state is JobState.SUCCEEDED, job.reason
    listing, files, cuda = seen(backend.log("cpu"))
    assert not [name for name in listing if name.startswith("nvidia")]
    assert files == {} and cuda == ""


def test_a_missing_device_file_fails_the_job_with_its_path_and_nothing_runs(make, fake_gpus):
    (fake_gpus / "nvidia1").unlink()
    backend = make([NodeView("g1", cpus=4, memory_mib=16384, gpus=2)])
    marker = fake_gpus.parent / "ran"
    backend.submit(
        with_devices(
            request("lost", ["touch", str(marker)], gpus=2), DeviceTable(files_in(fake_gpus))
        )
    )
    job = finished(backend, "lost")
    assert job.state is JobState.FAILED
    assert f"the device file {fake_gpus}/nvidia1 (GPU 1 of node g1) is missing" in job.reason
    assert not marker.exists()


def with_devices(req: SubmitRequest, devices: DeviceTable) -> SubmitRequest:
    return dataclasses.replace(req, devices=devices)


# -- the Slurm script, run by bash as the job's account (no cluster needed) ----------------

JOB_ACCOUNT = "switchyard-job"
GPU_QUEUE = QueuePolicy(name="training", pool="gpu-train", task_types=())


def slurm_script(job_root: Path, devices: DeviceTable, gpus: int, env=(), gres=None) -> str:
    """The batch script; `gres` is the node's gres.conf (beside the cluster's slurm.conf),
    by default each node's eight GPUs in order, as the portal writes it."""
    etc = job_root / "etc"
    etc.mkdir(exist_ok=True)
    etc.chmod(0o755)
    if gres is None:
        gres = "".join(
            f"NodeName={n} Name=gpu File={job_root}/dev/{n}/nvidia[0-7]\n"
            for n in ("gpu001", "gpu002")
        )
    (etc / "gres.conf").write_text(gres)
    (etc / "gres.conf").chmod(0o644)
    backend = SlurmBackend(
        "slurm",
        cluster="test",
        workdir=str(job_root / "jobs"),
        service_account=JOB_ACCOUNT,
        slurm_conf=str(etc / "slurm.conf"),
    )
    spec = TaskSpec(
        name="x",
        project="materials",
        resources=Resources(cpus=1, gpus=gpus),
        command=("sh", "-c", SHOW),
        env=tuple(env),
    )
    req = SubmitRequest(
        key="sy-1-1",
        spec=spec,
        type="agent",  # a job without a network: nothing to connect here
        queue=GPU_QUEUE,
        project="materials",
        user="alice",
        devices=devices,
    )
    return backend.sbatch_command(req)[1]


def run_as_job(script: str, **slurm_env: str) -> subprocess.CompletedProcess[str]:
    as_job = ["setpriv", f"--reuid={JOB_ACCOUNT}", f"--regid={JOB_ACCOUNT}", "--clear-groups"]
    return subprocess.run(
        [*as_job, "bash", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **slurm_env},
    )


def test_a_slurm_job_binds_the_gpus_slurm_gave_it_on_its_node(job_root):
    folder = job_root / "dev"
    make_devices(folder, nodes=("gpu001", "gpu002"))
    table = DeviceTable(files_in(folder, "{node}/nvidia{index}"))
    # The descriptor's environment cannot widen what Slurm gave.
    script = slurm_script(job_root, table, 2, env=[("SLURM_JOB_GPUS", "0,1,2,3,4,5,6,7")])
    done = run_as_job(script, SLURM_JOB_GPUS="3,5", SLURMD_NODENAME="gpu002")
    assert done.returncode == 0, done.stderr
    listing, files, cuda = seen(done.stdout)
    assert sorted(n for n in listing if n.startswith("nvidia")) == sorted(
        ["nvidia3", "nvidia5", *CONTROL]
    )
    assert files == {
        "/dev/nvidia3": numbers(folder / "gpu002" / "nvidia3"),
        "/dev/nvidia5": numbers(folder / "gpu002" / "nvidia5"),
        **{f"/dev/{name}": numbers(folder / name) for name in CONTROL},
    }
    assert cuda == "0,1"


def test_a_slurm_jobs_gpu_index_is_its_place_in_the_nodes_gres_conf_not_its_minor(job_root):
    folder = job_root / "dev"
    make_devices(folder, nodes=("gpu001", "gpu002"))
    table = DeviceTable(files_in(folder, "{node}/nvidia{index}"))
    # The site lists only four of gpu002's GPUs, the last four; and one of gpu001's, commented.
    gres = (
        "AutoDetect=off\n"
        f"NodeName=gpu[001-002] Name=gpu File={folder}/gpu001/nvidia9 # not this node's\n"
        f"NodeName=gpu002 Name=gpu Type=h200 File={folder}/gpu002/nvidia[4-7]\n"
        f"# NodeName=gpu002 Name=gpu File={folder}/gpu002/nvidia0\n"
    )
    script = slurm_script(job_root, table, 2, gres=gres)
    done = run_as_job(script, SLURM_JOB_GPUS="1,2", SLURMD_NODENAME="gpu002")
    assert done.returncode == 0, done.stderr
    listing, files, cuda = seen(done.stdout)
    # Slurm's 1 and 2 are the second and third File= of gpu002 (after gpu001's line, which
    # names both nodes): nvidia4 and nvidia5, never the files numbered 1 and 2.
    assert files == {
        "/dev/nvidia4": numbers(folder / "gpu002" / "nvidia4"),
        "/dev/nvidia5": numbers(folder / "gpu002" / "nvidia5"),
        **{f"/dev/{name}": numbers(folder / name) for name in CONTROL},
    }
    assert cuda == "0,1"
    # An index beyond the node's File= list: no device file is guessed, the job fails.
    done = run_as_job(script, SLURM_JOB_GPUS="5", SLURMD_NODENAME="gpu002")
    assert done.returncode == 1 and "---" not in done.stdout
    assert "GPU 5 of node gpu002 has no File= in" in done.stderr
    assert f"{job_root}/etc/gres.conf" in done.stderr


def test_a_slurm_job_whose_device_is_missing_fails_saying_which(job_root):
    folder = job_root / "dev"
    make_devices(folder, nodes=("gpu001",))
    (folder / "nvidia-uvm").unlink()
    script = slurm_script(job_root, DeviceTable(files_in(folder, "{node}/nvidia{index}")), 1)
    done = run_as_job(script, SLURM_JOB_GPUS="0", SLURMD_NODENAME="gpu001")
    assert done.returncode == 1
    assert f"the device file {folder}/nvidia-uvm (control device of node gpu001)" in done.stderr
    assert "---" not in done.stdout  # the command never ran


def test_a_cpu_slurm_job_has_no_device_lines_and_a_virtual_site_none_either(job_root):
    table = DeviceTable(DeviceFiles("/dev/nvidia{index}", DEFAULT_CONTROL_DEVICES))
    assert "switchyard_devices" not in slurm_script(job_root, table, 0)
    assert "switchyard_devices" not in slurm_script(job_root, DeviceTable(), 2)


# -- the site: pools and nodes say where their device files are ------------------------------


def test_the_pools_device_files_reach_the_backend_with_each_job(site, api):
    pool = Pool.objects.get(name="gpu-train")
    pool.gpu_devices, pool.control_devices = "/dev/nvidia{index}", ["/dev/nvidiactl"]
    pool.save()
    node = Node.objects.filter(pool=pool).order_by("name").first()
    node.gpu_devices = "/srv/{node}/gpu{index}"
    node.save()
    site_view_invalidate()
    table = site_view().devices["gpu-train"]  # its own nodes, one of them with its own files
    assert table.default == DeviceFiles("/dev/nvidia{index}", ("/dev/nvidiactl",))
    assert table.nodes == ((node.name, DeviceFiles("/srv/{node}/gpu{index}", ("/dev/nvidiactl",))),)
    doc = descriptor(name="train", type="ai-training", estimate="5m")
    doc["resources"] = {"gpus": 2, "cpus": 8, "nodes": 1, "memory": "8Gi"}
    response = submit(api, doc)
    assert response.status_code == 201, response.json()
    engine.task_dispatch(response.json()["id"])
    [sent] = get_backend("fake").requests_for("fake").values()
    assert sent.devices == table


def test_a_platform_admin_edits_a_nodes_device_files_validated_and_versioned(site):
    page = Client()
    page.force_login(User.objects.get(username="admin"))
    node = Node.objects.get(name="gpu001")
    form = {
        "name": node.name,
        "pool": node.pool_id,
        "cpus": node.cpus,
        "memory_mib": node.memory_mib,
        "gpus": node.gpus,
        "gpu_model": node.gpu_model,
        "switch": node.switch,
        "control_devices": "null",
        "change_reason": "the new device layout",
    }
    url = f"/admin/scheduling/node/{node.pk}/change/"
    refused = page.post(url, {**form, "gpu_devices": "/dev/nvidia"})
    assert refused.status_code == 200 and b"must contain {index}" in refused.content
    done = page.post(url, {**form, "gpu_devices": "/dev/gpus/{node}-{index}"})
    assert done.status_code == 302
    node.refresh_from_db()
    assert node.devices == DeviceFiles("/dev/gpus/{node}-{index}", ())  # seed_demo: no control
    version = ConfigVersion.objects.first()  # the newest
    assert (version.model, version.object_id, version.author_name) == (
        "scheduling.node",
        node.pk,
        "admin",
    )
    assert version.before["gpu_devices"] == ""
    assert version.after["gpu_devices"] == "/dev/gpus/{node}-{index}"
    pool_page = page.get(f"/admin/scheduling/pool/{node.pool_id}/change/").content.decode()
    assert 'name="gpu_devices"' in pool_page and 'name="control_devices"' in pool_page
