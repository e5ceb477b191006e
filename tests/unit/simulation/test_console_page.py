"""The console's Simulations page: start a what-if run, follow it, read and compare results.

The worker's part is the Celery task itself (`tasks.run_queued`), called here in-process:
tests publish nothing, so the broker is replaced at its edge (`outbox.send`).
"""

from __future__ import annotations

import html
import json
import re
from unittest import mock

import pytest
from celery import current_app
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from simulation import tasks
from simulation.models import SimulationRun
from simulation.services import ORPHANED, RUN_QUEUED
from simulation.simulator.criteria import CRITERIA, format_value
from tests.conftest import ROOT

TRACES = ROOT.parent / "shared" / "traces"
ALL = ["fifo", "easy", "switchyard"]


@pytest.fixture(autouse=True)
def _uploads(settings, tmp_path):
    settings.SWITCHYARD_SIMULATION_DIR = tmp_path / "simulations"


def _page(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


@pytest.fixture
def admin_page(site) -> Client:
    return _page("admin")  # a platform admin


@pytest.fixture
def quinn_page(site) -> Client:
    return _page("quinn")  # the demo site's queue admin


@pytest.fixture
def sent(django_capture_on_commit_callbacks):
    """Start runs with this: the commit's messages are published to a recorder."""
    with mock.patch("scheduling.outbox.send", autospec=True) as send:
        yield lambda: django_capture_on_commit_callbacks(execute=True), send


def _start(client: Client, sent, **fields):
    capture, _ = sent
    data = {"workload": "launch-mix", "policies": ALL, **fields}
    with capture():
        return client.post("/simulations/", data=data)


def _figures(content: str) -> dict[str, dict]:
    found = re.findall(r'id="(chart-[\w-]+)" data-figure="([^"]*)"', content)
    return {name: json.loads(html.unescape(figure)) for name, figure in found}


def _swf(lines: int = 40, name: str = "lublin-head.swf") -> SimpleUploadedFile:
    text = "".join((TRACES / "lublin_256.swf").open().readlines()[:lines])
    return SimpleUploadedFile(name, text.encode(), content_type="text/plain")


def test_a_validation_day_run_started_by_a_platform_admin_runs_and_shows_the_criteria_and_charts(
    admin_page, sent
):
    response = _start(admin_page, sent, workload="validation-day", seed="1")
    run = SimulationRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/simulations/{run.pk}/"
    assert (run.state, run.progress, run.parameters) == ("queued", 0, {"policies": ALL, "seed": 1})
    assert run.created_by.username == "admin"
    assert [c.args for c in sent[1].call_args_list] == [(RUN_QUEUED, ())]
    page = admin_page.get(f"/simulations/{run.pk}/").content.decode()
    assert 'id="simulation-state">queued' in page
    assert f'hx-get="/simulations/{run.pk}/progress/"' in page  # it follows itself
    live = admin_page.get(f"/simulations/{run.pk}/progress/", HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and b'<progress id="simulation-progress"' in live.content

    with CaptureQueriesContext(connection) as queries:
        assert tasks.run_queued() == 1
    run.refresh_from_db()
    assert (run.state, run.progress, run.error) == ("succeeded", 100, "")
    assert run.started_at <= run.finished_at
    assert len(run.result["criteria"]) == len(CRITERIA)
    # The bar moved in whole points: a handful of writes, never one per job.
    writes = [q for q in queries if q["sql"].startswith("UPDATE") and "progress" in q["sql"]]
    assert 3 <= len(writes) <= 102

    fragment = admin_page.get(f"/simulations/{run.pk}/progress/", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 286  # htmx's "stop polling": the fragment has the results
    page = admin_page.get(f"/simulations/{run.pk}/").content.decode()
    assert "hx-get" not in page.split('id="simulation-live"')[1].split(">")[0]
    table = page.split('id="simulation-criteria"')[1].split("</table>")[0]
    for head in ("Criterion", "Target", "Switchyard", "FIFO", "EASY", "Met"):
        assert f"<th>{head}</th>" in table
    shown = table.split("<tbody>")[1].split("</tr>")[:-1]
    for line, row, criterion in zip(shown, run.result["criteria"], CRITERIA, strict=True):
        how = f'<div class="muted">{html.escape(criterion.how)}</div>'
        assert row["target"].startswith(criterion.target)  # a measured before is added to it
        assert f"<td>{criterion.name}{how}</td><td>{html.escape(row['target'])}</td>" in line
        if row["passed"]:
            assert ">pass</span></td>" in line and not row["why"]
        else:  # a FAIL names its cause, from the run's own data
            assert f'>FAIL</span><div class="muted">{html.escape(row["why"])}</div>' in line
            assert row["why"].strip()
    agents = run.result["criteria"][0]
    assert f"<td>{format_value(agents['values']['fifo'], agents['unit'])}</td>" in table
    charts = _figures(page)
    assert set(charts) == {"chart-waits", "chart-utilisation", "chart-bsld"}
    waits = charts["chart-waits"]
    assert [t["name"] for t in waits["data"]] == ["FIFO", "EASY", "Switchyard"]
    assert "agent" in waits["data"][0]["x"] and waits["layout"]["barmode"] == "group"
    assert [t["name"] for t in charts["chart-utilisation"]["data"]] == ["CPU", "GPU"]
    assert charts["chart-bsld"]["data"][0]["x"] == ["FIFO", "EASY", "Switchyard"]
    assert 'id="simulation-policies"' in page


def test_a_queue_admin_runs_the_launch_mix_and_the_header_links_the_page(quinn_page, sent):
    assert 'href="/simulations/"' in quinn_page.get("/dashboard/").content.decode()
    _start(quinn_page, sent, workload="launch-mix", seed="3", policies=["switchyard", "fifo"])
    tasks.run_queued()
    run = SimulationRun.objects.get()
    assert run.state == "succeeded" and run.progress == 100
    assert list(run.result["policies"]) == ["fifo", "switchyard"] and run.result["seed"] == 3
    page = quinn_page.get(f"/simulations/{run.pk}/").content.decode()
    assert 'id="simulation-criteria"' not in page  # criteria are the validation day's
    rows = page.split('id="simulation-policies"')[1].split("</table>")[0]
    assert "<td>FIFO</td><td>53</td>" in rows and "<td>Switchyard</td><td>53</td>" in rows
    listing = quinn_page.get("/simulations/").content.decode()
    assert f'id="simulation-{run.pk}"' in listing and "seed 3 · fifo, switchyard" in listing


def test_a_researcher_gets_a_404_on_every_simulation_url(site, researcher, admin_page, sent):
    _start(admin_page, sent)
    run = SimulationRun.objects.get()
    alice = _page("alice")
    for url in (
        "/simulations/",
        f"/simulations/{run.pk}/",
        f"/simulations/{run.pk}/progress/",
        f"/simulations/compare/?run={run.pk}&run={run.pk}",
    ):
        assert alice.get(url).status_code == 404, url
        assert alice.get(url, HTTP_HX_REQUEST="true").status_code == 404, url
    assert alice.post("/simulations/", data={"workload": "launch-mix"}).status_code == 404
    assert SimulationRun.objects.count() == 1
    assert 'href="/simulations/"' not in alice.get("/dashboard/").content.decode()


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        (
            {"workload": "alibaba"},
            "workload",
            "expected one of validation-day, launch-mix, history, swf",
        ),
        (
            {"workload": "r14-burst"},
            "workload",
            "expected one of validation-day, launch-mix, history, swf",
        ),
        ({"seed": "one"}, "seed", "expected a whole number"),
        ({"seed": "1.5"}, "seed", "expected a whole number"),
        ({"workload": "history", "days": "0"}, "days", "expected a number of days above 0"),
        ({"workload": "history", "days": "-2"}, "days", "expected a number of days above 0"),
        ({"workload": "history", "days": "nan"}, "days", "expected a number of days above 0"),
        ({"workload": "swf"}, "file", "expected a Standard Workload Format file"),
        ({"policies": []}, "policies", "expected some of fifo, easy, switchyard"),
        ({"policies": ["fifo", "bogus"]}, "policies", "expected some of fifo, easy, switchyard"),
        ({"workload": "validation-day", "policies": ["fifo"]}, "policies", "tick all three"),
        (
            {"workload": "history", "seed": "4"},
            "seed",
            "only validation-day and launch-mix read it",
        ),
        ({"days": "3"}, "days", "only history reads it"),
        ({"limit": "10"}, "limit", "only swf reads it"),
        ({"workload": "swf", "limit": "0", "file": "trace"}, "limit", "at least 1"),
        ({"workload": "swf", "repeat": "1000", "file": "trace"}, "repeat", "from 1 to 100"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    admin_page, sent, settings, fields, field, says
):
    if fields.get("file") == "trace":
        fields["file"] = _swf()
    response = _start(admin_page, sent, **fields)
    assert response.status_code == 400
    page = response.content.decode()
    assert "The run was not started" in page
    assert f"<code>{field}</code>: " in page and says in html.unescape(page), page
    assert SimulationRun.objects.count() == 0
    assert not settings.SWITCHYARD_SIMULATION_DIR.exists()  # no upload kept either
    sent[1].assert_not_called()


def test_a_trace_over_the_size_limit_is_refused_with_its_size(admin_page, sent, settings):
    settings.SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES = 1024 * 1024
    big = SimpleUploadedFile("big.swf", b";\n" * (600 * 1024))
    response = _start(admin_page, sent, workload="swf", file=big)
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert (
        "<code>file</code>: expected a trace of at most 1.0 MB (got <code>big.swf, 1.2 MB" in page
    )
    assert SimulationRun.objects.count() == 0 and not settings.SWITCHYARD_SIMULATION_DIR.exists()


def test_an_uploaded_trace_is_kept_under_the_var_dir_and_replayed(admin_page, sent, settings):
    _start(admin_page, sent, workload="swf", file=_swf(), limit="20", repeat="2", seed="")
    run = SimulationRun.objects.get()
    assert run.upload_path.parent.parent == settings.SWITCHYARD_SIMULATION_DIR
    assert run.upload_name == "lublin-head.swf" and run.upload_path.is_file()
    assert run.parameters == {"policies": ALL, "limit": 20, "repeat": 2}
    tasks.run_queued()
    run.refresh_from_db()
    assert run.state == "succeeded" and run.result["jobs"] == 40  # 20 jobs, twice
    page = admin_page.get(f"/simulations/{run.pk}/").content.decode()
    assert "lublin-head.swf · first 20 jobs · replayed 2 times" in page
    # The trace's site has no GPUs: its utilisation chart has the CPU only.
    assert [t["name"] for t in _figures(page)["chart-utilisation"]["data"]] == ["CPU"]


def test_a_malformed_trace_ends_the_run_failed_with_the_line_at_fault(admin_page, sent):
    bad = SimpleUploadedFile("bad.swf", b"; a header\n\n1 0 -1 10 4\n")
    _start(admin_page, sent, workload="swf", file=bad)
    tasks.run_queued()
    run = SimulationRun.objects.get()
    assert run.state == "failed" and run.finished_at is not None
    assert run.error == "bad.swf:3: expected 18 columns, got 5"
    page = admin_page.get(f"/simulations/{run.pk}/").content.decode()
    assert 'id="simulation-error"' in page and "bad.swf:3: expected 18 columns, got 5" in page
    fragment = admin_page.get(f"/simulations/{run.pk}/progress/", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 286 and b"bad.swf:3" in fragment.content


def test_a_run_that_breaks_is_kept_failed_with_the_error(admin_page, sent):
    _start(admin_page, sent)
    with mock.patch(
        "simulation.services.run_named", autospec=True, side_effect=RuntimeError("boom")
    ):
        tasks.run_queued()
    run = SimulationRun.objects.get()
    assert (run.state, run.error) == ("failed", "internal error: RuntimeError: boom")


def test_an_empty_history_replays_to_a_result_with_no_jobs(admin_page, sent):
    _start(admin_page, sent, workload="history", days="2.5")
    tasks.run_queued()
    run = SimulationRun.objects.get()
    assert run.state == "succeeded", run.error
    assert run.parameters["days"] == 2.5 and run.result["jobs"] == 0
    # Nothing to divide by: stored as null, not NaN (which PostgreSQL's JSON refuses).
    assert run.result["policies"]["fifo"]["mean_bsld"] is None
    assert "no job ran" in admin_page.get(f"/simulations/{run.pk}/").content.decode()


def test_a_run_left_running_by_a_worker_that_went_away_is_failed_not_lost(admin_page, sent):
    _start(admin_page, sent)
    SimulationRun.objects.update(state="running", progress=40)
    assert tasks.run_queued() == 0
    run = SimulationRun.objects.get()
    assert (run.state, run.error, run.progress) == ("failed", ORPHANED, 40)


def test_the_beat_and_a_message_queued_under_the_tasks_old_name_both_run_queued_runs(
    admin_page, sent, settings
):
    beat = settings.CELERY_BEAT_SCHEDULE["simulations"]["task"]
    assert beat == RUN_QUEUED
    _start(admin_page, sent, policies=["fifo"])
    # Scheduling ran it under this name before it moved to the simulation app.
    assert current_app.tasks["scheduling.simulations"].apply().get() == 1
    assert SimulationRun.objects.get().state == "succeeded"
    _start(admin_page, sent, policies=["fifo"])
    assert current_app.tasks[beat].apply().get() == 1


def test_runs_are_kept_newest_first_and_two_compare_side_by_side(admin_page, sent):
    for seed in ("1", "2"):
        _start(admin_page, sent, seed=seed)
    _start(admin_page, sent, workload="swf", file=SimpleUploadedFile("x.swf", b"1 2\n"))
    tasks.run_queued()
    first, second, broken = SimulationRun.objects.order_by("id")
    listing = admin_page.get("/simulations/").content.decode()
    assert (
        listing.index(f'id="simulation-{broken.pk}"')
        < listing.index(f'id="simulation-{second.pk}"')
        < listing.index(f'id="simulation-{first.pk}"')
    )
    page = admin_page.get(f"/simulations/compare/?run={first.pk}&run={second.pk}")
    assert page.status_code == 200
    content = page.content.decode()
    table = content.split('id="compare-policies"')[1].split("</table>")[0]
    for run in (first, second):
        said = content.split(f'id="compare-{run.pk}"')[1].split("</li>")[0]
        assert f"seed {run.parameters['seed']} · fifo, easy, switchyard" in said
        assert table.count(f"<td>#{run.pk} launch-mix</td><td>53</td>") == 3  # one per policy
    assert table.index("<td>FIFO</td>") < table.index("<td>EASY</td>")
    charts = _figures(content)
    assert [t["name"] for t in charts["chart-compare-waits"]["data"]] == [
        f"#{first.pk} launch-mix",
        f"#{second.pk} launch-mix",
    ]
    failed = admin_page.get(f"/simulations/compare/?run={first.pk}&run={broken.pk}")
    assert "x.swf:1: expected 18 columns, got 2" in failed.content.decode()
    one = admin_page.get(f"/simulations/compare/?run={first.pk}", follow=True)
    assert "Compare: tick two runs (got 1)." in one.content.decode()
    assert admin_page.get(f"/simulations/compare/?run={first.pk}&run=999").status_code == 404
