"""Slurm's configuration written from the site's model (scheduling/sites/slurm.py)."""

from __future__ import annotations

import pytest

from scheduling.decisions.devices import device_binds, device_files
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.sites import default_site
from scheduling.sites.slurm import (
    ClusterSettings,
    SlurmConfigError,
    SlurmNode,
    def_mem_per_cpu,
    gres_conf,
    oversubscribe,
    partition_line,
    render,
    scale_down,
    slurm_conf,
    slurm_nodes,
    slurm_time,
    topology_conf,
)

GIB = 1024
HOUR = 3600
CLUSTER = ClusterSettings(name="testcl", state_dir="/var/tmp/sy-test", hostname="vm")


def node(name, cpus=64, mem_gib=512, gpus=0, model=None, switch=None) -> NodeView:
    return NodeView(
        name=name,
        cpus=cpus,
        memory_mib=mem_gib * GIB,
        gpus=gpus,
        gpu_model=model,
        switch=switch,
    )


def queue(name, pool, **kw) -> QueuePolicy:
    return QueuePolicy(name=name, pool=pool, task_types=(), **kw)


# The default site, as plain values.
SITE = default_site().nodes_by_pool()
QUEUES = list(default_site().queues)


def lines_starting(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def settings(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split())


# --- time limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (None, "UNLIMITED"),
        (60, "0:01:00"),
        (90, "0:02:00"),  # rounded up: a limit is never shortened
        (1, "0:01:00"),
        (0, "0:01:00"),
        (HOUR, "1:00:00"),
        (HOUR + 30 * 60, "1:30:00"),
        (23 * HOUR + 59 * 60, "23:59:00"),
        (24 * HOUR, "1-00:00:00"),
        (72 * HOUR, "3-00:00:00"),
        (50 * HOUR + 5 * 60, "2-02:05:00"),
    ],
)
def test_slurm_time_formats(seconds, expected):
    assert slurm_time(seconds) == expected


def test_negative_time_is_an_error():
    with pytest.raises(SlurmConfigError):
        slurm_time(-1)


# --- partitions -----------------------------------------------------------------------------


def test_oversubscribe_per_allocation():
    assert oversubscribe(queue("t", "p", allocation="whole-node")) == "EXCLUSIVE"
    assert oversubscribe(queue("t", "p", allocation="whole-node", cpu_oversubscription=4)) == (
        "EXCLUSIVE"
    )
    assert oversubscribe(queue("a", "p", cpu_oversubscription=4)) == "FORCE:4"
    assert oversubscribe(queue("h", "p")) == "NO"


def test_def_mem_per_cpu_counts_oversubscription_and_takes_the_smallest_share():
    nodes = [node("inf001", 32, 256), node("agt001", 64, 512), node("tiny", 8, 16)]
    assert def_mem_per_cpu(queue("h", "p"), nodes) == 2 * GIB  # 16 GiB / 8 cpus
    assert def_mem_per_cpu(queue("a", "p", cpu_oversubscription=4), nodes) == GIB // 2
    whole = queue("t", "p", allocation="whole-node", cpu_oversubscription=4)
    assert def_mem_per_cpu(whole, [node("gpu001", 64, 1024)]) == 16 * GIB


