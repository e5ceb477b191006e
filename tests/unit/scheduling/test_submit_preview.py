"""The submit page's live preview (POST /tasks/new/preview/): what submitting would do, the
same decisions as the submit itself, nothing stored; and a guessed type's refusal."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import AuditEvent, Project
from scheduling.models import Queue, Quota, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

PREVIEW = "/tasks/new/preview/"
FIELDS = {
    "name": "md-simulation",
    "project": "materials",
    "command": "python3 md.py",
    "cpus": "4",
    "gpus": "0",
    "memory": "4Gi",
    "walltime": "15m",
}
BIG_GPU = {**FIELDS, "name": "big", "cpus": "16", "gpus": "8", "memory": "64Gi", "walltime": "3h"}


def _preview(client: Client, data: dict) -> str:
    response = client.post(PREVIEW, data)
    assert response.status_code == 200, response.content
    return response.content.decode()


def _shown(page: str, what: str) -> str:
    """The bold value of the preview's `what` (type, queue) row."""
    found = re.search(rf'class="preview-{what}"><b>([^<]+)</b>', page)
    assert found, f"no {what} in the preview:\n{page}"
    return found.group(1)


@pytest.mark.parametrize(
    "data",
    [
        FIELDS,  # a short small CPU job: guessed agent
        {**FIELDS, "type": "hpc-simulation"},
        {**FIELDS, "cpus": "128", "memory": "64Gi", "walltime": "2h"},  # many CPUs: HPC
        {**BIG_GPU, "estimate": "3h"},  # long many-GPU work: training
        {**FIELDS, "gpus": "1", "cpus": "8", "walltime": "30m"},  # one GPU: inference
        {
            "descriptor": "apiVersion: switchyard/v1\nkind: Task\nname: d\nproject: climate\n"
            "resources: {cpus: 2}\nwalltime: 1h\ncommand: ['true']\n"
        },  # fmt: skip
    ],
)
def test_the_preview_names_the_type_and_queue_the_submit_then_gives(browser, data):
    page = _preview(browser, data)
    assert 'id="preview-verdict"' in page, page
    assert Task.objects.count() == 0  # the preview stored nothing
    response = browser.post("/tasks/new/", data)
    assert response.status_code == 302, response.content.decode()
    task = Task.objects.get()
    assert (task.type, task.queue.name) == (_shown(page, "type"), _shown(page, "queue"))
    assert task.classify_reason in html.unescape(page)


def test_a_guessed_type_is_marked_with_its_rule_and_the_better_type(browser):
    page = _preview(browser, FIELDS)
    assert _shown(page, "type") == "agent" and 'class="badge guessed"' in page
    assert "small request (4 CPUs ≤ 4, no GPUs) and walltime 15min (under 30min) → agent" in page
    assert "<code>type: hpc-simulation</code> (queue hpc takes it)" in page
    assert 'data-set-type="hpc-simulation"' in page  # one click sets the type field
    declared = _preview(browser, {**FIELDS, "type": "agent"})
    assert 'class="badge">declared' in declared and "preview-others" not in declared


def test_the_preview_shows_the_quota_with_its_room_and_a_start(browser):
    page = _preview(browser, {**BIG_GPU, "estimate": "3h"})
    assert _shown(page, "queue") == "training"
    quota = page.split('class="preview-quota">', 1)[1].split("</dd>", 1)[0]
    assert "project materials uses 0/32 GPUs in queue training: room for 32 more GPUs" in quota
    assert "its quota has room now" in quota
    start = page.split('class="preview-start">', 1)[1].split("</dd>", 1)[0]
    assert "<b>at once</b>: the pool has room for it now" in start  # the fake pool is empty
    assert "next to start among the queue's tasks waiting to start" in start


def test_a_full_quota_shows_that_it_would_wait_for_it(browser, researcher):
    hpc = Queue.objects.get(name="hpc")
    Quota.objects.create(
        project=Project.objects.get(slug="materials"), queue=hpc, resource="tasks", limit=1
    )
    site_view_invalidate()
    assert browser.post("/tasks/new/", {**FIELDS, "type": "hpc-simulation"}).status_code == 302
    Task.objects.update(admitted=True, state="running")
    page = _preview(browser, {**FIELDS, "type": "hpc-simulation"})
    quota = page.split('class="preview-quota">', 1)[1].split("</dd>", 1)[0]
    assert "uses 1/1 running tasks in queue hpc: room for 0 more running tasks" in quota
    assert "it waits for room" in quota
    assert "waits for its quota first" in page


