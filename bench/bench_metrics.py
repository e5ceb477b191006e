"""What the Prometheus metrics cost a submission: the API acceptance bench (bench_api.py) with
metrics on and off in the same run, the two interleaved on fresh portals (target: on within
5 % of off; docs/operations.md, "Metrics").

Run: `.venv/bin/python bench/bench_metrics.py [--repeats 5]`. Prints one JSON line; `run()`
returns the same dict for `bench/run_all.py`.

On: `SWITCHYARD_METRICS=1` and the web role's metrics folder as `manage.py serve web` gives it
(prometheus_client's multiprocess mode: every sample written to a memory-mapped file), and a
scraper reading `/metrics` every second during the HTTP runs (Prometheus's default is every
15 s), so a scrape's database reads are in the figure too. Off: `SWITCHYARD_METRICS=0`
(nothing recorded, no folder). Each repeat runs off then on (or on then off, alternately) on
fresh copies of one seeded site, so drift in the machine's load falls on both alike.

Judged by CPU time per accepted task (the in-process run's own, or every gunicorn process's
from its first answer to its last, scrapes included): on a shared machine the wall-clock rates
move by tens of percent with other jobs' load, the CPU a task costs much less. The rates are
reported too: each repeat's rate on / rate off, their median, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench import bench_api  # noqa: E402
from config.metrics import files  # noqa: E402

COMMAND = ".venv/bin/python bench/bench_metrics.py"
TARGET_RATIO = 0.95  # metrics on: at least 95 % of the rate with them off
VARIANTS = {
    "inprocess": {},
    "http-gunicorn-c8": {"clients": 8, "server": "gunicorn"},
}


def _environment(env: dict[str, str], var_dir: Path, on: bool) -> dict[str, str]:
    env = {**env, "SWITCHYARD_METRICS": "1" if on else "0"}
    env.pop(files.ENV, None)
    if on:  # as the launcher gives it (manage.py serve web, manage.py up)
        env[files.ENV] = str(files.fresh_role_dir(var_dir / "metrics", "web"))
        env["SWITCHYARD_METRICS_DIR"] = str(var_dir / "metrics")
    return env


class _Scraper:
    """GET /metrics every `every` seconds from the moment the server answers until stopped."""

    def __init__(self, every: float = 1.0) -> None:
        self.every, self.stop, self.scrapes = every, threading.Event(), 0
        self.thread: threading.Thread | None = None

    def start(self, port: int) -> None:
        self.thread = threading.Thread(target=self._run, args=(port,), daemon=True)
        self.thread.start()

    def _run(self, port: int) -> None:
        client = c.Client(port)
        try:
            while not self.stop.wait(self.every):
                try:
                    status, body = client.request("GET", "/metrics")
                except OSError:
                    return  # the run is over: the bench stopped the server
                assert status == 200, (status, body[:300])
                self.scrapes += 1
        finally:
            client.close()

    def finish(self) -> int:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        return self.scrapes


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children (gunicorn's master and workers)."""
    total, todo = 0.0, [pid]
    ticks = os.sysconf("SC_CLK_TCK")
    while todo:
        current = todo.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue  # ended meanwhile
        total += (int(stat[11]) + int(stat[12])) / ticks  # utime, stime
        todo += [int(child) for child in children]
    return total


class _ServerCpu:
    """The web server's CPU time from its first answer to its last (scrapes included)."""

    def __init__(self, scraper: _Scraper | None) -> None:
        self.scraper, self.start, self.seconds = scraper, 0.0, 0.0

    def ready(self, port: int, proc) -> None:
        self.start = _tree_cpu_seconds(proc.pid)
        if self.scraper is not None:
            self.scraper.start(port)

    def done(self, proc) -> None:
        self.seconds = _tree_cpu_seconds(proc.pid) - self.start


def _measure(sites: bench_api._Sites, name: str, on: bool, tag: str) -> dict[str, Any]:
    with sites.fresh(tag) as (env, var_dir):
        env = _environment(env, var_dir, on)
        scraper = _Scraper()
        if name == "inprocess":
            raw = bench_api._run_inprocess(env, var_dir)
            cpu = raw["cpu_seconds"]
        else:
            server = _ServerCpu(scraper if on else None)
            try:
                raw = bench_api._run_http(
                    env, var_dir, **VARIANTS[name], on_ready=server.ready, on_done=server.done
                )
            finally:
                scraper.finish()
            assert not on or scraper.scrapes > 0, "the scraper never read /metrics"
            cpu = server.seconds
        done = bench_api._finish(raw, env, var_dir)
        if on:
            written = list((var_dir / "metrics").rglob("*.db"))
            assert written, "metrics on wrote no samples: the bench measured nothing"
        done["scrapes"] = scraper.scrapes
        done["cpu_ms_per_task"] = cpu * 1000 / done["tasks"]
        return done


