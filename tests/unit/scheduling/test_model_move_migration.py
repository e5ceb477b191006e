"""A populated database crosses the move of quotas and priority requests into scheduling and
of what-if runs into simulation, forwards, backwards and forwards again, and loses nothing:
the rows, the permissions granted on them, the admin log and the configuration history."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from portal.models import ConfigVersion
from scheduling.models import PriorityRequest, Quota
from simulation.models import SimulationRun

BEFORE = [
    ("portal", "0009_project_slug_as_descriptors_write_it"),
    ("scheduling", "0015_simulationrun_workloads_name_the_behaviour"),
    # Where these apps already are, so that their models are in the state read back.
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
    ("admin", "0003_logentry_add_action_flag_choices"),
]
UNTIL = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def _migrate(targets=None):
    """Migrate to the targets (default: the latest) and return the models as they were there."""
    executor = MigrationExecutor(connection)
    targets = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    ContentType.objects.clear_cache()
    return MigrationExecutor(connection).loader.project_state(targets).apps


def _populate(old) -> dict[str, int]:
    user = old.get_model("auth", "User")
    permission = old.get_model("auth", "Permission")
    content_type = old.get_model("contenttypes", "ContentType")
    pi = user.objects.create(username="move-pi")
    granted = user.objects.create(username="move-granted")
    late = user.objects.create(username="move-late")
    project = old.get_model("portal", "Project").objects.create(slug="move", name="M", pi=pi)
    pool = old.get_model("scheduling", "Pool").objects.create(name="move-pool", kind="local")
    queue = old.get_model("scheduling", "Queue").objects.create(name="move-queue", pool=pool)
    quota = old.get_model("portal", "Quota").objects.create(
        project=project, queue=queue, resource="gpus", limit=4, over_quota="reject"
    )
    request = old.get_model("portal", "PriorityRequest").objects.create(
        requester=pi, project=project, queue=queue, level=2, reason="deadline", until=UNTIL
    )
    run = old.get_model("scheduling", "SimulationRun").objects.create(
        workload="swf", parameters={"seed": 3}, upload="trace.swf"
    )
    version = old.get_model("portal", "ConfigVersion").objects.create(
        model="portal.quota",
        object_id=quota.pk,
        object_repr="move: 4 gpus",
        action="create",
        after={"limit": 4},
    )
    quota_type = content_type.objects.get(app_label="portal", model="quota")
    granted.user_permissions.add(
        permission.objects.get(content_type=quota_type, codename="change_quota")
    )
    log = old.get_model("admin", "LogEntry").objects.create(
        user=pi,
        content_type=quota_type,
        object_id=str(quota.pk),
        object_repr="q",
        action_flag=2,
        action_time=UNTIL,
    )
    # The new code, run before the migration, made a second content type for the new label
    # and someone was granted a permission on it.
    request_type = content_type.objects.get(app_label="portal", model="priorityrequest")
    early = content_type.objects.create(app_label="scheduling", model="priorityrequest")
    late.user_permissions.add(
        permission.objects.create(content_type=early, codename="view_priorityrequest", name="v")
    )
    return {
        "quota": quota.pk,
        "request": request.pk,
        "run": run.pk,
        "version": version.pk,
        "log": log.pk,
        "quota_type": quota_type.pk,
        "request_type": request_type.pk,
        "run_type": content_type.objects.get(app_label="scheduling", model="simulationrun").pk,
    }


def _assert_moved(ids: dict[str, int]) -> None:
    quota = Quota.objects.get(pk=ids["quota"])
    assert (quota.project.slug, quota.queue.name, quota.limit, quota.over_quota) == (
        "move",
        "move-queue",
        4,
        "reject",
    )
    request = PriorityRequest.objects.get(pk=ids["request"])
    assert (request.requester.username, request.level, request.until) == ("move-pi", 2, UNTIL)
    run = SimulationRun.objects.get(pk=ids["run"])
    assert (run.workload, run.parameters, run.upload) == ("swf", {"seed": 3}, "trace.swf")
    assert ConfigVersion.objects.get(pk=ids["version"]).model == "scheduling.quota"
    assert not ConfigVersion.objects.filter(model__startswith="portal.quota").exists()
    assert ContentType.objects.get_for_model(Quota).pk == ids["quota_type"]
    assert ContentType.objects.get_for_model(PriorityRequest).pk == ids["request_type"]
    assert ContentType.objects.get_for_model(SimulationRun).pk == ids["run_type"]
    assert not ContentType.objects.filter(app_label="portal", model="quota").exists()
    assert ContentType.objects.filter(model="priorityrequest").count() == 1
    assert LogEntry.objects.get(pk=ids["log"]).content_type_id == ids["quota_type"]
    assert User.objects.get(username="move-granted").has_perm("scheduling.change_quota")
    assert User.objects.get(username="move-late").has_perm("scheduling.view_priorityrequest")


def _assert_back(old, ids: dict[str, int]) -> None:
    assert old.get_model("portal", "Quota").objects.get(pk=ids["quota"]).limit == 4
    assert old.get_model("portal", "PriorityRequest").objects.get(pk=ids["request"]).level == 2
    run = old.get_model("scheduling", "SimulationRun").objects.get(pk=ids["run"])
    assert run.parameters == {"seed": 3}
    version = old.get_model("portal", "ConfigVersion").objects.get(pk=ids["version"])
    assert version.model == "portal.quota"
    content_type = old.get_model("contenttypes", "ContentType")
    labels = {
        (t.app_label, t.model)
        for t in content_type.objects.filter(
            pk__in=[ids["quota_type"], ids["request_type"], ids["run_type"]]
        )
    }
    assert labels == {
        ("portal", "quota"),
        ("portal", "priorityrequest"),
        ("scheduling", "simulationrun"),
    }


@pytest.mark.django_db(transaction=True)
def test_a_populated_database_keeps_its_rows_and_labels_across_the_move_and_back():
    try:
        ids = _populate(_migrate(BEFORE))
        _migrate()
        _assert_moved(ids)
        _assert_back(_migrate(BEFORE), ids)
        _migrate()
        _assert_moved(ids)
    finally:
        _migrate()
