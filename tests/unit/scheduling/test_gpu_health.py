"""GPU health in the node check: a GPU past its pool's temperature limit, or with uncorrected
ECC memory errors, drains its nodes with the GPU and the value in the reason, and alerts
(docs/operations.md, "GPU use and GPU health").

The whole path runs: the engine's health pass, the local backend's host probe, nvidia-smi
found on PATH (the stand-in printing an H200 node's answers, tests/gpufake.py), the
pool's limits from settings, the drain in the portal and the backend, the alert."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings_gpu import limits_error
from scheduling.backends import gpuwatch
from scheduling.decisions.gpuhealth import GpuLimits, gpu_problems, limits_for
from scheduling.engine.health import health_pass
from scheduling.models import Alert, Node, Pool
from scheduling.selectors import site_view_invalidate


@pytest.fixture
def local_site(site):
    Pool.objects.update(backend="local")
    site_view_invalidate()


def test_a_gpu_over_its_pools_temperature_limit_drains_the_pools_nodes_and_alerts(
    local_site, settings, nvidia_smi
):
    # GPU 6 of the host at 93 °C: over gpu-train's 85, under every other pool's 95.
    settings.SWITCHYARD_GPU_HEALTH = {
        "*": {"max_temperature_c": 95},
        "gpu-train": {"max_temperature_c": 85},
    }
    nvidia_smi.scene("hot")
    assert health_pass()["drained"] == Node.objects.filter(pool__name="gpu-train").count()
    node = Node.objects.get(name="gpu001")
    assert node.state == Node.State.DRAINED
    reason = "GPU 6 at 93 °C, over the 85 °C limit of pool gpu-train"
    assert node.health["reason"] == reason
    assert Node.objects.filter(pool__name="inference-agent", state=Node.State.UP).count() == 15
    alert = Alert.objects.get(node=node)
    assert alert.subject == f"node gpu001 drained: {reason}" and reason in alert.message
    # Up nodes keep the readings of the pass that found them well.
    inf = Node.objects.get(name="inf001")
    assert inf.health["gpu6_c"] == 93 and inf.health["gpu6_ecc"] == 0
    assert inf.health["gpu6_remap_pending"] == 0 and inf.health["gpu6_remap_failed"] == 0


def test_uncorrected_ecc_errors_drain_a_gpu_node_and_a_cpu_node_stays(
    local_site, settings, nvidia_smi
):
    settings.SWITCHYARD_GPU_HEALTH = {"*": {"max_temperature_c": 90}}
    nvidia_smi.scene("ecc")
    health_pass()
    reason = "GPU 3 has 2 uncorrected ECC memory errors, over the 0 allowed in pool inference-agent"
    assert Node.objects.get(name="inf001").health["reason"] == reason
    assert Node.objects.get(name="inf001").state == Node.State.DRAINED
    # Nodes without GPUs of their own are not judged by the host's GPUs.
    assert Node.objects.get(name="agt001").state == Node.State.UP
    assert Node.objects.get(name="cpu001").state == Node.State.UP


def test_a_memory_row_waiting_to_be_remapped_drains_the_node_in_any_pool(
    local_site, settings, nvidia_smi
):
    settings.SWITCHYARD_GPU_HEALTH = {"*": {"max_temperature_c": 90}}
    nvidia_smi.scene("remap")
    health_pass()
    node = Node.objects.get(name="gpu002")
    assert node.state == Node.State.DRAINED
    assert (
        node.health["reason"]
        == "GPU 4 has 1 memory row(s) waiting to be remapped: it needs a reset"
    )


def test_remapped_rows_are_read_as_counts_or_yes_and_no():
    text = "GPU-a, 0, No\nGPU-b, Yes, 0\nGPU-c, [N/A], [N/A]\n"
    assert gpuwatch.parse_remapped(text) == {
        "GPU-a": (0.0, 0.0),
        "GPU-b": (1.0, 0.0),
        "GPU-c": (None, None),
    }
    failed = gpu_problems({"gpu2_remap_failed": 1.0, "gpu2_remap_pending": 1.0}, GpuLimits(), "p")
    assert failed == ["GPU 2 failed to remap a memory row: it needs replacing"]


def test_a_cool_node_stays_up_and_without_nvidia_smi_nothing_is_read(
    local_site, settings, nvidia_smi, monkeypatch
):
    settings.SWITCHYARD_GPU_HEALTH = {"*": {"max_temperature_c": 90}}
    nvidia_smi.scene("idle")
    assert health_pass()["drained"] == 0
    assert Node.objects.get(name="gpu001").health["gpu0_c"] == 29
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a CPU host: no nvidia-smi
    assert health_pass()["drained"] == 0
    assert "gpu0_c" not in Node.objects.get(name="gpu001").health


def test_the_limits_are_the_pools_own_over_the_sites_over_the_defaults():
    table = {"*": {"max_temperature_c": 88}, "gpu-train": {"max_ecc_uncorrected": 4}}
    assert limits_for("gpu-train", table) == GpuLimits(88.0, 4)
    assert limits_for("cpu-hpc", table) == GpuLimits(88.0, 0)
    assert limits_for("x", {}) == GpuLimits(90.0, 0)
    found = gpu_problems(
        {"gpu0_c": 88.0, "gpu1_c": 88.5, "load_per_core": 9}, GpuLimits(88.0, 0), "p"
    )
    assert found == ["GPU 1 at 88.5 °C, over the 88 °C limit of pool p"]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ([1], "expected an object of pool names, got list"),
        ({"*": 90}, "*: expected an object of limits, got int"),
        ({"p": {"max_temp": 90}}, "p.max_temp: expected one of max_temperature_c"),
        (
            {"p": {"max_temperature_c": "hot"}},
            "p.max_temperature_c: expected a number ≥ 0, got 'hot'",
        ),
        ({"p": {"max_ecc_uncorrected": True}}, "expected a number ≥ 0, got True"),
    ],
)
def test_a_bad_limits_table_is_refused_saying_where(table, says):
    assert says in (limits_error(table) or "")


def test_a_bad_setting_stops_the_portal_at_start(monkeypatch):
    from config import settings_gpu

    monkeypatch.setenv("SWITCHYARD_GPU_HEALTH", '{"gpu-train": {"max_temperature_c": -1}}')
    with pytest.raises(ImproperlyConfigured, match="gpu-train.max_temperature_c"):
        settings_gpu._gpu_health()
    monkeypatch.setenv("SWITCHYARD_GPU_HEALTH", "{not json")
    with pytest.raises(ImproperlyConfigured, match="expected JSON"):
        settings_gpu._gpu_health()
