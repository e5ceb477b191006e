"""Storage metering: the shipped collector measures what `du -sxB1` counts, sends it over HTTP
to the ingest API, the report shows GiB-hours by area, and a project's page warns past an
area's soft quota."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.test import APIClient

from accounting import storage_collector
from accounting.metrics import KIB_SECONDS_PER_GB_DAY, METRICS
from accounting.models import Rate, UsageRecord
from accounting.reports import site_today
from accounting.selectors import size_text
from accounting.services import collector_create
from scheduling.models import StorageArea
from scheduling.selectors import site_view_invalidate
from tests.conftest import move_storage_areas

GIB = 2**30


def du(path: Path) -> int:
    """What `du -x` says the folder holds: allocated bytes on its file system, the folder itself
    included."""
    out = subprocess.run(["du", "-sxB1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))


@pytest.fixture
def areas(site, tmp_path: Path) -> Path:
    """The demo site's areas moved below tmp_path, with folders of known contents: a
    materials folder with nested files, a sparse file, a hard link and a link pointing out
    of it at a big file; climate's; alice's home."""
    move_storage_areas(tmp_path)
    outside = tmp_path / "outside.bin"
    _write(outside, 3_000_000)
    materials = tmp_path / "projects" / "materials"
    _write(materials / "train.py", 1_234)
    _write(materials / "data" / "a.bin", 700_000)
    _write(materials / "data" / "deeper" / "b.bin", 65_537)
    os.link(materials / "data" / "a.bin", materials / "a-again.bin")  # counted once
    (materials / "big-link").symlink_to(outside)  # the link itself, never its target
    with open(materials / "sparse.bin", "wb") as f:  # allocated, not apparent, bytes
        f.write(b"x" * 5000)
        f.truncate(50_000_000)
    _write(tmp_path / "projects" / "climate" / "out.nc", 20_000)
    _write(tmp_path / "home" / "alice" / "notes.txt", 4_321)
    _write(tmp_path / "datasets" / "public.bin", 10_000)  # the site's: not metered
    return tmp_path


@pytest.fixture
def token(site) -> str:
    return collector_create("portal-storage")[1]


def _collect(live_server, token: str) -> str:
    out = []

    class Out:
        def write(self, text: str) -> None:
            out.append(text)

        def flush(self) -> None:
            pass

    call_command(
        "collector", "storage", "--once", "--url", live_server.url, f"--token={token}", stdout=Out()
    )
    return "".join(out)


def _samples(area: str) -> dict[tuple[str, str], int]:
    """(project, user) → bytes of the area's latest samples."""
    return {
        (project, user or ""): size
        for project, user, size in UsageRecord.objects.filter(area=area).values_list(
            "project__slug", "user__username", "bytes"
        )
    }


