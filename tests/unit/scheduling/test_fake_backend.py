"""The in-memory fake backend the engine's tests run against."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from scheduling import host
from scheduling.backends.base import Backend, BackendError, JobState, SubmitRequest
from scheduling.backends.fake import FakeBackend
from scheduling.backends.slurm.backend import SlurmBackend
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.engine import get_backend
from scheduling.engine.cluster import sync_accounts
from scheduling.spec import TaskSpec

QUEUE = QueuePolicy(name="hpc", pool="cpu", task_types=())


def request(key: str) -> SubmitRequest:
    spec = TaskSpec(name=key, project="materials", command=("true",))
    return SubmitRequest(key, spec, "hpc-simulation", QUEUE, "materials", "alice")


def test_it_is_a_backend_and_found_by_alias():
    backend = get_backend("fake")
    assert isinstance(backend, FakeBackend)
    assert isinstance(backend, Backend)


def test_it_refuses_to_exist_outside_tests(monkeypatch):
    monkeypatch.delitem(sys.modules, "pytest")
    with pytest.raises(ImproperlyConfigured, match="tests only"):
        FakeBackend("fake")


def test_submit_is_idempotent_by_key_and_recorded():
    backend = FakeBackend("f1")
    first = backend.submit(request("k-1"))
    second = backend.submit(request("k-1"))
    assert first == second
    assert (first.backend_id, first.state) == ("k-1", JobState.PENDING)
    assert list(FakeBackend.jobs_for("f1")) == ["k-1"]
    assert FakeBackend.requests_for("f1")["k-1"].key == "k-1"
    assert [method for method, _ in backend.calls] == ["submit", "submit"]
    assert backend.find("k-1") == first
    assert backend.find("k-2") is None


def test_instances_of_one_alias_share_the_registry():
    FakeBackend("f2").submit(request("k-1"))
    assert FakeBackend("f2").find("k-1") is not None
    assert FakeBackend("other").find("k-1") is None


def test_the_registry_is_scoped_to_the_running_test(monkeypatch):
    FakeBackend("f3").submit(request("k-1"))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/elsewhere.py::test_other (call)")
    assert FakeBackend.jobs_for("f3") == {}
    monkeypatch.undo()
    assert list(FakeBackend.jobs_for("f3")) == ["k-1"]


def test_finish_drives_a_job_and_poll_reports_it():
    backend = FakeBackend("f4", start_immediately=True)
    assert backend.submit(request("k-1")).state is JobState.RUNNING
    backend.submit(request("k-2"))
    backend.finish("k-2", JobState.FAILED, exit_code=3)
    jobs = backend.poll(["k-1", "k-2", "nope"])
    assert jobs["k-1"].state is JobState.RUNNING
    assert (jobs["k-2"].state, jobs["k-2"].exit_code, jobs["k-2"].reason) == (
        JobState.FAILED,
        3,
        "exit code 3",
    )
    assert jobs["k-2"].ended_at is not None
    assert jobs["nope"].state is JobState.UNKNOWN
    with pytest.raises(BackendError):
        backend.finish("nope", JobState.SUCCEEDED)


def test_cancel_ends_a_live_job_and_leaves_a_finished_one():
    backend = FakeBackend("f5")
    backend.submit(request("k-1"))
    backend.submit(request("k-2"))
    backend.finish("k-2", JobState.SUCCEEDED, exit_code=0)
    backend.cancel("k-1")
    backend.cancel("k-2")
    backend.cancel("nope")
    assert FakeBackend.jobs_for("f5")["k-1"].state is JobState.CANCELLED
    assert FakeBackend.jobs_for("f5")["k-2"].state is JobState.SUCCEEDED


def test_nodes_drain_resume_priority_and_log():
    backend = FakeBackend("f6", nodes=[NodeView("n1", cpus=4, memory_mib=1024)])
    backend.drain("n1", "sick")
    assert [n.available for n in backend.nodes()] == [False]
    backend.resume("n1")
    assert [n.available for n in backend.nodes()] == [True]
    backend.submit(request("k-1"))
    backend.set_priority("k-1", 7)
    assert backend.priority_of("k-1") == 7
    assert backend.log("k-1") == "fake log of k-1\n"
    assert backend.log("nope") == ""
    assert ("set_priority", ("k-1", 7)) in backend.calls
    assert ("drain", ("n1", "sick")) in backend.calls


def test_settings_that_say_where_a_backend_runs_must_agree_with_the_backend(settings):
    # Models and checks read RUNS_ON_THIS_HOST from the settings (scheduling/host.py); a
    # backend whose class says otherwise is refused when the engine builds it.
    local = settings.COMPUTE_BACKENDS["local"]
    assert host.is_local("local") and not host.is_local("fake") and not host.is_local("nowhere")
    assert get_backend("local").runs_on_this_host and not get_backend("fake").runs_on_this_host
    settings.COMPUTE_BACKENDS = {
        "local": {k: v for k, v in local.items() if k != "RUNS_ON_THIS_HOST"},
        "fake": {**settings.COMPUTE_BACKENDS["fake"], "RUNS_ON_THIS_HOST": True},
    }
    with pytest.raises(ImproperlyConfigured) as err:
        get_backend("local")
    assert str(err.value) == (
        "COMPUTE_BACKENDS['local']['RUNS_ON_THIS_HOST']: expected True for"
        " scheduling.backends.local.LocalBackend, got False"
    )
    with pytest.raises(ImproperlyConfigured, match=r"\['fake'\].*expected False .* got True"):
        get_backend("fake")


def test_only_a_backend_with_cluster_accounts_syncs_them(tmp_path):
    assert get_backend("fake").cluster_accounts() is None
    with pytest.raises(BackendError, match="'fake' has no cluster accounts"):
        sync_accounts("fake")
    slurm = SlurmBackend("slurm", cluster="test", workdir=str(tmp_path))
    assert slurm.cluster_accounts() is slurm
