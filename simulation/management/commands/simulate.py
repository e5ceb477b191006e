"""`manage.py simulate`: what-if runs of the site's policy beside FIFO and EASY backfill.

    manage.py simulate validation-day [--seed N]       the validation day's criteria, pass/fail per row
    manage.py simulate launch-mix [--seed N]           the launch mix alone, on the idle site
    manage.py simulate swf FILE [--limit N] [--repeat K] [--load 0.7]
    manage.py simulate alibaba PODS.csv NODES.csv [--limit N] [--compress K] [--node-share F]
    manage.py simulate history [--days 7]              the portal's own tasks, replayed
    manage.py simulate report [--seeds 1-5] [--write docs/simulation.md]   every acceptance figure

Each prints a table (Markdown) and, with `--json FILE` (`-` for stdout), the full result.
docs/simulation.md.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from simulation.replay import history_workload
from simulation.simulator import report
from simulation.simulator.criteria import format_table
from simulation.simulator.model import POLICIES
from simulation.simulator.runner import (
    WORKLOADS,
    WorkloadError,
    compare,
    format_summary,
    run_named,
)
from simulation.simulator.traces import TraceError


def _dump(result: dict, where: str) -> None:
    text = json.dumps(result, indent=1, sort_keys=True, default=str)
    if where == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(where, "w") as f:
            f.write(text + "\n")


class Command(BaseCommand):
    help = "Replay a workload in virtual time under the site's policy, FIFO and EASY backfill."

    def add_arguments(self, parser):
        parser.add_argument("workload", choices=(*WORKLOADS, "report"))
        parser.add_argument("files", nargs="*", help="swf: FILE; alibaba: PODS.csv NODES.csv")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--policies",
            default=",".join(POLICIES),
            help="comma-separated, of: " + ", ".join(POLICIES),
        )
        parser.add_argument("--limit", type=int, help="read at most this many jobs")
        parser.add_argument("--repeat", type=int, default=1, help="swf: replay it K times")
        parser.add_argument("--days", type=float, default=7, help="history: how far back")
        parser.add_argument(
            "--compress",
            type=float,
            default=1.0,
            help="alibaba: arrivals this many times closer together",
        )
        parser.add_argument(
            "--node-share",
            type=float,
            default=1.0,
            help="alibaba: run on this share of the cluster's nodes",
        )
        parser.add_argument(
            "--load",
            type=float,
            help="swf: stretch or compress arrivals to this offered load (0.7: 70 %% of the cores)",
        )
        parser.add_argument("--json", metavar="FILE", help="write the full result (- = stdout)")
        parser.add_argument(
            "--seeds", default="1-5", help="report: validation-day seeds, 1-5 or 1,2"
        )
        parser.add_argument(
            "--traces",
            help="report: the folder of lublin_256.swf and the openb CSVs (../shared/traces)",
        )
        parser.add_argument("--jobs", type=int, default=2, help="report: processes side by side")
        parser.add_argument(
            "--write", metavar="FILE", help="report: put the table between its markers in FILE"
        )

    def handle(self, *args, workload: str, files: list[str], **opts):
        if workload == "report":
            self._report(files, opts)
            return
        policies = [p.strip() for p in opts["policies"].split(",") if p.strip()]
        want = {"swf": 1, "alibaba": 2}.get(workload, 0)
        if len(files) != want:
            raise CommandError(f"files: {workload} takes {want} file(s), got {len(files)}")
        started = time.perf_counter()
        try:
            if workload == "history":
                jobs, site, left_out = history_workload(opts["days"])
                result = compare(jobs, site, policies, progress=self._progress)
                result.update(workload="history", days=opts["days"], left_out=left_out)
            else:
                result = run_named(
                    workload,
                    seed=opts["seed"],
                    policies=policies,
                    swf=files[0] if workload == "swf" else None,
                    pods=files[0] if workload == "alibaba" else None,
                    nodes=files[1] if workload == "alibaba" else None,
                    limit=opts["limit"],
                    repeat=opts["repeat"],
                    compress=opts["compress"],
                    node_share=opts["node_share"],
                    load=opts["load"],
                    progress=self._progress,
                )
        except (WorkloadError, TraceError, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write("")
        seconds = time.perf_counter() - started
        if workload == "validation-day":
            self.stdout.write(f"validation day, seed {result['seed']}, {result['jobs']} jobs\n")
            self.stdout.write(format_table(result))
        else:
            load = ""
            if "load" in result:
                load = f", offered load {result['load']:.2f}"
                load += f" (the trace's: {result['native_load']:.2f})"
            self.stdout.write(f"{workload}: {result['jobs']:,} jobs{load}\n")
            self.stdout.write(format_summary(result))
            if result.get("left_out"):
                self.stdout.write(f"\nleft out: {result['left_out']}")
        self.stdout.write(f"\n({seconds:.1f} s)")
        if opts["json"]:
            _dump(result, opts["json"])

    def _report(self, files: list[str], opts: dict) -> None:
        """Every acceptance figure in one table; with --write, into the file between markers."""
        if files:
            raise CommandError(f"files: report takes 0 file(s), got {len(files)}")
        if opts["jobs"] < 1:
            raise CommandError(f"jobs: expected at least 1 process, got {opts['jobs']}")
        traces = Path(opts["traces"] or settings.BASE_DIR.parent / "shared" / "traces")
        try:
            seeds = report.parse_seeds(opts["seeds"])
            target = Path(opts["write"]) if opts["write"] else None
            if target is not None:
                report.split_at_markers(target)  # before minutes of simulation, not after
            result = report.run_report(
                seeds, traces, jobs=opts["jobs"], say=lambda line: self.stderr.write(line)
            )
            table = report.format_report(result)
            if target is not None:
                report.write_between_markers(target, table)
        except report.ReportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(table)
        if target is not None:
            self.stdout.write(f"\nwritten into {target}")
        if opts["json"]:
            _dump(result, opts["json"])

    def _progress(self, done: int, total: int) -> None:
        if sys.stderr.isatty():
            self.stderr.write(f"\r{100 * done // max(total, 1):3d} %", ending="")
