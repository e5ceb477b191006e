"""Run every benchmark, print each one's JSON line, and rewrite docs/benchmarks.md.

Run: `make bench` (that is, `.venv/bin/python bench/run_all.py`). Takes about 4 minutes on
the 2-core machine it was written on. Exits non-zero if any bench failed; the doc then says
which one and why, beside the numbers of the others.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench import (  # noqa: E402
    bench_accounting,
    bench_api,
    bench_capacity,
    bench_charts,
    bench_console,
    bench_decisions,
    bench_images,
    bench_latency,
    bench_metrics,
    bench_policy,
    bench_poll,
    bench_sandbox_api,
    bench_sandboxes,
    bench_sandboxes_slurm,
    bench_simulator,
    bench_slurm,
)
from bench.benchmarks_doc import DECISIONS_TARGET, DOC, write_doc  # noqa: E402

DECISION_RUNS = 5


def decisions() -> dict[str, Any]:
    """bench_decisions.run(), once per repeat, and the median of the repeats."""
    runs = [bench_decisions.run(repeats=1) for _ in range(DECISION_RUNS)]
    rates = [r["decisions_per_s"] for r in runs]
    return {
        "bench": "decisions",
        "decisions_per_s": round(c.median(rates)),
        "runs_decisions_per_s": rates,
        "n_per_run": runs[0]["n"],
        "target_decisions_per_s": DECISIONS_TARGET,
    }


BENCHES: list[tuple[str, Callable[[], dict[str, Any]], str]] = [
    ("decisions", decisions, ".venv/bin/python bench/bench_decisions.py"),
    ("policy", bench_policy.run, bench_policy.COMMAND),
    ("preempt", bench_capacity.run, bench_capacity.COMMAND),
    ("api", lambda: bench_api.run(repeats=3), bench_api.COMMAND),
    ("metrics", lambda: bench_metrics.run(repeats=3), bench_metrics.COMMAND),
    ("latency", bench_latency.run, bench_latency.COMMAND),
    ("images", bench_images.run, bench_images.COMMAND),
    ("poll", bench_poll.run, bench_poll.COMMAND),
    ("sandboxes", bench_sandboxes.run, bench_sandboxes.COMMAND),
    ("sandbox_api", bench_sandbox_api.run, bench_sandbox_api.COMMAND),
    ("slurm", bench_slurm.run, bench_slurm.COMMAND),
    ("sandboxes_slurm", bench_sandboxes_slurm.run, bench_sandboxes_slurm.COMMAND),
    ("accounting", bench_accounting.run, bench_accounting.COMMAND),
    ("console", bench_console.run, bench_console.COMMAND),
    ("simulator", bench_simulator.run, bench_simulator.COMMAND),
    ("charts", bench_charts.run, bench_charts.COMMAND),
]


def main() -> int:
    start = time.monotonic()
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": c.machine_info(),
        "load_before": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    results: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for name, bench, _ in BENCHES:
        print(f"-- {name} …", file=sys.stderr, flush=True)
        t = time.monotonic()
        try:
            results[name] = bench()
            print(json.dumps(results[name]), flush=True)
        except Exception:  # noqa: BLE001 - recorded in the doc, and the exit status
            failures[name] = traceback.format_exc()
            print(f"{name} FAILED:\n{failures[name]}", file=sys.stderr, flush=True)
        print(f"-- {name}: {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
    info["seconds"] = time.monotonic() - start
    info["load_after"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    write_doc(results, failures, info, [(name, command) for name, _, command in BENCHES])
    print(f"wrote {DOC.relative_to(c.ROOT)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
