"""Charts and tables as people read them: periods named ("Dec 2026"), one unit for a chart
and the table beside it, and words where there is nothing to draw."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounting import charts, dashboards
from accounting.reports import period_label
from tests.unit.accounting.test_reports import RANGE, usage  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("start", "period", "shown"),
    [
        ("2026-12-01", "month", "Dec 2026"),
        ("2026-11-30", "week", "week of 30 Nov 2026"),
        ("2026-12-05", "day", "5 Dec 2026"),
    ],
)
def test_a_period_is_named_as_people_name_it(start, period, shown):
    assert period_label(start, period) == shown


def test_the_usage_page_names_months_in_its_table_and_its_chart(usage):  # noqa: F811
    page = Client()
    page.force_login(User.objects.get(username="alice"))
    html = page.get(f"/usage/?{RANGE}&group_by=project&period=month").content.decode()
    assert '<time datetime="2026-11-01">Nov 2026</time>' in html
    assert "2026-11-01</td>" not in html
    rows = [{"period": "2026-11-01", "metric": "cpu", "quantity": "4"}]
    figure = json.loads(
        charts.over_time(rows, dimension=None, metric="cpu", unit="core-hours", period="month")
    )
    assert figure["data"][0]["x"] == ["Nov 2026"]
    assert figure["layout"]["xaxis"]["type"] == "category"  # not parsed back into a date axis


def test_charts_with_nothing_to_draw_say_so():
    for text, expected in (
        (
            charts.over_time([], dimension=None, metric="gpu", unit="GPU-hours", period="day"),
            "no GPU-hours used",
        ),
        (charts.share([], by="project", value="charge", title="charges"), "nothing charged"),
        (
            charts.utilisation([{"pool": "gpu", "cpu_percent": None, "gpu_percent": 0}]),
            "no work ran",
        ),
    ):
        figure = json.loads(text)
        assert figure["data"] == []
        assert expected in figure["layout"]["annotations"][0]["text"]


def test_the_waits_chart_and_its_table_use_one_unit():
    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    quick = [("ai-agent", now, now + timedelta(seconds=s)) for s in (1, 3, 5)]
    slow = [("ai-training", now, now + timedelta(minutes=m)) for m in (30, 50)]
    for started, unit in ((quick, "s"), (quick + slow, "min")):
        stats = dashboards.wait_stats(started)
        shown = dashboards.wait_unit(stats)
        assert shown[0] == unit
        figure = json.loads(charts.waits(stats, shown))
        assert figure["layout"]["title"]["text"] == f"waits this week ({unit})"
        rows = dashboards.shown_waits(stats, shown)
        assert [r["mean"] for r in rows] == figure["data"][0]["y"]
