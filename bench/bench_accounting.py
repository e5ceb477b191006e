"""Usage reports and exports over 1,000,000 usage records on PostgreSQL (targets: a grouped
report in ≤ 300 ms; CSV and XLSX of every record in constant memory).

Run: `DATABASE_URL=postgres://… .venv/bin/python bench/bench_accounting.py`. Prints one JSON
line; `run()` returns the same dict for `bench/run_all.py`. Without DATABASE_URL it reports
that it did not run (the target is PostgreSQL's).

A fresh database (dropped afterwards) gets the default site, 20 projects and 100 users, and
1,000,000 records over 90 days (inserted by SQL, then rolled up per day as the metering
writes them). Then, each in a process of its own so that its peak RSS is its own:
- `report`: the finance report grouped by project per month, and by user and queue per day
  (median of 5 runs each, after one warm-up);
- `csv` and `xlsx`: every record streamed (group_by=record) into a sink, at 100,000 records
  (a day range that holds them) and at all 1,000,000: constant memory means the peak RSS is
  the same for both.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

N_RECORDS = 1_000_000
DAYS = 90
TARGET_MS = 300
COMMAND = "DATABASE_URL=postgres://… .venv/bin/python bench/bench_accounting.py"


def _fill(n: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.db import connection

    from portal.models import Project

    finance = User.objects.get(username="finn")
    assert finance.groups.filter(name="finance").exists()
    pi = User.objects.get(username="alice")
    Project.objects.bulk_create(
        [Project(slug=f"bench-{i:02d}", name=f"Bench {i}", pi=pi) for i in range(20)]
    )
    User.objects.bulk_create([User(username=f"user{i:03d}") for i in range(100)])
    Group.objects.get_or_create(name="finance")
    projects = list(Project.objects.filter(slug__startswith="bench-").values_list("pk", flat=True))
    users = list(User.objects.filter(username__startswith="user").values_list("pk", flat=True))
    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO accounting_usagerecord
              (key, metric, quantity, charge, project_id, user_id, queue, pool, task_type,
               backend, job_id, source, started_at, ended_at, day, area, created_at)
            SELECT 'sy-' || i || '-bench-1:' || m.metric, m.metric,
                   (1 + i %% 97)::bigint * 60000 * m.scale, (1 + i %% 97)::bigint * m.price,
                   (%s::int[])[1 + i %% 20], (%s::int[])[1 + (i / 7) %% 100],
                   m.queue, m.pool, m.type, 'slurm', i::text, 'slurm',
                   t.ended - interval '1 hour', t.ended, (t.ended)::date, '', now()
            FROM generate_series(1, %s) AS i
            CROSS JOIN LATERAL (SELECT now() - (i %% %s) * interval '1 day'
                                        - (i %% 1440) * interval '1 minute' AS ended) t
            CROSS JOIN LATERAL (SELECT * FROM (VALUES
                (0, 'cpu', 64, 'hpc', 'cpu-hpc', 'hpc-simulation', 1000),
                (1, 'gpu', 8, 'training', 'gpu-train', 'ai-training', 120000),
                (2, 'memory', 65536, 'training', 'gpu-train', 'ai-training', 0),
                (3, 'instance', 1, 'inference-agent', 'inference-agent', 'agent', 333))
                AS v(k, metric, scale, queue, pool, type, price) WHERE v.k = i %% 4) m
            """,
            [projects, users, n, DAYS],
        )
        inserted = time.perf_counter() - started
        cur.execute(
            """
            INSERT INTO accounting_usagedaily
              (day, project_id, username, queue, pool, task_type, area, metric, quantity, charge,
               records)
            SELECT r.day, r.project_id, COALESCE(u.username, ''), r.queue, r.pool, r.task_type,
                   r.area, r.metric, SUM(r.quantity), SUM(r.charge), COUNT(*)
            FROM accounting_usagerecord r LEFT JOIN auth_user u ON u.id = r.user_id
            GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
            """
        )
        cur.execute("ANALYZE accounting_usagerecord")
        cur.execute("ANALYZE accounting_usagedaily")
        cur.execute("SELECT COUNT(*) FROM accounting_usagedaily")
        daily = cur.fetchone()[0]
        cur.execute("SHOW server_version")
        version = cur.fetchone()[0]
    return {
        "records": n,
        "daily_rows": daily,
        "insert_s": round(inserted, 1),
        "postgresql": version,
    }


def _report() -> dict[str, Any]:
    import django

    django.setup()
    from datetime import timedelta

    from django.contrib.auth.models import User

    from accounting import reports

    finance = User.objects.get(username="finn")
    today = reports.site_today()
    queries = {
        "by_project_per_month": reports.UsageQuery(
            today - timedelta(days=DAYS), today, ("project",), "month"
        ),
        "by_user_and_queue_per_day": reports.UsageQuery(
            today - timedelta(days=DAYS), today, ("user", "queue"), "day"
        ),
    }
    out = {}
    for name, q in queries.items():
        reports.report(finance, q)  # warm-up
        times, rows = [], 0
        for _ in range(5):
            started = time.perf_counter()
            rows = len(reports.report(finance, q))
            times.append(time.perf_counter() - started)
        out[name] = {"median_ms": round(c.median(times) * 1000, 1), "rows": rows}
    return out


def _export(fmt: str, days: int) -> dict[str, Any]:
    import django

    django.setup()
    from datetime import timedelta

    from django.contrib.auth.models import User

    from accounting import reports
    from accounting.exports import csv_stream, xlsx_stream

    finance = User.objects.get(username="finn")
    today = reports.site_today()
    q = reports.UsageQuery(today - timedelta(days=days - 1), today, ("record",), "day")
    header = list(reports.RECORD_COLUMNS)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    body = (
        csv_stream(header, reports.records(finance, q))
        if fmt == "csv"
        else xlsx_stream("usage", header, reports.records(finance, q))
    )
    size = 0
    for chunk in body:
        size += len(chunk)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    count = sum(1 for _ in reports.records(finance, q)) if days < DAYS + 1 else None
    return {
        "format": fmt,
        "days": days,
        "records": count,
        "bytes": size,
        "seconds": round(seconds, 1),
        "records_per_s": None,
        "baseline_rss_mib": round(baseline / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
    }


def _child(env: dict[str, str], *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [c.PY, __file__, "--child", *args],
        cwd=c.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"accounting bench {args} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {"bench": "accounting", "skipped": "needs DATABASE_URL (PostgreSQL)"}
    var_dir = c.fresh_var_dir("accounting")
    try:
        with c.fresh_postgres_database(url) as db:
            env = c.django_env(var_dir, database_url=db)
            c.prepare_site(env)
            filled = _child(env, "fill", str(N_RECORDS))
            report = _child(env, "report")
            # About 100,000 records: the 9 most recent days of 90 (records spread evenly).
            exports = [
                _child(env, "export", fmt, str(days))
                for fmt in ("csv", "xlsx")
                for days in (9, DAYS + 1)
            ]
    finally:
        c.remove_var_dir(var_dir)
    for e in exports:
        e["records"] = e["records"] or N_RECORDS
        e["records_per_s"] = round(e["records"] / e["seconds"]) if e["seconds"] else None
    return {
        "bench": "accounting",
        "target_ms": TARGET_MS,
        **filled,
        "report": report,
        "exports": exports,
    }


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        what = sys.argv[2]
        if what == "fill":
            result = _fill(int(sys.argv[3]))
        elif what == "report":
            result = _report()
        else:
            result = _export(sys.argv[3], int(sys.argv[4]))
        print(json.dumps(result))
    else:
        print(json.dumps(run()))
