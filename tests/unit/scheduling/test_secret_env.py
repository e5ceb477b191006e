"""`secret_env`: values stored sealed, shown to no one (names only), and in the job's
environment at run time. (The Slurm script's side: test_slurm_script.py.)"""

from __future__ import annotations

import json
import os
import stat

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from scheduling import engine
from scheduling.engine import get_backend
from scheduling.models import Pool, Task
from scheduling.selectors import site_view_invalidate
from scheduling.selectors.logs import task_log
from tests.conftest import descriptor, submit
from tests.unit.scheduling.local_backend.helpers import finished

pytestmark = pytest.mark.django_db

SECRET = "sk-live-7f3a9c1e-do-not-show"


def _client(username: str, *, api: bool) -> Client | APIClient:
    client = APIClient() if api else Client()
    client.force_login(User.objects.get(username=username))
    return client


def _all_rows_text() -> str:
    """Every value of every table, as text: what a copy of the database would hold."""
    out = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - names from the schema
            out.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(out)


def test_a_queue_admin_reads_no_secret_value_in_the_api_the_page_or_submit_again(site, api):
    made = submit(api, descriptor(env={"PLAIN": "visible"}, secret_env={"API_KEY": SECRET}))
    assert made.status_code == 201, made.json()
    assert SECRET not in made.content.decode()
    task_id = made.json()["id"]
    for who in ("quinn", "admin", "alice"):  # a queue admin, a platform admin, the owner
        detail = _client(who, api=True).get(f"/api/v1/tasks/{task_id}/")
        assert detail.status_code == 200
        assert SECRET not in detail.content.decode()
        assert detail.json()["spec"]["secret_env"] == {"API_KEY": "••••"}  # the name shows
        page = _client(who, api=False).get(f"/tasks/{task_id}/")
        assert page.status_code == 200 and SECRET not in page.content.decode()
        assert "API_KEY" in page.content.decode()
        again = _client(who, api=False).get(f"/tasks/new/?from={task_id}")
        assert again.status_code == 200 and SECRET not in again.content.decode()
        assert "API_KEY" in again.content.decode() and "enter them again" in again.content.decode()


def test_the_database_holds_no_secret_value_in_clear(site, api):
    assert submit(api, descriptor(secret_env={"API_KEY": SECRET})).status_code == 201
    yaml_doc = (
        "apiVersion: switchyard/v1\nkind: Task\nname: y\nproject: materials\n"
        f"walltime: 10m\ncommand: ['true']\nsecret_env:\n  API_KEY: {SECRET}  # a comment\n"
    )
    assert submit(api, yaml_doc, "application/yaml").status_code == 201
    batch = api.post(
        "/api/v1/tasks/batch/",
        {"tasks": [descriptor(name=f"b{i}", secret_env={"API_KEY": SECRET}) for i in range(2)]},
        format="json",
    )
    assert batch.status_code == 201, batch.json()
    flow = api.post(
        "/api/v1/workflows/",
        {
            "apiVersion": "switchyard/v1",
            "kind": "Workflow",
            "name": "wf",
            "project": "materials",
            "tasks": [
                {
                    "name": "a",
                    "walltime": "10m",
                    "command": ["true"],
                    "secret_env": {"API_KEY": SECRET},
                }
            ],
        },
        format="json",
    )
    assert flow.status_code == 201, flow.json()
    assert Task.objects.count() == 5
    held = _all_rows_text()
    assert SECRET not in held and "sk-live" not in held
    for task in Task.objects.all():  # sealed, and opened only with the portal's key
        assert set(task.spec["secret_env"]) == {"API_KEY"}
        assert "API_KEY" in task.descriptor and "••••" in task.descriptor
    # A batch's task keeps its own descriptor as sent, compact, with the value masked.
    sent = descriptor(name="b0", secret_env={"API_KEY": "••••"})
    assert Task.objects.get(name="b0").descriptor == json.dumps(sent, ensure_ascii=False)


def test_secret_env_follows_envs_rules_and_no_error_repeats_a_value(site, api):
    both = submit(api, descriptor(env={"API_KEY": "x"}, secret_env={"API_KEY": SECRET}))
    assert both.status_code == 400
    assert {e["field"] for e in both.json()["errors"]} == {"secret_env.API_KEY"}
    assert "also in env" in both.json()["errors"][0]["message"]
    bad = submit(
        api,
        descriptor(
            secret_env={"LD_PRELOAD": SECRET, "bad name": SECRET, "TOKEN": SECRET + "\n", "N": 7}
        ),
    )
    assert bad.status_code == 400
    fields = {e["field"] for e in bad.json()["errors"]}
    assert fields == {
        "secret_env.LD_PRELOAD",
        "secret_env.bad name",
        "secret_env.TOKEN",
        "secret_env.N",
    }
    assert SECRET not in bad.content.decode()
    # "Submit again" shows the mask; sent back as it is, it is refused, not run as the value.
    masked = submit(api, descriptor(secret_env={"API_KEY": "••••"}))
    assert masked.status_code == 400 and "enter the value again" in masked.content.decode()


def test_a_real_local_job_has_the_secret_in_its_environment_and_its_files_are_private(
    site, api, settings
):
    Pool.objects.update(backend="local")  # real processes, in the sandbox
    site_view_invalidate()
    made = submit(
        api,
        descriptor(
            command=["sh", "-c", 'echo "key=$API_KEY"'],
            secret_env={"API_KEY": SECRET},
        ),
    )
    assert made.status_code == 201, made.json()
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    backend = get_backend("local")
    finished(backend, task.backend_id, timeout=30)
    assert f"key={SECRET}" in task_log(task=task)
    # What the backend kept beside the job (its request and launch plan) others cannot read.
    jobdir = backend.store.jobdir(task.backend_id)
    for name in ("request.json", "launch.marshal"):
        path = os.path.join(jobdir, name)
        if os.path.exists(path):
            assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, name
    request = json.loads(open(os.path.join(jobdir, "request.json")).read())  # noqa: SIM115
    assert request["spec"]["secret_env"] == {"API_KEY": SECRET}  # what it will run with


def test_a_rotated_key_still_opens_what_it_sealed_until_resealed(site, api, settings):
    from cryptography.fernet import Fernet
    from django.core.management import call_command

    from scheduling import sealed

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.SWITCHYARD_SECRETS_KEYS = [old]
    made = submit(api, descriptor(secret_env={"API_KEY": SECRET}))
    stored = Task.objects.get(pk=made.json()["id"]).spec["secret_env"]
    settings.SWITCHYARD_SECRETS_KEYS = [new, old]  # rotation: the new key first
    assert sealed.open_sealed(stored) == (("API_KEY", SECRET),)
    call_command("reseal_secret_env", stdout=open(os.devnull, "w"))  # noqa: SIM115
    settings.SWITCHYARD_SECRETS_KEYS = [new]  # the old key dropped
    resealed = Task.objects.get(pk=made.json()["id"]).spec["secret_env"]
    assert sealed.open_sealed(resealed) == (("API_KEY", SECRET),)
    with pytest.raises(sealed.CannotOpen, match="submit the task again"):
        settings.SWITCHYARD_SECRETS_KEYS = [Fernet.generate_key().decode()]
        sealed.open_sealed(resealed)
    # A task whose values no key opens fails with the reason; it never runs without them.
    assert engine.task_dispatch(made.json()["id"]) == "refused"
    task = Task.objects.get(pk=made.json()["id"])
    assert task.state == "failed" and "secret_env.API_KEY: cannot be opened" in task.reason