def test_the_collector_sends_what_du_counts_by_area_once_per_period(areas, token, live_server):
    said = _collect(live_server, token)
    materials, climate = areas / "projects" / "materials", areas / "projects" / "climate"
    # The sparse file and the link's target would make apparent sizes differ a lot.
    assert du(materials) < 3_000_000
    projects = _samples("projects")
    assert projects[("materials", "")] == du(materials)
    assert projects[("climate", "")] == du(climate)
    assert ("genomics", "") not in projects  # no folder made yet: nothing sent
    # alice's home is billed to her two projects in equal shares that add up to du.
    home = _samples("home")
    shares = {k: v for k, v in home.items() if k[1] == "alice"}
    assert set(shares) == {("materials", "alice"), ("climate", "alice")}
    assert sum(shares.values()) == du(areas / "home" / "alice")
    assert abs(shares[("materials", "alice")] - shares[("climate", "alice")]) <= 1
    assert not UsageRecord.objects.filter(area="datasets").exists()
    assert "3 folder(s) measured" in said and "0 already" in said

    # Again within the same period: the same sample ids, nothing stored twice.
    again = _collect(live_server, token)
    assert "0 recorded, 4 already" in again
    assert UsageRecord.objects.filter(metric="storage").count() == 4

    # The report: storage in GiB-hours by area (an hour's samples: bytes / 2^30).
    finn = APIClient()
    finn.force_authenticate(User.objects.get(username="finn"))
    today = site_today()
    span = f"from={today - timedelta(days=1)}&to={today}"
    report = finn.get(f"/api/v1/usage/?{span}&group_by=area&period=all&metric=storage").json()
    by_area = {row["area"]: row for row in report["storage_by_area"]}
    assert set(by_area) == {"projects", "home"}
    expected = {
        "projects": du(materials) + du(climate),
        "home": du(areas / "home" / "alice"),
    }
    for area, size in expected.items():
        assert by_area[area]["unit"] == "GiB-hours"
        assert abs(Decimal(by_area[area]["quantity"]) - Decimal(size) / GIB) <= Decimal("1e-6")
    rows = {row["area"]: row for row in report["rows"]}
    assert rows["projects"]["quantity"] == by_area["projects"]["quantity"]
    # The page shows the same table, and alice sees only her projects' areas.
    page = Client()
    page.force_login(User.objects.get(username="alice"))
    html = page.get(f"/usage/?{span}").content.decode()
    assert 'id="usage-storage-areas"' in html and 'data-area="projects"' in html
    csv_text = finn.get(f"/api/v1/usage/?{span}&group_by=record&format=csv")
    body = b"".join(csv_text.streaming_content).decode()
    assert ",projects," in body and str(du(materials)) in body


def test_a_project_page_warns_past_its_areas_soft_quota_and_stops_when_back_under(
    areas, token, live_server
):
    materials = areas / "projects" / "materials"
    area = StorageArea.objects.get(name="projects")
    area.quota_bytes = 10 * GIB
    area.save()
    site_view_invalidate()
    alice = Client()
    alice.force_login(User.objects.get(username="alice"))
    _collect(live_server, token)
    assert b"soft quota" not in alice.get("/projects/materials/").content  # under it

    area.quota_bytes = du(materials) - 1
    area.save()
    site_view_invalidate()
    html = alice.get("/projects/materials/").content.decode()
    assert f"projects: {size_text(du(materials))} of {size_text(du(materials) - 1)} soft quota" in (
        html
    )
    assert b"soft quota" not in alice.get("/projects/climate/").content  # climate is under

    # Files removed; the next period's measurement is under the quota: the warning goes.
    (materials / "sparse.bin").unlink()
    (materials / "data" / "a.bin").unlink()
    (materials / "a-again.bin").unlink()
    done = storage_collector.collect(live_server.url, token, every=3600, now=time.time() + 3600)
    assert done.recorded == 4
    assert b"soft quota" not in alice.get("/projects/materials/").content


def test_soft_quota_sizes_read_as_people_read_them():
    assert size_text(int(12.3 * GIB)) == "12.3 GiB"
    assert size_text(10 * GIB) == "10 GiB"
    assert size_text(512) == "512 B"
    assert size_text(1536 * 1024) == "1.5 MiB"


def _ingest(token: str, *samples: dict):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Collector {token}")
    return client.post("/api/v1/usage/samples/", {"samples": list(samples)}, format="json")


STORAGE = {"id": "s1", "project": "materials", "metric": "storage", "at": "2026-11-02T10:00:00Z"}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"area": "nowhere", "bytes": 1, "seconds": 3600}, "samples[0].area"),
        ({"bytes": 1}, "samples[0].seconds"),
        ({"bytes": -1, "seconds": 3600}, "samples[0].bytes"),
        ({"bytes": 1, "seconds": 0}, "samples[0].seconds"),
        ({"bytes": "1", "seconds": 3600}, "samples[0].bytes"),
        ({"bytes": 1, "seconds": 3600, "quantity": 2}, "samples[0].quantity"),
    ],
)
def test_a_storage_sample_with_a_bad_field_is_refused_naming_it(token, extra, field):
    response = _ingest(token, {**STORAGE, **extra})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert not UsageRecord.objects.exists()


MONTH = 31 * 24 * 3600


