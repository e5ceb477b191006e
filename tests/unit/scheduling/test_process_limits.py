"""A local queue's concurrency and the per-job process limit must fit the host's pids
(kernel.pid_max): refused where a queue is edited, reported by `manage.py check`."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core import checks
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from scheduling import host
from scheduling.decisions.processes import max_local_concurrency, process_budget
from scheduling.models import Pool, Queue


@pytest.fixture
def local_hpc(site) -> Queue:
    """The default site's hpc queue, its pool on the local backend."""
    Pool.objects.filter(queues__name="hpc").update(backend="local")
    return Queue.objects.get(name="hpc")


def patch_queue(username: str, name: str, changes: dict):
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client.patch(
        f"/api/v1/queues/{name}/",
        data=json.dumps({**changes, "reason": "more agents"}),
        content_type="application/json",
    )


def errors() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if m.id.startswith("switchyard.E10")]


def test_a_queue_admin_cannot_set_more_concurrent_local_jobs_than_the_hosts_pids_allow(local_hpc):
    most = max_local_concurrency(host.pid_max())
    response = patch_queue("quinn", "hpc", {"max_concurrency": most + 1})
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    assert (error["field"], error["got"]) == ("max_concurrency", most + 1)
    assert error["message"].startswith(f"at most {most} for a pool on the local backend: ")
    assert f"this host has {host.pid_max()} process ids (kernel.pid_max)" in error["message"]
    local_hpc.refresh_from_db()
    assert local_hpc.max_concurrency is None
    assert patch_queue("quinn", "hpc", {"max_concurrency": most}).status_code == 200


def test_the_admin_console_refuses_it_too_and_a_slurm_pool_is_not_bound_by_this_host(site):
    queue = Queue.objects.get(name="hpc")
    queue.max_concurrency = max_local_concurrency(host.pid_max()) + 1
    queue.full_clean()  # the pool runs on another backend: its nodes' pids are their own
    Pool.objects.filter(queues__name="hpc").update(backend="local")
    queue = Queue.objects.get(name="hpc")
    queue.max_concurrency = max_local_concurrency(host.pid_max()) + 1
    with pytest.raises(ValidationError, match="max_concurrency"):
        queue.full_clean()


def test_manage_py_check_reports_a_stored_queue_and_a_per_job_limit_that_cannot_fit(local_hpc):
    assert errors() == []
    Queue.objects.filter(pk=local_hpc.pk).update(max_concurrency=10**6)  # as stored before
    [queue_error] = errors()
    assert queue_error.id == "switchyard.E102"
    assert "queue hpc (pool cpu-hpc, backend local) max_concurrency: at most " in queue_error.msg
    assert queue_error.msg.endswith("; got 1000000")
    too_many = process_budget(host.pid_max()) + 1
    with override_settings(SWITCHYARD_JOB_MAX_PROCESSES=too_many):
        found = {m.id: m.msg for m in errors()}
    assert found["switchyard.E101"].startswith("SWITCHYARD_JOB_MAX_PROCESSES: at most ")
    assert found["switchyard.E101"].endswith(f"; got {too_many}")
    with pytest.raises(Exception, match="switchyard.E102"):
        call_command("check")


@pytest.mark.django_db
def test_the_seeded_site_on_the_local_backend_passes_the_check():
    call_command("seed_demo", backend="local", quiet=True)
    assert Queue.objects.get(name="inference-agent").max_concurrency == 500
    assert errors() == []


def test_a_storage_area_on_the_var_folders_file_system_is_reported(site, settings, tmp_path):
    from scheduling.models import StorageArea

    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    (tmp_path / "scratch").mkdir()
    scratch = str(tmp_path / "scratch/{project}")
    StorageArea.objects.create(name="scratch", path=scratch, owner="project")
    StorageArea.objects.create(name="elsewhere", path="/proc/{project}", owner="project")
    # Not mounted on this host: it cannot be told apart, so it is not reported.
    StorageArea.objects.create(name="absent", path=str(tmp_path / "nfs/{user}"), owner="user")
    if connection.vendor == "sqlite":  # PostgreSQL stores no NUL: only SQLite can hold one
        StorageArea.objects.create(name="nul", path=str(tmp_path / "a\0b/{user}"), owner="user")

    warned = {m.obj.name: m for m in checks.run_checks() if m.id == "switchyard.W103"}

    # Not another file system's, nor the demo site's own (under its storage folder), nor one
    # that is not there.
    assert set(warned) == {"scratch"}
    assert warned["scratch"].msg.startswith(f"storage area scratch ({scratch}) is on the file")
    assert "fills the portal's database and logs too" in warned["scratch"].msg