def test_a_refusal_of_a_guessed_type_says_so_and_names_the_type_that_fits(api):
    response = submit(api, descriptor(resources={"gpus": 8, "cpus": 16}, walltime="3h"))
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert (error["field"], error["got"]) == ("walltime", "3h")
    assert error["message"].startswith(
        "walltime 3h exceeds queue inference-agent's maximum of 1h; its type ai-inference was "
        "guessed, not given (8 GPUs, but no estimate to show it is long training"
    )
    assert "declare `type: ai-training` with an `estimate:`" in error["message"]
    # Doing as it says is accepted, and lands where it said.
    fixed = submit(
        api,
        descriptor(
            resources={"gpus": 8, "cpus": 16}, walltime="3h", type="ai-training", estimate="3h"
        ),
    )
    assert fixed.status_code == 201, fixed.json()
    assert fixed.json()["queue"] == "training"


def test_a_refusal_of_a_declared_type_does_not_call_it_guessed(api):
    response = submit(
        api, descriptor(resources={"gpus": 8, "cpus": 16}, walltime="3h", type="ai-inference")
    )
    assert response.status_code == 400
    message = response.json()["errors"][0]["message"]
    assert message == "walltime 3h exceeds queue inference-agent's maximum of 1h"


def test_the_preview_shows_the_refusal_the_submit_would_give(browser):
    page = _preview(browser, BIG_GPU)
    assert 'data-accepted="no"' in page and 'id="preview-verdict"' not in page
    assert "<code>walltime</code>: walltime 3h exceeds queue inference-agent" in page
    assert "guessed, not given" in page and "<code>type: ai-training</code>" in page
    refused = browser.post("/tasks/new/", BIG_GPU)
    assert refused.status_code == 400 and "guessed, not given" in refused.content.decode()
    assert Task.objects.count() == 0


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        ({**FIELDS, "cpus": "many"}, "<b>CPUs</b>: Enter a whole number. (got <code>many</code>)"),
        ({**FIELDS, "walltime": "forever"}, "<code>walltime</code>: "),
        ({**FIELDS, "command": "echo 'open"}, "<b>Command</b>: cannot split the command"),
        ({"descriptor": "kind: Task\nname: ["}, "invalid YAML at line"),
        ({"descriptor": "[1, 2]"}, "the descriptor must be a mapping"),
        ({"descriptor": "kind: Task\nresources: {cpus: -3}\n"}, "<code>resources.cpus</code>"),
        ({"descriptor": "x" * (256 * 1024 + 1)}, "bytes"),  # over the descriptor's limit
    ],
)
def test_bad_input_shows_the_field_and_what_was_wrong_never_a_500(browser, data, shown):
    page = _preview(browser, data)
    assert 'id="preview-errors"' in page or 'class="error preview-refusal"' in page, page
    assert shown in page
    assert Task.objects.count() == 0


def test_a_project_not_ones_own_is_named_and_its_quotas_are_not_shown(browser):
    before = AuditEvent.objects.count()
    doc = (
        "apiVersion: switchyard/v1\nkind: Task\nname: d\nproject: genomics\ntype: ai-training\n"
        "resources: {gpus: 8}\nestimate: 3h\ncommand: ['true']\n"
    )
    page = _preview(browser, {"descriptor": doc})
    assert "you are not a member of this project" in page
    assert "<code>project</code>" in page and "genomics" in page
    assert "preview-quota" not in page and "uses 0/32" not in page
    assert AuditEvent.objects.count() == before


def test_the_fields_still_empty_are_named_and_the_rest_is_previewed(browser):
    page = _preview(browser, {**FIELDS, "name": "", "command": ""})
    assert "Still to fill in: Name, Command" in page
    assert _shown(page, "queue") == "inference-agent"


def test_a_workflow_is_previewed_task_by_task(browser):
    workflow = (
        "apiVersion: switchyard/v1\nkind: Workflow\nname: w\nproject: materials\ntasks:\n"
        "  - {name: sim, resources: {cpus: 128}, walltime: 2h, command: ['true']}\n"
        "  - {name: fit, depends_on: [sim], resources: {gpus: 8}, walltime: 3h,"
        " command: ['true']}\n"
    )
    page = _preview(browser, {"descriptor": workflow})
    assert "<h3>sim</h3>" in page and "<h3>fit</h3>" in page
    assert "<code>tasks[1].walltime</code>" in page and "guessed, not given" in page


def test_the_preview_asks_to_be_signed_in_and_answers_only_posts(browser):
    assert Client().post(PREVIEW, FIELDS).status_code == 302
    assert browser.get(PREVIEW).status_code == 405


def test_another_members_view_of_the_same_input_is_their_own(site):
    bob = User.objects.get(username="bob")  # member of genomics only
    client = Client()
    client.force_login(bob)
    page = _preview(client, {**FIELDS, "project": "genomics"})
    assert _shown(page, "queue") == "inference-agent" and 'id="preview-verdict"' in page
