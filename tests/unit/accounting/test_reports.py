"""Reports, exports, collectors and the usage pages: who sees what, what the files hold."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import openpyxl
import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from accounting.meter import meter
from accounting.services import collector_create
from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.models import Attempt, Task
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

DAY1 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
DAY2 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
RANGE = "from=2026-11-01&to=2026-11-30"


def _run(client, *, project: str, start: datetime, minutes: int, **fields) -> Task:
    response = submit(client, descriptor(project=project, **fields))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    fake = get_backend("fake")
    fake.finish(task.backend_id, JobState.RUNNING, at=start)
    fake.finish(
        task.backend_id, JobState.SUCCEEDED, exit_code=0, at=start + timedelta(minutes=minutes)
    )
    engine.backend_poll("fake")
    meter(Attempt.objects.filter(task=task).values_list("pk", flat=True))
    return task


@pytest.fixture
def usage(api, outsider_api):
    """alice: 2 × 60 min of 4 cores in materials (two days), 30 min of 2 GPUs in climate;
    bob: 60 min of 8 cores in genomics."""
    hpc = {"type": "hpc-simulation", "walltime": "2h"}
    _run(api, project="materials", start=DAY1, minutes=60, name="m1", resources={"cpus": 4}, **hpc)
    _run(api, project="materials", start=DAY2, minutes=60, name="m2", resources={"cpus": 4}, **hpc)
    _run(
        api,
        project="climate",
        start=DAY1,
        minutes=30,
        name="c1",
        type="ai-inference",
        walltime="1h",
        resources={"cpus": 1, "gpus": 2},
    )
    _run(
        outsider_api,
        project="genomics",
        start=DAY1,
        minutes=60,
        name="g1",
        resources={"cpus": 8},
        **hpc,
    )


def _client(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def _cpu(rows, **match) -> Decimal:
    return sum(
        (
            Decimal(r["quantity"])
            for r in rows
            if r["metric"] == "cpu" and all(r.get(k) == v for k, v in match.items())
        ),
        Decimal(0),
    )


def test_a_researcher_sees_their_projects_and_finance_sees_all(usage, api):
    mine = api.get(f"/api/v1/usage/?{RANGE}&group_by=project&period=day").json()
    assert {r["project"] for r in mine["rows"]} == {"materials", "climate"}
    assert _cpu(mine["rows"], project="materials", period="2026-11-02") == 4
    assert _cpu(mine["rows"], project="materials", period="2026-11-03") == 4
    finance = _client("finn").get(f"/api/v1/usage/?{RANGE}&group_by=project&period=month").json()
    assert {r["project"] for r in finance["rows"]} == {"materials", "climate", "genomics"}
    assert _cpu(finance["rows"], project="genomics", period="2026-11-01") == 8
    [gpu] = [t for t in finance["totals"] if t["metric"] == "gpu"]
    assert Decimal(gpu["settled"]) == 1 and Decimal(gpu["charge"]) == Decimal("8.00")
    # HPC: 16 core-hours at 0.06.
    [cpu] = [t for t in finance["totals"] if t["metric"] == "cpu"]
    assert Decimal(cpu["settled"]) == Decimal("16.5") and Decimal(cpu["charge"]) == Decimal("0.96")


def test_the_command_lines_usage_shows_each_total_in_its_unit_and_the_sites_currency(
    usage, settings
):
    from switchyard_cli.cli import usage_text

    report = _client("finn").get(f"/api/v1/usage/?{RANGE}&group_by=project&period=all").json()
    lines = usage_text(report).splitlines()
    [cpu] = [line for line in lines if line.startswith("cpu ")]
    assert "core-hours" in cpu and f"0.96 {settings.SWITCHYARD_CURRENCY}" in cpu
    [gpu] = [line for line in lines if line.startswith("gpu ")]
    assert "GPU-hours" in gpu and f"8.00 {settings.SWITCHYARD_CURRENCY}" in gpu
    assert usage_text({**report, "totals": []}) == "no usage in this period"


def test_groups_filters_and_periods(usage):
    finn = _client("finn")
    by_user = finn.get(f"/api/v1/usage/?{RANGE}&group_by=user,queue&period=all&metric=cpu").json()
    assert {(r["user"], r["queue"]) for r in by_user["rows"]} == {
        ("alice", "hpc"),
        ("alice", "inference-agent"),
        ("bob", "hpc"),
    }
    week = finn.get(f"/api/v1/usage/?{RANGE}&group_by=project&period=week&project=materials").json()
    assert {r["period"] for r in week["rows"]} == {"2026-11-02"}  # both days in one week
    assert _cpu(week["rows"]) == 8


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("period=year", "period"),
        ("group_by=colour", "group_by"),
        ("group_by=project,user,queue", "group_by"),
        ("from=yesterday", "from"),
        ("from=2026-11-05&to=2026-11-01", "to"),
        ("metric=watts", "metric"),
        ("group_by=record", "format"),
    ],
)
def test_bad_report_parameters_name_the_field(api, query, field):
    response = api.get(f"/api/v1/usage/?{query}")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field


def test_csv_export_streams_with_the_period_and_filters_in_its_name(usage):
    response = _client("finn").get(
        f"/api/v1/usage/?{RANGE}&group_by=project&period=all&format=csv&queue=hpc"
    )
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv"
    assert response["Content-Disposition"] == (
        'attachment; filename="usage_20261101-20261130_project_all_queue-hpc.csv"'
    )
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {r["project"]: r["quantity"] for r in rows if r["metric"] == "cpu"} == {
        "materials": "8.000000",
        "genomics": "8.000000",
    }


def test_xlsx_export_opens_in_a_real_reader_with_the_right_totals(usage):
    response = _client("finn").get(f"/api/v1/usage/?{RANGE}&group_by=record&format=xlsx")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"].endswith('_record_day.xlsx"')
    book = openpyxl.load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)
    sheet = book.active
    rows = list(sheet.iter_rows(values_only=True))
    header, body = rows[0], rows[1:]
    col = {name: i for i, name in enumerate(header)}
    cpu = [r for r in body if r[col["metric"]] == "cpu"]
    assert len(cpu) == 4
    assert sum(Decimal(str(r[col["quantity"]])) for r in cpu) == Decimal("16.5")
    assert sum(Decimal(str(r[col["charge"]])) for r in cpu) == Decimal("0.96")
    assert {r[col["project"]] for r in cpu} == {"materials", "climate", "genomics"}


def test_xlsx_months_are_dates_charges_are_money_and_a_last_row_totals_them(usage):
    response = _client("finn").get(
        f"/api/v1/usage/?{RANGE}&group_by=project&period=month&format=xlsx"
    )
    raw = b"".join(response.streaming_content)
    sheet = openpyxl.load_workbook(io.BytesIO(raw)).active
    rows = list(sheet.iter_rows())
    col = {cell.value: i for i, cell in enumerate(rows[0])}
    body, total = rows[1:-1], rows[-1]
    assert {r[col["period"]].value for r in body} == {datetime(2026, 11, 1)}
    assert {r[col["period"]].number_format for r in body} == {"yyyy-mm-dd"}
    assert {r[col["charge"]].number_format for r in body} == {"#,##0.00"}
    assert {r[col["quantity"]].number_format for r in body} == {"#,##0.000"}
    charges = sum(Decimal(str(r[col["charge"]].value)) for r in body)
    assert total[0].value == "Total"
    assert total[col["charge"]].value == f"=SUM(F2:F{len(rows) - 1})"
    cached = openpyxl.load_workbook(io.BytesIO(raw), data_only=True).active
    assert Decimal(str(list(cached.iter_rows(values_only=True))[-1][col["charge"]])) == charges


def test_every_record_row_names_its_currency_a_free_one_too(usage, settings):
    response = _client("finn").get(f"/api/v1/usage/?{RANGE}&group_by=record&format=csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert any(Decimal(r["charge"]) == 0 for r in rows)  # memory has no rate here
    assert {r["currency"] for r in rows} == {settings.SWITCHYARD_CURRENCY}


def test_a_spreadsheet_formula_in_a_value_is_defused_in_csv(api):
    from accounting.exports import csv_stream

    text = b"".join(csv_stream(["name"], [['=HYPERLINK("x")'], ["plain"]])).decode()
    assert "'=HYPERLINK" in text and "plain" in text


def test_a_tasks_usage_is_settled_per_attempt_and_404_outside_its_projects(
    usage, api, outsider_api
):
    task = Task.objects.get(name="c1")
    body = api.get(f"/api/v1/tasks/{task.pk}/usage/").json()
    gpu = next(r for r in body["settled"] if r["metric"] == "gpu")
    assert (gpu["attempt"], Decimal(gpu["quantity"]), Decimal(gpu["charge"])) == (1, 1, 8)
    assert body["committed"] == []
    assert outsider_api.get(f"/api/v1/tasks/{task.pk}/usage/").status_code == 404


def test_running_work_shows_as_committed_beside_settled(api):
    response = submit(api, descriptor(name="live", type="hpc-simulation", resources={"cpus": 2}))
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    started = datetime.now(UTC) - timedelta(hours=1)
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, at=started)
    engine.backend_poll("fake")
    today = datetime.now(UTC).date().isoformat()
    totals = api.get(f"/api/v1/usage/?from={today}&to={today}").json()["totals"]
    [cpu] = [t for t in totals if t["metric"] == "cpu"]
    assert Decimal(cpu["settled"]) == 0 and Decimal(cpu["committed"]) >= 2
    committed = api.get(f"/api/v1/tasks/{task.pk}/usage/").json()["committed"]
    assert next(c for c in committed if c["metric"] == "cpu")["unit"] == "core-hours"


# -- collectors ----------------------------------------------------------------------------


def test_a_collector_sends_samples_once_and_its_token_does_nothing_else(site):
    _, token = collector_create("nas")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Collector {token}")
    samples = {
        "samples": [
            {
                "id": "2026-11-02/materials",
                "project": "materials",
                "metric": "storage",
                "quantity": 1200.5,
                "at": "2026-11-02",
            },
            {
                "id": "net-1",
                "project": "genomics",
                "metric": "network",
                "quantity": "40",
                "at": "2026-11-02T10:00:00Z",
            },
        ]
    }
    first = client.post("/api/v1/usage/samples/", samples, format="json")
    assert first.status_code == 200, first.json()
    assert first.json() == {"recorded": 2, "already": 0}
    assert client.post("/api/v1/usage/samples/", samples, format="json").json() == {
        "recorded": 0,
        "already": 2,
    }
    totals = _client("finn").get(f"/api/v1/usage/?{RANGE}&group_by=metric&period=all").json()
    storage = next(t for t in totals["totals"] if t["metric"] == "storage")
    # 1200.5 GB-days (the older form) are 1200.5 × 10^9 / 2^30 × 24 GiB-hours …
    assert storage["unit"] == "GiB-hours"
    assert Decimal(storage["settled"]) == (Decimal("1200.5") * 10**9 / 2**30 * 24).quantize(
        Decimal("0.000001")
    )
    assert Decimal(storage["charge"]) == Decimal("13.42")  # … at 0.0005 a GiB-hour (rounded)
    # The collector token is no user token, and a user token cannot ingest.
    assert client.get("/api/v1/tasks/").status_code == 401
    assert _client("alice").post("/api/v1/usage/samples/", samples, format="json").status_code in (
        401,
        403,
    )
    bad = client.post(
        "/api/v1/usage/samples/",
        {
            "samples": [
                {
                    "id": "x",
                    "project": "materials",
                    "metric": "cpu",
                    "quantity": 1,
                    "at": "2026-11-02",
                }
            ]
        },
        format="json",
    )
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["field"] == "samples[0].metric"
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Collector not-a-token")
    assert wrong.post("/api/v1/usage/samples/", samples, format="json").status_code == 401


# -- pages ---------------------------------------------------------------------------------


def _browser(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def test_the_usage_page_shows_charts_totals_and_downloads(usage, browser):
    page = browser.get(f"/usage/?{RANGE}&group_by=project&period=day")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("data-figure=") == 3 and "plotly-basic-4.1.1.min.js" in html
    assert "genomics" not in html  # alice's projects only
    assert "/api/v1/usage/?from=2026-11-01" in html and "format=xlsx" in html
    partial = browser.get(f"/usage/?{RANGE}&period=week", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and b"<html" not in partial.content
    bad = browser.get("/usage/?period=fortnight")
    assert bad.status_code == 200 and b"period: must be one of" in bad.content


def test_reconciliation_page_is_read_by_finance_and_run_by_admins(usage, browser, worker):
    assert browser.get("/usage/reconciliation/").status_code == 404
    finn = _browser("finn")
    assert finn.get("/usage/reconciliation/").status_code == 200
    assert b"Reconcile now" not in finn.get("/usage/reconciliation/").content
    # finance reads; running one is a platform admin's
    assert finn.post("/usage/reconciliation/run/").status_code == 404
    assert _client("finn").post("/api/v1/usage/reconciliations/").status_code == 403
    with worker():
        response = _browser("admin").post("/usage/reconciliation/run/", follow=True)
    assert b"Reconciliation started" in response.content
    assert _client("alice").get("/api/v1/usage/reconciliations/").status_code == 403
    runs = _client("finn").get("/api/v1/usage/reconciliations/").json()
    assert {r["backend"] for r in runs} == {"fake"}


def test_a_tasks_usage_fragment_is_404_outside_its_projects(usage, browser, outsider_browser):
    task = Task.objects.get(name="m1")
    assert browser.get(f"/usage/tasks/{task.pk}/").status_code == 200
    assert outsider_browser.get(f"/usage/tasks/{task.pk}/").status_code == 404


def test_pool_utilisation_is_used_hours_over_the_pools_capacity(usage):
    from accounting import reports
    from scheduling.models import Node

    finance = User.objects.get(username="finn")
    day = DAY1.date()
    rows = {
        r["pool"]: r
        for r in reports.pool_utilisation(finance, reports.UsageQuery(day, day, ("pool",), "all"))
    }
    cores = sum(Node.objects.filter(pool__name="cpu-hpc").values_list("cpus", flat=True))
    hpc = rows["cpu-hpc"]
    assert hpc["cpu_hours"] == Decimal(12)  # materials m1 (4 × 1 h) and genomics g1 (8 × 1 h)
    assert hpc["cpu_percent"] == (Decimal(12) * 100 / (cores * 24)).quantize(Decimal("0.1"))
    assert rows["inference-agent"]["gpu_hours"] == Decimal(1)  # climate c1: 2 GPUs × 30 min
    assert hpc["gpu_percent"] is None  # a pool without GPUs has no GPU utilisation
