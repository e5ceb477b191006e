"""Named what-if runs: a workload on a site under several policies, side by side (no Django).

`manage.py simulate` and the console's simulation page both call `run_named`; a run of the
portal's own history builds its jobs and site in `simulation/replay.py` and calls
`compare`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from scheduling.sites.default import default_site
from simulation.simulator.criteria import validation_day_report
from simulation.simulator.engine import simulate
from simulation.simulator.metrics import bound, summary, with_prediction
from simulation.simulator.model import POLICIES, SimJob, Site
from simulation.simulator.traces import (
    SWF_CORES,
    alibaba_site,
    at_load,
    offered_load,
    read_alibaba,
    read_swf,
    swf_site,
)
from simulation.simulator.workloads import launch_mix, site_model

WORKLOADS = ("validation-day", "launch-mix", "swf", "alibaba", "history")
Progress = Callable[[int, int], None]


class WorkloadError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def compare(
    jobs: Sequence[SimJob],
    site: Site,
    policies: Sequence[str] = POLICIES,
    *,
    window: tuple[float, float] | None = None,
    progress: Progress | None = None,
) -> dict:
    """Each policy's summary of the same jobs on the same site, and the work's bound."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise WorkloadError("policies", f"expected some of {', '.join(POLICIES)}, got {unknown}")
    results = {}
    for i, policy in enumerate(policies):
        step = None
        if progress is not None:
            step = lambda d, t, i=i: progress(i * t + d, len(policies) * t)  # noqa: E731
        started = time.perf_counter()
        run = simulate(jobs, site, policy, progress=step)
        results[policy] = summary(run, site.pools, window=window)
        if run.predicted:  # how far off the plans' predicted runtimes were
            done = run.outcomes
            pairs = (
                (p, done[k].end - done[k].start) for k, p in run.predicted.items() if k in done
            )
            with_prediction(results[policy], pairs)
        results[policy]["seconds"] = round(time.perf_counter() - started, 3)
    return {"jobs": len(jobs), "bound": bound(jobs, site.pools), "policies": results}


def run_named(
    workload: str,
    *,
    seed: int = 1,
    policies: Sequence[str] = POLICIES,
    swf: str | None = None,
    pods: str | None = None,
    nodes: str | None = None,
    limit: int | None = None,
    repeat: int = 1,
    compress: float = 1.0,
    node_share: float = 1.0,
    load: float | None = None,
    progress: Progress | None = None,
) -> dict:
    """`validation-day` (the criteria table), `launch-mix`, `swf` (a file; `load`: its arrivals
    stretched to that offered load), `alibaba` (pods and nodes)."""
    if load is not None and workload != "swf":
        raise WorkloadError("load", f"expected it only with swf, got it with {workload}")
    if workload == "validation-day":
        return validation_day_report(seed, progress=progress)
    if workload == "launch-mix":
        result = compare(launch_mix(seed), site_model(default_site()), policies, progress=progress)
    elif workload == "swf":
        if not swf:
            raise WorkloadError("swf", "expected the path of a Standard Workload Format file")
        jobs = read_swf(swf, limit=limit, repeat=repeat)
        native = offered_load(jobs, SWF_CORES)
        if load is not None:
            jobs = at_load(jobs, SWF_CORES, load)
        result = compare(jobs, swf_site(), policies, progress=progress)
        result.update(native_load=native, load=offered_load(jobs, SWF_CORES))
    elif workload == "alibaba":
        if not (pods and nodes):
            raise WorkloadError("pods", "expected the pod list and the node list CSV files")
        if compress < 1:
            raise WorkloadError("compress", f"expected a factor of at least 1, got {compress}")
        jobs, left_out = read_alibaba(pods, limit=limit, compress=compress)
        site = alibaba_site(nodes, share=node_share)
        result = compare(jobs, site, policies, progress=progress)
        result.update(
            left_out=left_out,
            compress=compress,
            node_share=node_share,
            nodes=sum(len(n) for n in site.pools.values()),
        )
    else:
        raise WorkloadError(
            "workload", f"expected one of {', '.join(WORKLOADS[:-1])}, got {workload!r}"
        )
    result.update(workload=workload, seed=seed)
    return result


def format_summary(result: dict) -> str:
    """The policies side by side, as a Markdown table."""
    lines = [
        "| policy | jobs | mean wait | p95 wait | mean bounded slowdown | makespan | CPU | GPU | preempted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, s in result["policies"].items():
        waits = [(t["n"], t["mean_wait_s"], t["p95_wait_s"]) for t in s["types"].values()]
        n = sum(w[0] for w in waits)
        mean = sum(w[0] * w[1] for w in waits) / n if n else 0.0
        p95 = max((w[2] for w in waits), default=0.0)
        site = s["utilisation"]["site"]
        gpu = "-" if site["gpu"] is None else f"{100 * site['gpu']:.1f} %"
        preempted = sum(t["preempted"] for t in s["types"].values())
        bsld = "-" if s["mean_bsld"] is None else f"{s['mean_bsld']:.2f}"
        lines.append(
            f"| {policy} | {s['jobs']:,} | {mean:,.0f} s | {p95:,.0f} s | {bsld} | "
            f"{s['makespan_s'] / 3600:,.1f} h | {100 * site['cpu']:.1f} % | {gpu} | {preempted} |"
        )
    for policy, s in result["policies"].items():
        error = s.get("prediction")
        if error and error["count"]:
            lines.append(
                f"\n{policy}: {error['count']:,} jobs planned by a predicted runtime, off by "
                f"{error['mean_abs_error_s']:,.0f} s on average "
                f"({100 * error['mean_abs_relative_error']:.0f} % of the runtime); "
                f"{100 * error['share_under']:.0f} % ran longer than predicted"
            )
    return "\n".join(lines)