@pytest.mark.parametrize(
    ("extra", "field", "expected"),
    [
        ({"bytes": 2**62 + 1, "seconds": 3600}, "bytes", "from 0 to 4611686018427387904"),
        ({"bytes": 2**64, "seconds": 3600}, "bytes", "from 0 to 4611686018427387904"),
        ({"bytes": 2**62, "seconds": MONTH}, "bytes", f"held for {MONTH} seconds"),
        ({"bytes": 1, "seconds": 2**64}, "seconds", f"from 1 to {MONTH}"),
        ({"quantity": "1e30"}, "quantity", "at most 54657019 GB-days"),
        ({"quantity": "1e999999999"}, "quantity", "at most 54657019 GB-days"),
        ({"metric": "network", "quantity": 1e30}, "quantity", "at most 4611686018427387 GB"),
    ],
)
def test_a_sample_too_big_to_store_is_refused_naming_its_field(token, extra, field, expected):
    response = _ingest(token, {**STORAGE, **extra})
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["field"] == f"samples[0].{field}"
    assert expected in error["message"]
    assert error["got"] == {**STORAGE, **extra}[field]
    assert not UsageRecord.objects.exists()


def test_a_sample_whose_charge_is_too_big_to_store_is_refused_naming_its_field(token):
    Rate.objects.create(
        metric="storage", price=Decimal("10000"), valid_from=datetime(2026, 11, 1, tzinfo=UTC)
    )
    # A PiB for a month: its quantity fits, its charge at 10000 a GiB-hour does not.
    response = _ingest(token, {**STORAGE, "bytes": 2**50, "seconds": MONTH})
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["field"], error["got"]) == ("samples[0].bytes", 2**50)
    assert "charge at 10000" in error["message"]
    # The older form: the field that said too much is the quantity, as sent.
    error = _ingest(token, {**STORAGE, "quantity": "50000000"}).json()["errors"][0]
    assert (error["field"], error["got"]) == ("samples[0].quantity", "50000000")
    assert not UsageRecord.objects.exists()
    # A TiB for an hour at the same price is stored.
    assert _ingest(token, {**STORAGE, "bytes": 2**40, "seconds": 3600}).status_code == 200


def test_a_network_sample_has_no_area_and_no_bytes(token):
    network = {"id": "n1", "project": "materials", "metric": "network", "at": "2026-11-02"}
    bad = _ingest(token, {**network, "quantity": 1, "area": "projects"})
    assert bad.json()["errors"][0]["field"] == "samples[0].area"
    bad = _ingest(token, {**network, "bytes": 5, "seconds": 60})
    assert {e["field"] for e in bad.json()["errors"]} >= {"samples[0].bytes", "samples[0].seconds"}


def test_a_storage_sample_in_bytes_is_stored_with_its_area_period_and_bytes(token):
    answer = _ingest(token, {**STORAGE, "area": "projects", "bytes": 3 * GIB, "seconds": 7200})
    assert answer.json() == {"recorded": 1, "already": 0}
    record = UsageRecord.objects.get()
    assert (record.area, record.bytes) == ("projects", 3 * GIB)
    assert record.ended_at - record.started_at == timedelta(hours=2)
    assert record.quantity == 6 * METRICS["storage"].per  # 3 GiB for 2 hours: 6 GiB-hours


def test_a_gb_day_is_exactly_so_many_kib_seconds():
    # The older form's unit converts without a remainder (and so do stored records).
    assert KIB_SECONDS_PER_GB_DAY * 1024 == 10**9 * 86_400


def test_the_storage_command_refuses_what_it_cannot_use(areas, live_server, monkeypatch):
    monkeypatch.delenv("SWITCHYARD_COLLECTOR_TOKEN", raising=False)
    monkeypatch.delenv("SWITCHYARD_COLLECTOR_TOKEN_FILE", raising=False)
    with pytest.raises(CommandError, match="no token"):
        call_command("collector", "storage", "--once")
    with pytest.raises(CommandError, match="--every"):
        call_command("collector", "storage", "--once", "--token", "x", "--every", "7")
    with pytest.raises(CommandError, match="samples not sent: 401"):
        call_command("collector", "storage", "--once", "--token", "x", "--url", live_server.url)