def test_one_partition_per_queue_over_its_pools_nodes():
    text = render(CLUSTER, SITE, QUEUES)["slurm.conf"]
    parts = {
        settings(line)["PartitionName"]: settings(line)
        for line in lines_starting(text, "PartitionName=")
    }
    assert set(parts) == {"training", "inference-agent", "hpc"}

    training = parts["training"]
    assert training["Nodes"].split(",") == [f"gpu{i:03d}" for i in range(1, 21)]
    assert training["OverSubscribe"] == "EXCLUSIVE"
    assert training["MaxTime"] == "UNLIMITED"
    assert "DefaultTime" not in training

    agent = parts["inference-agent"]
    assert set(agent["Nodes"].split(",")) == {f"inf{i:03d}" for i in range(1, 11)} | {
        f"agt{i:03d}" for i in range(1, 6)
    }
    assert agent["OverSubscribe"] == "FORCE:4"
    assert agent["MaxTime"] == agent["DefaultTime"] == "1:00:00"
    assert agent["DefMemPerCPU"] == str(256 * GIB // (32 * 4))

    hpc = parts["hpc"]
    assert hpc["OverSubscribe"] == "NO"
    assert hpc["MaxTime"] == "3-00:00:00"
    assert hpc["DefMemPerCPU"] == str(8 * GIB)
    assert all(p["State"] == "UP" for p in parts.values())


def test_default_time_above_max_is_left_out():
    nodes = slurm_nodes({"p": [node("n1")]}, 17001)
    line = partition_line(queue("q", "p", max_walltime_s=HOUR, default_walltime_s=2 * HOUR), nodes)
    assert "MaxTime=1:00:00" in line
    assert "DefaultTime" not in line


def test_queue_of_a_pool_without_nodes_is_skipped_with_a_comment():
    text = slurm_conf(
        CLUSTER, slurm_nodes({"p": [node("n1")]}, 17001), [queue("q", "p"), queue("e", "empty")]
    )
    assert len(lines_starting(text, "PartitionName=")) == 1
    assert "# queue e: pool empty has no nodes here, skipped" in text


# --- nodes ----------------------------------------------------------------------------------


def test_node_lines_have_capacity_gres_unique_ports_and_localhost_address():
    text = render(CLUSTER, SITE, QUEUES)["slurm.conf"]
    nodes = {
        settings(line)["NodeName"]: settings(line) for line in lines_starting(text, "NodeName=")
    }
    assert len(nodes) == 40
    assert len({n["Port"] for n in nodes.values()}) == 40
    gpu = nodes["gpu001"]
    assert gpu["CPUs"] == "64"
    assert gpu["RealMemory"] == str(1024 * GIB)
    assert gpu["Gres"] == "gpu:8"
    assert gpu["NodeHostname"] == "vm"
    assert gpu["NodeAddr"] == "127.0.0.1"
    assert gpu["Feature"] == "gpu-train,A100"
    assert "Gres" not in nodes["cpu001"]
    assert nodes["inf001"]["Gres"] == "gpu:4"


def test_cluster_wide_settings():
    text = render(CLUSTER, SITE, QUEUES)["slurm.conf"]
    conf = dict(
        line.split("=", 1)
        for line in text.splitlines()
        if line and not line.startswith(("#", "NodeName=", "PartitionName="))
    )
    assert conf["ClusterName"] == "testcl"
    assert conf["SlurmctldHost"] == "vm(127.0.0.1)"
    assert conf["SlurmUser"] == "root"
    assert conf["SlurmdParameters"] == "config_overrides"
    assert conf["ProctrackType"] == "proctrack/linuxproc"
    assert conf["TaskPlugin"] == "task/none"
    assert conf["GresTypes"] == "gpu"
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStorageTRES"] == "gres/gpu"
    assert conf["AccountingStoragePass"] == conf["AuthInfo"].removeprefix("socket=")
    assert conf["PriorityType"] == "priority/multifactor"
    assert conf["TopologyPlugin"] == "topology/tree"
    assert conf["AccountingStorageEnforce"] == "associations"
    # A job gets its account's project groups as they are at its start, not as a node
    # cached them at an earlier job's (tests/integration/slurm/test_storage.py runs it).
    assert conf["GroupUpdateTime"] == "0"
    # Every path the daemons write lives under the one state directory.
    for key in (
        "StateSaveLocation",
        "SlurmdSpoolDir",
        "SlurmctldPidFile",
        "SlurmdPidFile",
        "SlurmctldLogFile",
        "SlurmdLogFile",
    ):
        assert conf[key].startswith("/var/tmp/sy-test/"), key


def test_every_node_runs_the_image_prolog_before_the_batch_script():
    """The lines a site needs for tasks in images (docs/containers.md, "Slurm notes")."""
    slow = ClusterSettings(state_dir="/var/tmp/sy-test", image_pull_timeout_s=300)
    lines = render(slow, SITE, QUEUES)["slurm.conf"].splitlines()
    assert "Prolog=/var/tmp/sy-test/etc/switchyard-prolog" in lines
    assert "Epilog=/var/tmp/sy-test/etc/switchyard-epilog" in lines
    # On every node at allocation; the batch script once the last node's Prolog is done.
    assert "PrologFlags=Alloc,DeferBatch" in lines
    # A Prolog as long as a pull and its unpack (2 × 300 s) plus the Prolog's margin: with
    # Slurm's default 10 s the job would be requeued as a node failure.
    assert "BatchStartTimeout=720" in lines
    assert "PrologEpilogTimeout=720" in lines
    assert "SchedulerParameters=nohold_on_prolog_fail" in lines
    with pytest.raises(SlurmConfigError, match="pull timeout must be positive"):
        render(ClusterSettings(image_pull_timeout_s=0), SITE, QUEUES)


def test_associations_can_be_left_unenforced():
    loose = ClusterSettings(enforce_associations=False)
    assert "AccountingStorageEnforce" not in render(loose, SITE, QUEUES)["slurm.conf"]


@pytest.mark.parametrize(
    "bad", ["gpu 1", "gpu=1", "a,b", "#x", "x\nPartitionName=evil", "gpu1\n", ""]
)
def test_names_that_would_break_the_file_are_refused(bad):
    with pytest.raises(SlurmConfigError, match="cannot be used"):
        render(CLUSTER, {"p": [node(bad)]}, [queue("q", "p")])
    with pytest.raises(SlurmConfigError, match="cannot be used"):
        render(CLUSTER, {"p": [node("n1")]}, [queue(bad, "p")])


def test_state_dir_must_be_a_plain_absolute_path():
    for bad in ("relative/dir", "/tmp/with space", "/tmp/../etc", "/tmp/x\n"):
        with pytest.raises(SlurmConfigError):
            render(ClusterSettings(state_dir=bad), SITE, QUEUES)


def test_duplicate_node_is_an_error():
    with pytest.raises(SlurmConfigError, match="twice"):
        slurm_nodes({"a": [node("n1")], "b": [node("n1")]}, 17001)


# --- gres.conf ------------------------------------------------------------------------------


def test_gres_conf_has_one_device_file_per_gpu():
    files = render(CLUSTER, SITE, QUEUES)
    gres = lines_starting(files["gres.conf"], "NodeName=")
    assert len(gres) == 20 * 8 + 10 * 4
    assert "NodeName=gpu001 Name=gpu File=/var/tmp/sy-test/dev/gpu001/nvidia0" in gres
    assert "NodeName=gpu001 Name=gpu File=/var/tmp/sy-test/dev/gpu001/nvidia7" in gres
    assert not [line for line in gres if line.startswith(("NodeName=cpu", "NodeName=agt"))]
    assert "AutoDetect=off" in files["gres.conf"]
    devices = [line.split() for line in files["devices.txt"].splitlines()]
    assert [path for path, _, _ in devices[: len(gres)]] == [
        line.split("File=")[1] for line in gres
    ]
    # Then the control devices, named as the real ones.
    assert [path for path, _, _ in devices[len(gres) :]] == [
        "/var/tmp/sy-test/dev/nvidiactl",
        "/var/tmp/sy-test/dev/nvidia-uvm",
        "/var/tmp/sy-test/dev/nvidia-uvm-tools",
    ]
    # Every fake has numbers of its own: a job's devices can be told apart by them.
    assert len({(major, minor) for _, major, minor in devices}) == len(devices)


def test_the_fake_gpus_are_where_the_clusters_device_pattern_says():
    files = device_files(CLUSTER.gpu_device_pattern, CLUSTER.control_devices)
    binds = device_binds(files, "gpu002", [3, 5])
    assert [(host, inside) for host, inside, _ in binds] == [
        (CLUSTER.device("gpu002", 3), "/dev/nvidia3"),
        (CLUSTER.device("gpu002", 5), "/dev/nvidia5"),
        ("/var/tmp/sy-test/dev/nvidiactl", "/dev/nvidiactl"),
        ("/var/tmp/sy-test/dev/nvidia-uvm", "/dev/nvidia-uvm"),
        ("/var/tmp/sy-test/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools"),
    ]


def test_gres_conf_without_gpus_is_only_the_header():
    text = gres_conf(CLUSTER, slurm_nodes({"p": [node("n1")]}, 17001))
    assert not lines_starting(text, "NodeName=")


# --- topology.conf --------------------------------------------------------------------------


def test_topology_has_leaf_switches_under_one_top_switch():
    text = render(CLUSTER, SITE, QUEUES)["topology.conf"]
    switches = {
        settings(line)["SwitchName"]: settings(line) for line in lines_starting(text, "SwitchName=")
    }
    leaves = {
        "gpu-train-sw1",
        "gpu-train-sw2",
        "inference-agent-sw1",
        "cpu-hpc-sw1",
    }
    assert set(switches) == leaves | {"top"}
    assert switches["gpu-train-sw2"]["Nodes"].split(",") == [f"gpu{i:03d}" for i in range(11, 21)]
    assert "agt001" in switches["inference-agent-sw1"]["Nodes"].split(",")
    assert set(switches["top"]["Switches"].split(",")) == leaves
    assert "Nodes" not in switches["top"]


def test_no_switches_no_topology():
    files = render(CLUSTER, {"p": [node("n1"), node("n2")]}, [queue("q", "p")])
    assert "topology.conf" not in files
    assert "TopologyPlugin" not in files["slurm.conf"]


def test_nodes_without_a_switch_hang_off_a_leaf_of_their_own_and_top_never_clashes():
    nodes = slurm_nodes({"p": [node("n1", switch="top"), node("n2")]}, 17001)
    text = topology_conf(nodes)
    assert "SwitchName=top Nodes=n1" in text
    assert "SwitchName=unswitched Nodes=n2" in text
    assert "SwitchName=top-0 Switches=top,unswitched" in text


# --- scaling down and node files ------------------------------------------------------------


def test_scale_down_keeps_real_capacity_and_every_shape_when_it_can():
    scaled = scale_down(SITE, 2)
    assert [n.name for n in scaled["gpu-train"]] == ["gpu001", "gpu002"]
    assert [n.name for n in scaled["inference-agent"]] == ["agt001", "inf001"]
    assert [n.name for n in scaled["cpu-hpc"]] == ["cpu001", "cpu002"]
    assert scaled["gpu-train"][0] == SITE["gpu-train"][0]  # cpus, memory, gpus unchanged
    assert [n.name for n in scale_down(SITE, 1)["inference-agent"]] == ["agt001"]
    assert len(scale_down(SITE, 3)["inference-agent"]) == 3
    assert sum(len(v) for v in scale_down(SITE, None).values()) == 40
    assert scale_down(SITE, 2) == scale_down(SITE, 2)  # deterministic


def test_scale_down_refuses_zero():
    with pytest.raises(SlurmConfigError):
        scale_down(SITE, 0)


def test_render_scaled_site_files():
    files = render(CLUSTER, SITE, QUEUES, max_per_pool=2)
    assert set(files) == {"slurm.conf", "gres.conf", "topology.conf", "nodes.txt", "devices.txt"}
    assert files["nodes.txt"].splitlines() == [
        "agt001 17001",
        "cpu001 17002",
        "cpu002 17003",
        "gpu001 17004",
        "gpu002 17005",
        "inf001 17006",
    ]
    assert len(files["devices.txt"].splitlines()) == 2 * 8 + 4 + 3  # GPUs, control devices
    parts = lines_starting(files["slurm.conf"], "PartitionName=training ")
    assert "Nodes=gpu001,gpu002 " in parts[0]


def test_slurm_node_name_is_its_views():
    sn = SlurmNode(node=node("x1"), pool="p", port=1)
    assert sn.name == "x1"


# --- the management command (database in, files out) ----------------------------------------


def test_command_writes_the_files_from_the_database(site, tmp_path):
    from django.core.management import call_command

    from scheduling.models import Node, Pool

    out = tmp_path / "etc"
    call_command(
        "slurm_config",
        "--out",
        str(out),
        "--cluster",
        "ci",
        "--state-dir",
        "/var/tmp/sy-ci",
        "--hostname",
        "vm",
        "--backend",
        "fake",
        "--scale",
        "2",
        verbosity=0,
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "devices.txt",
        "gres.conf",
        "nodes.txt",
        "slurm.conf",
        "topology.conf",
    ]
    conf = (out / "slurm.conf").read_text()
    assert "ClusterName=ci" in conf
    assert "PartitionName=training Nodes=gpu001,gpu002 MaxTime=UNLIMITED" in conf
    assert len((out / "nodes.txt").read_text().splitlines()) == 6
    assert Node.objects.count() == 40  # without --prune-db the database is left alone
    assert set(Pool.objects.values_list("gpu_devices", flat=True)) == {""}  # seed_demo's

    call_command("slurm_config", "--out", str(out), "--scale", "2", "--prune-db", verbosity=0)
    assert sorted(Node.objects.values_list("name", flat=True)) == [
        "agt001",
        "cpu001",
        "cpu002",
        "gpu001",
        "gpu002",
        "inf001",
    ]
    # ... and the pools' GPUs are the cluster's fake devices.
    assert set(Pool.objects.values_list("gpu_devices", flat=True)) == {
        "/var/tmp/switchyard-slurm/dev/{node}/nvidia{index}"
    }


def test_command_without_pools_for_the_backend_fails(site, tmp_path):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no pools"):
        call_command("slurm_config", "--out", str(tmp_path), "--backend", "nope", verbosity=0)
