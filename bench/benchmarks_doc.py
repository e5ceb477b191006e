"""docs/benchmarks.md, written from the benchmarks' results by bench/run_all.py: the summary
table, a section per benchmark, and the hand-written notes below the marker kept as they are.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench import (  # noqa: E402
    bench_accounting,
    bench_api,
    bench_images,
    bench_latency,
    bench_metrics,
    bench_poll,
    bench_sandbox_api,
    bench_sandboxes,
    bench_sandboxes_slurm,
    bench_simulator,
    bench_slurm,
)

DOC = c.ROOT / "docs" / "benchmarks.md"
# Below this line the doc is hand-written (analysis, profiles): run_all keeps it as it is.
NOTES_MARKER = (
    "<!-- notes: everything below this line is hand-written; bench/run_all.py keeps it -->"
)
DECISIONS_TARGET = 50_000


# -- the document ----------------------------------------------------------------------------


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        value = round(value, 1)
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}{unit}"
    return f"{value}{unit}"


def _met(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def _summary_rows(results: dict[str, Any]) -> list[str]:
    rows = []
    d = results.get("decisions")
    if d:
        rate = d["decisions_per_s"]
        rows.append(
            f"| decisions per second, one core (classify → route → check → admit → level) "
            f"| {_fmt(rate)} "
            f"| ≥ 50,000 | {_met(rate >= DECISIONS_TARGET)} |"
        )
    p = results.get("preempt")
    if p:
        rows.append(
            f"| whom to preempt, inference pool full ({p['nodes']} nodes, {p['running']} "
            f"running) | {p['ms_per_decision']} ms | — (far below the 5 s pass) | — |"
        )
    pol = results.get("policy")
    if pol:
        for database in ("sqlite", "postgresql"):
            if database in pol:
                r = pol[database]
                rows.append(
                    f"| policy pass re-levelling {_fmt(r['tasks'])} waiting tasks, {database} "
                    f"({r['first_pass_level_changes']} change level) | {r['first_pass_s']} s "
                    f"| ≤ {pol['target_s']} s | {_met(r['first_pass_s'] <= pol['target_s'])} |"
                )
    a = results.get("api")
    if a:
        for key, v in a["variants"].items():
            rate = v["tasks_per_s"]
            if "runserver" in key or (key.endswith("inprocess") or "inprocess-" in key):
                target, met = "— (comparison)", "—"
            elif v.get("batch"):
                target = f"≥ {_fmt(bench_api.TARGET_BATCH_PER_S)}"
                met = _met(rate >= bench_api.TARGET_BATCH_PER_S)
            else:
                target = f"≥ {_fmt(bench_api.TARGET_PER_S)}"
                met = _met(rate >= bench_api.TARGET_PER_S)
            rows.append(f"| tasks accepted per second, `{key}` | {_fmt(rate)} | {target} | {met} |")
    lat = results.get("latency")
    if lat:
        for name, p in lat["phases"].items():
            rate = p["submit_rate_target_per_s"]
            for metric, label in (("started", "process started"), ("shown_running", "shown")):
                p50 = p[metric]["p50_ms"]
                what = f"{p['n_tasks']} tasks at {_fmt(rate)}/s"
                if name == "main":
                    what += ", the issue's scenario"
                elif ", " in name:
                    what += f", {name.split(', ', 1)[1]}"
                target = bench_latency.TARGET_P50_MS.get(rate, 200)
                rows.append(
                    f"| agent submit → running p50, {label} ({what}) "
                    f"| {_fmt(p50)} ms | ≤ {target} ms | {_met(p50 <= target)} |"
                )
    if results.get("metrics"):
        rows += bench_metrics.summary_rows(results["metrics"])
    if results.get("images"):
        rows += bench_images.summary_rows(results["images"])
    if results.get("poll"):
        rows += bench_poll.summary_rows(results["poll"])
    if results.get("sandboxes"):
        rows += bench_sandboxes.summary_rows(results["sandboxes"])
    if results.get("sandbox_api"):
        rows += bench_sandbox_api.summary_rows(results["sandbox_api"])
    if results.get("slurm"):
        rows += bench_slurm.summary_rows(results["slurm"])
    if results.get("sandboxes_slurm"):
        rows += bench_sandboxes_slurm.summary_rows(results["sandboxes_slurm"])
    acc = results.get("accounting")
    if acc and "report" in acc:
        for name, r in acc["report"].items():
            ms = r["median_ms"]
            rows.append(
                f"| usage report over {_fmt(acc['records'])} records, PostgreSQL, "
                f"{name.replace('_', ' ')} ({_fmt(r['rows'])} rows) | {ms} ms "
                f"| ≤ {acc['target_ms']} ms | {_met(ms <= acc['target_ms'])} |"
            )
        for fmt in ("csv", "xlsx"):
            small, full = sorted(
                (e for e in acc["exports"] if e["format"] == fmt), key=lambda e: e["records"]
            )
            grew = full["peak_rss_mib"] - small["peak_rss_mib"]
            rows.append(
                f"| {fmt.upper()} export peak RSS, {_fmt(small['records'])} vs "
                f"{_fmt(full['records'])} records | {small['peak_rss_mib']} vs "
                f"{full['peak_rss_mib']} MiB | constant memory | {_met(grew < 16)} |"
            )
    elif acc:
        rows.append(f"| usage report and exports | not run: {acc['skipped']} | — | — |")
    con = results.get("console")
    if con:
        for database in ("sqlite", "postgresql"):
            for name, page in con.get(database, {}).get("pages", {}).items():
                if "target_bytes" in page:  # a live update: judged by what it sends
                    rows.append(
                        f"| {name}, {database} | {_fmt(page['bytes'])} bytes "
                        f"({page['median_ms']} ms) | ≤ {_fmt(page['target_bytes'])} bytes "
                        f"| {_met(page['bytes'] <= page['target_bytes'])} |"
                    )
                    continue
                target = page.get("target_ms") or (
                    con["list_target_ms"] if name.startswith("task list") else con["target_ms"]
                )
                rows.append(
                    f"| {name}, {_fmt(con[database]['tasks'])} tasks, {database} (first render "
                    f"{page['cold_ms']} ms) | {page['median_ms']} ms | ≤ {target} ms "
                    f"| {_met(page['median_ms'] <= target)} |"
                )
    if results.get("simulator"):
        rows += bench_simulator.summary_rows(results["simulator"])
    if results.get("charts"):
        rows.append(chart_row(results["charts"]))
    return rows


def chart_row(ch: dict[str, Any]) -> str:
    full = f"; the full plotly.js {ch['full_bundle_ms']} ms" if ch.get("full_bundle_ms") else ""
    return (
        f"| first chart page in Chromium, empty cache (usage, 3 charts, {ch['library']}; floor: "
        f"the task list to its load event {ch['floor_page_ms']} ms{full}, same run) | "
        f"{ch['first_chart_page_ms']} ms = {ch['ratio']}x the floor | ≤ {ch['target_ms']} ms "
        f"| {_met(ch['met'])} |"
    )


def _accounting_section(acc: dict[str, Any]) -> list[str]:
    lines = [
        f"PostgreSQL {acc['postgresql']}: {_fmt(acc['records'])} usage records over "
        f"{bench_accounting.DAYS} days (20 projects, 100 users, four metrics), inserted in "
        f"{acc['insert_s']} s and rolled up into {_fmt(acc['daily_rows'])} daily rows as the "
        "metering writes them.",
        "",
        "| report (finance, all projects) | rows | median of 5 |",
        "|---|---|---|",
    ]
    for name, r in acc["report"].items():
        lines.append(f"| {name.replace('_', ' ')} | {_fmt(r['rows'])} | {r['median_ms']} ms |")
    lines += [
        "",
        "Exports of every record (`group_by=record`), each in a process of its own; peak RSS "
        "is the process's own maximum resident set (`getrusage`), baseline is before the "
        "export began (Django loaded).",
        "",
        "| format | records | bytes | seconds | records/s | baseline RSS | peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in acc["exports"]:
        lines.append(
            f"| {e['format'].upper()} | {_fmt(e['records'])} | {_fmt(e['bytes'])} | "
            f"{e['seconds']} | {_fmt(e['records_per_s'])} | {e['baseline_rss_mib']} MiB | "
            f"{e['peak_rss_mib']} MiB |"
        )
    return lines


def _api_section(a: dict[str, Any]) -> list[str]:
    lines = [
        "| variant | server | client threads | tasks/s | latency p50 / p90 / p99 / max (ms) "
        "| broker messages |",
        "|---|---|---|---|---|---|",
    ]
    for key, v in a["variants"].items():
        lat = v["latency_of_median_run"]
        runs = v["tasks_per_s_runs"]
        rate = _fmt(v["tasks_per_s"]) + (f" (runs: {runs})" if len(runs) > 1 else "")
        lines.append(
            f"| `{key}` | {v['server']} | {v['clients']} | {rate} | "
            f"{lat['p50_ms']} / {lat['p90_ms']} / {lat['p99_ms']} / {lat['max_ms']} "
            f"| {v.get('messages', '')} |"
        )
    lines += [
        "",
        f"PostgreSQL: {a['postgresql']}.",
        "",
        "Keep-alive round trip of one cheap request (one client, sequential `GET /api/v1/tasks/`):",
        "",
        "| server | p50 | p90 | p99 |",
        "|---|---|---|---|",
    ]
    for server, s in a.get("keepalive_get_probe", {}).items():
        lines.append(f"| {server} | {s['p50_ms']} ms | {s['p90_ms']} ms | {s['p99_ms']} ms |")
    return lines


def _latency_section(lat: dict[str, Any]) -> list[str]:
    lines = [
        f"Beat polls the backends every {lat['poll_ms']} ms (`SWITCHYARD_POLL_MS="
        f"{lat['poll_ms']}`). Latencies in ms from the task's `submitted_at`.",
        "",
        "| phase | tasks | rate asked → sent | measure | p50 | p90 | p99 | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p in lat["phases"].items():
        rates = f"{p['submit_rate_target_per_s']}/s → {p['submit_rate_per_s']}/s"
        for metric, label in (
            ("queued", "`queued` event (dispatched to the backend)"),
            ("started", "`started_at` (process really started)"),
            ("shown_running", "first `running`-or-later event (portal shows it)"),
            ("post_latency", "HTTP POST answered (client side)"),
        ):
            s = p[metric]
            lines.append(
                f"| {name} | {p['n_tasks']} | {rates} | {label} | {s['p50_ms']} | "
                f"{s['p90_ms']} | {s['p99_ms']} | {s['max_ms']} |"
            )
    lines += [
        "",
        "| phase | ended | succeeded | worker: `dispatch` run time p50 / p90 (ms) "
        "| backend polls run | beat polls expired unrun | drained after last submit |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in lat["phases"].items():
        w = p["worker"]
        lines.append(
            f"| {name} | {', '.join(f'{k} {v}' for k, v in p['states'].items())} "
            f"| {p['succeeded']} / {p['n_tasks']} | "
            f"{w['dispatch_run']['p50_ms']} / {w['dispatch_run']['p90_ms']} | {w['polls_run']} | "
            f"{w['polls_expired_unrun']} | {p['seconds_to_drain_after_last_submit']} s |"
        )
    lines += [
        "",
        f"Job processes left after the run: {lat['job_processes_left']} "
        f"(killed at clean-up: {lat['job_processes_killed_at_cleanup']}).",
    ]
    return lines


def write_doc(
    results: dict[str, Any],
    failures: dict[str, str],
    info: dict[str, Any],
    commands: list[tuple[str, str]],
) -> None:
    m = info["machine"]
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by `make bench` (bench/run_all.py): edit the generator, not this file. -->",
        "",
        f"Measured {info['date']} with `make bench` (`.venv/bin/python bench/run_all.py`), "
        f"which took {info['seconds']:.0f} s. Each bench also runs alone:",
        "",
    ]
    out += [f"- {name}: `{command}`" for name, command in commands]
    out += [
        "",
        "## Machine",
        "",
        f"- {m['nproc']} cores (`nproc`), {m['cpu'] or 'unknown CPU'}, Linux {m['kernel']}",
        f"- Python {m['python']}, Django {m['django']}, Django REST framework "
        f"{m['djangorestframework']}, Celery {m['celery']}, SQLite {m['sqlite']}",
        f"- WSGI server: {m['wsgi_server']}",
        f"- Load average (1/5/15 min) before the run: {info['load_before']}, "
        f"after: {info['load_after']}",
        "",
        "**This machine is small and noisy**: 2 cores, shared with other jobs (see the load "
        "average), so the numbers move by tens of percent from run to run. Rates are the median "
        "of the repeats a bench makes (decisions: 5 runs; API: 3 runs of each variant, "
        "1,000 tasks a run, 10,000 for the batch variants); latencies are "
        "percentiles over every task. Everything runs on 127.0.0.1 only, on fresh temporary "
        "var dirs (SQLite file, filesystem broker, local-backend root) that are removed "
        "afterwards.",
        "",
        "## Summary",
        "",
        "| what | measured (median) | target | met |",
        "|---|---|---|---|",
        *_summary_rows(results),
        "",
    ]
    if failures:
        out += ["## Failed benches", ""]
        for name, err in failures.items():
            out += [f"### {name}", "", "```", err.strip()[-3000:], "```", ""]
    d = results.get("decisions")
    if d:
        out += [
            "## Decisions",
            "",
            f"`bench_decisions.run()` on a mix of {14} descriptors over the default 40-node site, "
            f"{_fmt(d['n_per_run'])} decisions per run, {len(d['runs_decisions_per_s'])} runs: "
            f"{', '.join(_fmt(r) for r in d['runs_decisions_per_s'])} decisions/s; "
            f"median **{_fmt(d['decisions_per_s'])}/s**. Pure functions, no Django, one core. "
            "Each decision is what the engine decides for a new task: classify, route, check, "
            "admit against the project's quotas, and the entry level.",
            "",
        ]
    p = results.get("preempt")
    if p:
        out += [
            "## Whom to preempt",
            "",
            f"`bench_capacity.run()`: the default site's inference pool full ({p['running']} "
            f"running tasks on {p['nodes']} nodes: one inference task per GPU, one agent per "
            "agent-node core), and a high-level task asking one GPU; "
            f"`decisions.preempt.whom_to_preempt` {p['n']} times: **{p['ms_per_decision']} ms** "
            "a decision. It runs for each task waiting in a preemptible pool on every capacity "
            "pass (docs/capacity.md). Victims that cannot help (CPU nodes, for GPU work) are "
            "never tried, and trying one more victim recomputes only its own nodes' free room: "
            "the first version recomputed the whole pool per try and took 98 ms here.",
            "",
        ]
    pol = results.get("policy")
    if pol:
        out += [
            "## Policy pass",
            "",
            "`bench_policy.run()`: a fresh portal with 10,000 waiting tasks of the launch mix "
            "(agent, training, HPC) ready 45 s ago, then `engine.levels.relevel(now)` twice: "
            "the first pass moves every agent task from high to medium (30 s rule) and writes "
            "those events and numbers; the second finds nothing to change (the steady state).",
            "",
            "| database | tasks | first pass | level changes | steady pass |",
            "|---|---|---|---|---|",
        ]
        for database in ("sqlite", "postgresql"):
            if database in pol:
                r = pol[database]
                out.append(
                    f"| {database} | {_fmt(r['tasks'])} | {r['first_pass_s']} s | "
                    f"{r['first_pass_level_changes']} | {r['steady_pass_s']} s |"
                )
        out.append("")
    a = results.get("api")
    if a:
        out += [
            "## API acceptance (1,000 tasks; batches: 10,000)",
            "",
            "Each variant: a fresh portal (migrated, `seed_demo --quiet`), 1,000 small valid "
            "JSON descriptors POSTed to `/api/v1/tasks/` with token auth (the batch variants: "
            "10,000, 100 a request to `/api/v1/tasks/batch/`). Accepting includes "
            "validating, classifying and routing, storing the task and its first event, and "
            "publishing its dispatch message to the filesystem broker on commit (no worker "
            "runs). Checked after each run: every answer was 201, the database holds exactly "
            "the tasks sent, and the broker's dispatch messages name each of them once (the web "
            "process's publisher thread gathers the dispatches committed meanwhile into one "
            "message). `inprocess` is DRF's APIClient in one process (the portal's own cost per "
            "request, no HTTP); `http-*` are real HTTP/1.1 keep-alive connections from N client "
            "threads of the bench process, which shares the 2 cores with the server: "
            "`gunicorn` as `manage.py up` runs it (config/runtime/serve.py), `runserver` as `manage.py "
            "up --dev` does. Peers: Slurm accepts ~500 submissions/s when tuned, Kueue ~43/s.",
            "",
            *_api_section(a),
            "",
        ]
    lat = results.get("latency")
    if lat:
        out += [
            "## Agent submit → running (local backend)",
            "",
            "The real stack as subprocesses on a fresh var dir: gunicorn (config/runtime/serve.py) "
            "and `celery -A config worker -B --concurrency=2` (the worker `manage.py up` "
            "starts, with beat inside it; `up` runs beat as a process of its own). Agent tasks (`type: agent`, 1 cpu, walltime 5m, `sleep 0.1`, run in "
            "bubblewrap) are submitted over HTTP open-loop at a steady rate from 4 keep-alive "
            "connections; each phase waits for all its tasks to end. The inference-agent pool "
            "(15 nodes, CPU oversubscription 1:4) never runs short of room.",
            "",
            *_latency_section(lat),
            "",
        ]
    if results.get("metrics"):
        out += [*bench_metrics.section(results["metrics"]), ""]
    if results.get("images"):
        out += [*bench_images.section(results["images"]), ""]
    if results.get("poll"):
        out += [*bench_poll.section(results["poll"]), ""]
    if results.get("sandboxes"):
        out += [*bench_sandboxes.section(results["sandboxes"]), ""]
    if results.get("sandbox_api"):
        out += [*bench_sandbox_api.section(results["sandbox_api"]), ""]
    if results.get("slurm"):
        out += [*bench_slurm.section(results["slurm"]), ""]
    if results.get("sandboxes_slurm"):
        out += [*bench_sandboxes_slurm.section(results["sandboxes_slurm"]), ""]
    acc = results.get("accounting")
    if acc and "report" in acc:
        out += [
            "## Usage reports and exports (1,000,000 records)",
            "",
            "`bench_accounting.run()` on a fresh PostgreSQL database (docs/accounting.md). "
            "Reports read the daily roll-up, which the metering keeps in the same transaction "
            "as each record; exports stream the records themselves through a server-side "
            "cursor.",
            "",
            *_accounting_section(acc),
            "",
        ]
    con = results.get("console")
    if con:
        out += [
            "## The console with 100,000 tasks",
            "",
            "`bench_console.run()` (docs/console.md): pages rendered in-process by Django's test "
            "client as the user who sees most. *First* is the render after the cache is cleared "
            "(a dashboard's month of usage, week of waits and efficiency report are computed, "
            "then kept a minute); *median* is of the 5 renders after it.",
            "",
            "| database | page | first | median | queries | bytes |",
            "|---|---|---|---|---|---|",
        ]
        for database in ("sqlite", "postgresql"):
            for name, page in con.get(database, {}).get("pages", {}).items():
                out.append(
                    f"| {database} | {name} | {page['cold_ms']} ms | {page['median_ms']} ms | "
                    f"{page['queries']} | {_fmt(page['bytes'])} |"
                )
        out.append("")
    if results.get("simulator"):
        out += [*bench_simulator.section(results["simulator"]), ""]
    out += [
        "## Reading the numbers",
        "",
        "- Profile the API's own cost with `.venv/bin/python bench/bench_api.py --profile "
        "/tmp/api.prof` (cProfile of the in-process variant; prints the top costs).",
        "- `started` is when the process started; `shown_running` is when the portal first "
        "recorded it (a poll by the worker), so it includes the poll interval and any wait of "
        "the poll message in the worker's queue.",
        "- The worker's `dispatch` run time and the count of beat polls that expired unrun "
        "come from the worker's own log (`--loglevel=INFO`).",
        "",
    ]
    notes = ""
    if DOC.exists() and NOTES_MARKER in (old := DOC.read_text()):
        notes = old[old.index(NOTES_MARKER) + len(NOTES_MARKER) :].lstrip("\n")
    out += [NOTES_MARKER, "", notes]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(out).rstrip("\n") + "\n")