def run(repeats: int = 5) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with bench_api._Sites("sqlite") as sites:
        for name in VARIANTS:
            rates: dict[str, list[float]] = {"off": [], "on": []}
            p50: dict[str, list[float]] = {"off": [], "on": []}
            cpu: dict[str, list[float]] = {"off": [], "on": []}
            for i in range(repeats):
                order = ("off", "on") if i % 2 == 0 else ("on", "off")
                for state in order:
                    done = _measure(sites, name, state == "on", f"metrics-{name}-{state}-{i}")
                    rates[state].append(done["tasks_per_s"])
                    p50[state].append(done["latency"]["p50_ms"])
                    cpu[state].append(done["cpu_ms_per_task"])
            off, on = c.median(rates["off"]), c.median(rates["on"])
            # Each repeat's two runs are a minute apart at most: their ratio is what the
            # machine's other load disturbs least.
            pairs = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
            cpu_off, cpu_on = c.median(cpu["off"]), c.median(cpu["on"])
            results[name] = {
                "cpu_ms_per_task_off": round(cpu_off, 3),
                "cpu_ms_per_task_on": round(cpu_on, 3),
                "cpu_ratio_on_off": round(cpu_on / cpu_off, 3),
                "cpu_runs_off": [round(x, 3) for x in cpu["off"]],
                "cpu_runs_on": [round(x, 3) for x in cpu["on"]],
                "tasks_per_s_off": round(off),
                "tasks_per_s_on": round(on),
                "ratio_on_off": round(c.median(pairs), 3),
                "ratio_of_medians": round(on / off, 3),
                "pair_ratios": [round(p, 3) for p in pairs],
                "runs_off": [round(r) for r in rates["off"]],
                "runs_on": [round(r) for r in rates["on"]],
                "p50_ms_off": round(c.median(p50["off"]), 2),
                "p50_ms_on": round(c.median(p50["on"]), 2),
                # The CPU time a task costs the server: what another job's load on the
                # machine disturbs least (the rates above move by tens of percent with it).
                "met": cpu_off / cpu_on >= TARGET_RATIO,
            }
    return {
        "bench": "metrics",
        "n_tasks": bench_api.N_TASKS,
        "repeats": repeats,
        "target_ratio": TARGET_RATIO,
        "variants": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per state and variant")
    args = parser.parse_args()
    print(json.dumps(run(repeats=args.repeats)))


if __name__ == "__main__":
    main()


# -- the document (bench/benchmarks_doc.py) --------------------------------------------------


def summary_rows(r: dict[str, Any]) -> list[str]:
    return [
        f"| CPU per submission, metrics on / off, `{name}` ({v['cpu_ms_per_task_on']} vs "
        f"{v['cpu_ms_per_task_off']} ms) | {v['cpu_ratio_on_off']:.3f}× "
        f"| ≤ {1 / r['target_ratio']:.3f}× | {'yes' if v['met'] else '**no**'} |"
        for name, v in r["variants"].items()
    ]


def section(r: dict[str, Any]) -> list[str]:
    lines = [
        "## Metrics on vs off (API acceptance, same run)",
        "",
        f"`{COMMAND}`: the API acceptance bench ({r['n_tasks']:,} tasks a run) with "
        "`SWITCHYARD_METRICS=1` (prometheus-client's multiprocess files, as `manage.py serve "
        "web` sets them up, and `/metrics` scraped every second during the HTTP runs) and "
        f"`SWITCHYARD_METRICS=0`, {r['repeats']} runs of each, interleaved on fresh portals. "
        "Judged by the server's CPU time per task (scrapes included), which other jobs on the "
        "machine disturb far less than the rates.",
        "",
        "| variant | CPU ms/task off / on (runs) | CPU on / off | tasks/s off / on "
        "| rate on / off, each repeat's (median) | p50 off / on (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in r["variants"].items():
        lines.append(
            f"| `{name}` | {v['cpu_ms_per_task_off']} / {v['cpu_ms_per_task_on']} "
            f"({v['cpu_runs_off']} / {v['cpu_runs_on']}) | {v['cpu_ratio_on_off']:.3f} "
            f"| {v['tasks_per_s_off']} / {v['tasks_per_s_on']} "
            f"| {v['pair_ratios']} ({v['ratio_on_off']:.3f}) | {v['p50_ms_off']} / {v['p50_ms_on']} |"
        )
    return lines
