"""Finance in real Chromium: filters a month, sees the charts, downloads CSV and XLSX."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import openpyxl
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from accounting import metrics
from accounting.meter import insert, rate_for
from accounting.models import UsageRecord
from portal.models import Project
from scheduling.models import Queue
from tests.browser.test_priority_flow import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def november(site):
    """Usage records of three projects in November 2026, and one in October (filtered out)."""
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    training = Queue.objects.get(name="training")
    hpc = Queue.objects.get(name="hpc")
    rows = [
        ("materials", alice, training, "gpu", 16 * 3_600_000, date(2026, 11, 3)),
        ("climate", alice, hpc, "cpu", 512 * 3_600_000, date(2026, 11, 10)),
        ("genomics", bob, hpc, "cpu", 128 * 3_600_000, date(2026, 11, 20)),
        ("genomics", bob, hpc, "cpu", 999 * 3_600_000, date(2026, 10, 20)),
    ]
    records = []
    for i, (project, user, queue, metric, quantity, day) in enumerate(rows):
        at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
        rate = rate_for(queue.pk, metric, at)
        records.append(
            UsageRecord(
                key=f"sy-{900 + i}-demo-1:{metric}",
                metric=metric,
                quantity=quantity,
                charge=metrics.charge_micros(quantity, metric, rate.price),
                rate=rate,
                project=Project.objects.get(slug=project),
                user=user,
                queue=queue.name,
                pool=queue.pool.name,
                task_type="ai-training" if metric == "gpu" else "hpc-simulation",
                backend="local",
                source="local",
                started_at=at,
                ended_at=at,
                day=day,
            )
        )
    insert(records)


def test_finance_filters_a_month_sees_the_charts_and_downloads_both_files(november, page, tmp_path):
    log_in(page, "finn", "finn-demo-pass")
    page.get_by_role("link", name="Usage").click()
    expect(page.get_by_role("heading", name="Usage")).to_be_visible()
    page.wait_for_load_state("load")  # the filters react once htmx has started
    page.get_by_label("From", exact=True).fill("2026-11-01")
    page.get_by_label("To", exact=True).fill("2026-11-30")
    page.get_by_label("Per", exact=True).select_option("month")
    # The filters are in the URL (a link to this report gives it back).
    expect(page).to_have_url(
        re.compile(r"from=2026-11-01&to=2026-11-30&group_by=project&period=month")
    )
    expect(page.locator("#report h2").last).to_have_text("By project, per month")
    expect(page.locator("#usage-totals tr[data-metric='cpu']")).to_contain_text(
        "640.000 core-hours"
    )
    expect(page.locator("#usage-totals tr[data-metric='gpu']")).to_contain_text("16.000 GPU-hours")
    for chart in ("#chart-over-time", "#chart-share", "#chart-utilisation"):
        expect(page.locator(f"{chart} .main-svg").first).to_be_visible()  # drawn by plotly.js
    expect(page.locator("#usage-rows")).to_contain_text("genomics")

    with page.expect_download() as got:
        page.locator("#download-csv").click()
    csv_file = got.value
    assert csv_file.suggested_filename == "usage_20261101-20261130_project_month.csv"
    rows = list(csv.DictReader(io.StringIO(Path(csv_file.path()).read_text(encoding="utf-8"))))
    cpu = {r["project"]: Decimal(r["quantity"]) for r in rows if r["metric"] == "cpu"}
    assert cpu == {"climate": Decimal(512), "genomics": Decimal(128)}

    with page.expect_download() as got:
        page.locator("#download-xlsx").click()
    xlsx = got.value
    assert xlsx.suggested_filename == "usage_20261101-20261130_project_month.xlsx"
    saved = tmp_path / xlsx.suggested_filename
    xlsx.save_as(saved)
    sheet = openpyxl.load_workbook(saved, read_only=True, data_only=True).active
    header, *body, total = list(sheet.iter_rows(values_only=True))
    col = {name: i for i, name in enumerate(header)}
    charges = sum(Decimal(str(r[col["charge"]])) for r in body)
    # 16 GPU-hours × 12.00 + 640 core-hours × 0.06
    assert charges == Decimal("230.40")
    assert total[0] == "Total" and Decimal(str(total[col["charge"]])) == charges
