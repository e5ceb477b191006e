"""The workflow pages through Django's test client: the DAG, live refresh, list, submit, cancel."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.models import Task, Workflow
from scheduling.presenters.dag import dag_picture
from scheduling.views import workflows as views
from tests.conftest import descriptor
from tests.unit.scheduling.workflows.helpers import DIAMOND, task, workflow

pytestmark = pytest.mark.django_db


@pytest.fixture
def diamond(researcher) -> Workflow:
    return services.workflow_submit(
        user=researcher, text=json.dumps(workflow(*DIAMOND, name="diamond")), fmt="json"
    )


def _page(response) -> str:
    return response.content.decode()


def _set(wf: Workflow, name: str, state: str, reason: str = "") -> None:
    Task.objects.filter(workflow=wf, name=name).update(state=state, reason=reason)


def _dag(page: str) -> str:
    return page.split('<svg class="dag" id="workflow-dag"', 1)[1].split("</svg>", 1)[0]


def _edges(page: str) -> list[str]:
    return sorted(re.findall(r'<path class="dag-edge (\w+)" data-from="\d+" d="M', _dag(page)))


def _nodes(page: str) -> dict[str, tuple[str, str]]:
    """{task id: (state, layer)} of the boxes drawn in the DAG."""
    found = re.findall(
        r'<a href="/tasks/(\d+)/" class="dag-node dag-(\w+)" id="dag-task-\1" '
        r'data-state="\2" data-layer="(\d+)">',
        page,
    )
    return {pk: (state, layer) for pk, state, layer in found}


def test_the_workflow_page_draws_the_dag_with_states_and_links(browser, diamond):
    ids = dict(diamond.tasks.values_list("name", "pk"))
    _set(diamond, "a", "succeeded")
    _set(diamond, "b", "running")
    page = _page(browser.get(f"/workflows/{diamond.pk}/"))
    assert '<svg class="dag" id="workflow-dag"' in page
    assert _nodes(page) == {
        str(ids["a"]): ("succeeded", "0"),
        str(ids["b"]): ("running", "1"),
        str(ids["c"]): ("waiting", "1"),
        str(ids["d"]): ("waiting", "2"),
    }
    for name in "abcd":
        assert f">{name}</text>" in page  # each box names its task
    # One arrow per dependency: a→b, a→c met; b→d, c→d not yet.
    assert _edges(page) == ["done", "done", "open", "open"]
    assert '<marker id="arrow-done"' in page  # the arrows' heads (CSS puts them on the edges)


def test_the_workflow_page_shows_its_state_reason_tasks_and_cancel(browser, diamond):
    page = _page(browser.get(f"/workflows/{diamond.pk}/"))
    assert 'id="workflow-state">running<' in page
    assert 'id="cancel-workflow"' in page and f'action="/workflows/{diamond.pk}/cancel/"' in page
    assert 'id="workflow-tasks"' in page
    d = diamond.tasks.get(name="d")
    row = page.split(f'<tr id="task-{d.pk}"', 1)[1].split("</tr>", 1)[0]
    b, c = (diamond.tasks.get(name=n).pk for n in "bc")
    assert f'<td class="deps"><a href="/tasks/{b}/">b</a>, <a href="/tasks/{c}/">c</a></td>' in row
    assert "waiting for its dependencies" in row
    assert "project materials" in page and "by alice" in page


def test_while_it_runs_the_page_asks_only_for_what_changed_and_then_stops(browser, diamond):
    page = _page(browser.get(f"/workflows/{diamond.pk}/"))
    head = page.split('<div id="workflow-status"', 1)[1].split(">", 1)[0]
    assert f'data-live="/workflows/{diamond.pk}/changes/"' in head
    since = float(re.search(r'data-since="([\d.]+)"', head).group(1))
    assert "workflow-live.js" in page

    # Nothing changed since the page: no task is sent (those within the overlap aside).
    later = since + views.LIVE_OVERLAP_S + 1
    quiet = browser.get(f"/workflows/{diamond.pk}/changes/?since={later}").json()
    assert quiet["tasks"] == [] and quiet["live"] is True
    assert dict(quiet["counts"]) == dict(Counter(diamond.tasks.values_list("state", flat=True)))

    # One task changes: it alone comes back, with what its row and box show.
    a = diamond.tasks.get(name="a")
    Task.objects.filter(pk=a.pk).update(
        state="succeeded", reason="", updated_at=timezone.now() + timedelta(seconds=30)
    )
    one = browser.get(f"/workflows/{diamond.pk}/changes/?since={later}")
    body = one.json()
    assert [t["id"] for t in body["tasks"]] == [a.pk]
    assert body["tasks"][0] == {
        "id": a.pk,
        "state": "succeeded",
        "shown": "succeeded",
        "exit_code": None,
        "attempts": 0,
        "reason": "",
        "edges": "done",
    }
    assert len(one.content) < 1000
    assert float(body["since"]) > since

    Task.objects.filter(workflow=diamond).update(state="succeeded")
    Workflow.objects.filter(pk=diamond.pk).update(state="succeeded", reason="every task ok")
    assert browser.get(f"/workflows/{diamond.pk}/changes/?since={later}").json()["live"] is False
    page = _page(browser.get(f"/workflows/{diamond.pk}/"))
    assert "data-live" not in page.split('id="workflow-status"', 1)[1].split(">", 1)[0]
    assert 'id="cancel-workflow"' not in page
    assert "every task ok" in page


def test_the_changes_of_another_projects_workflow_are_404_and_a_bad_since_is_400(
    browser, outsider_browser, diamond
):
    assert outsider_browser.get(f"/workflows/{diamond.pk}/changes/?since=0").status_code == 404
    bad = browser.get(f"/workflows/{diamond.pk}/changes/?since=yesterday")
    assert bad.status_code == 400
    assert bad.json()["errors"][0] == {
        "field": "since",
        "message": "expected seconds since the epoch (0 to 253402300799)",
        "got": "yesterday",
    }


def test_the_graph_keeps_updating_while_an_aborted_workflow_still_has_running_tasks(
    browser, diamond
):
    _set(diamond, "b", "failed")
    _set(diamond, "c", "running")
    Workflow.objects.filter(pk=diamond.pk).update(state="failed", reason="task b ended failed")
    page = _page(browser.get(f"/workflows/{diamond.pk}/"))
    assert "data-live=" in page and 'id="cancel-workflow"' in page
    assert "task b ended failed" in page


def test_a_failed_dependency_draws_a_blocked_arrow(browser, diamond):
    _set(diamond, "a", "succeeded")
    _set(diamond, "b", "failed")
    page = _page(browser.get(f"/workflows/{diamond.pk}/"))
    assert _edges(page) == ["blocked", "done", "done", "open"]


def test_cancel_on_the_page_cancels_the_workflow_and_says_so(browser, diamond):
    response = browser.post(f"/workflows/{diamond.pk}/cancel/", follow=True)
    assert response.redirect_chain == [(f"/workflows/{diamond.pk}/", 302)]
    diamond.refresh_from_db()
    assert diamond.state == "cancelled"
    assert set(diamond.tasks.values_list("state", flat=True)) == {"cancelled"}
    page = _page(response)
    assert "every unfinished task is cancelled" in page and "cancelled by alice" in page
    assert browser.get(f"/workflows/{diamond.pk}/cancel/").status_code == 405


def test_another_projects_workflow_page_and_cancel_are_404(outsider_browser, diamond):
    assert outsider_browser.get(f"/workflows/{diamond.pk}/").status_code == 404
    assert outsider_browser.post(f"/workflows/{diamond.pk}/cancel/").status_code == 404
    assert "diamond" not in _page(outsider_browser.get("/workflows/"))
    diamond.refresh_from_db()
    assert diamond.state == "running"


def test_the_list_shows_the_users_workflows_with_progress_and_the_nav_links_it(browser, diamond):
    _set(diamond, "a", "succeeded")
    page = _page(browser.get("/workflows/"))
    assert f'href="/workflows/{diamond.pk}/">diamond</a>' in page
    assert "1/4" in page  # tasks ended
    assert '<a href="/workflows/" aria-current="page">Workflows</a>' in page
    rows = _page(browser.get("/workflows/", headers={"HX-Request": "true"}))
    assert rows.lstrip().startswith("<tr") and "<html" not in rows
    assert "No <b>failed</b> workflows" in _page(browser.get("/workflows/?state=failed"))
    assert 'href="/workflows/"' in _page(browser.get("/"))  # top nav on every page


def test_an_empty_list_says_what_a_workflow_is(browser):
    page = _page(browser.get("/workflows/"))
    assert "No workflows yet" in page and "/api/v1/workflows/" in page


def test_the_task_page_links_to_its_workflow(browser, diamond, researcher):
    b = diamond.tasks.get(name="b")
    page = _page(browser.get(f"/tasks/{b.pk}/"))
    assert f'href="/workflows/{diamond.pk}/" id="task-workflow">diamond</a>' in page
    lone = services.task_submit(user=researcher, text=json.dumps(descriptor()), fmt="json")
    assert 'id="task-workflow"' not in _page(browser.get(f"/tasks/{lone.pk}/"))


# --- submit -----------------------------------------------------------------------------------


def test_a_workflow_pasted_on_the_submit_page_goes_to_its_page(browser):
    text = json.dumps(workflow(*DIAMOND, name="pasted"), indent=2)
    response = browser.post("/tasks/new/", {"descriptor": text})
    wf = Workflow.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/workflows/{wf.pk}/"
    assert (wf.name, wf.tasks.count(), wf.descriptor) == ("pasted", 4, text)


def test_the_example_workflow_on_the_submit_page_is_accepted_as_it_stands(browser):
    page = _page(browser.get("/tasks/new/"))
    example = html.unescape(page.split('<pre id="example-workflow">', 1)[1].split("</pre>")[0])
    response = browser.post("/tasks/new/", {"descriptor": example})
    assert response.status_code == 302, _page(response)
    assert Workflow.objects.get().tasks.count() == 3


def test_an_uploaded_workflow_file_is_accepted(browser):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile(
        "flow.json", json.dumps(workflow(task("a"), task("b", "a"))).encode(), "application/json"
    )
    response = browser.post("/tasks/new/", {"descriptor_file": upload})
    assert response.status_code == 302 and response["Location"].startswith("/workflows/")


def test_a_bad_workflow_on_the_submit_page_lists_its_errors_and_stores_nothing(browser):
    text = json.dumps(workflow(task("a", "b"), task("b", "a"), task("c", "nope")))
    response = browser.post("/tasks/new/", {"descriptor": text})
    assert response.status_code == 400
    page = html.unescape(_page(response))
    assert "The descriptor was not submitted" in page
    assert "cycle: a → b → a" in page and "<code>tasks[2].depends_on[0]</code>" in page
    assert Task.objects.count() == Workflow.objects.count() == 0


def test_a_task_pasted_on_the_submit_page_still_goes_to_its_task_page(browser):
    response = browser.post("/tasks/new/", {"descriptor": json.dumps(descriptor())})
    assert response["Location"] == f"/tasks/{Task.objects.get().pk}/"


# --- the layout -------------------------------------------------------------------------------


def test_the_layout_puts_each_task_one_column_after_its_furthest_dependency(researcher):
    # a → b → c and a → c: c goes after b (longest path), not beside it.
    doc = workflow(task("a"), task("b", "a"), task("c", "a", "b"), task("lone"))
    wf = services.workflow_submit(user=researcher, text=json.dumps(doc), fmt="json")
    tasks = list(wf.tasks.prefetch_related("depends_on").order_by("id"))
    picture = dag_picture(tasks)
    layers = {box.task.name: box.layer for box in picture.boxes}
    assert layers == {"a": 0, "lone": 0, "b": 1, "c": 2}
    assert len(picture.edges) == 3
    boxes = {box.task.name: box for box in picture.boxes}
    assert boxes["a"].x < boxes["b"].x < boxes["c"].x
    assert boxes["a"].y != boxes["lone"].y
    right = max(box.x for box in picture.boxes) + picture.box_w
    assert picture.width > right and picture.height > max(b.y for b in picture.boxes)
