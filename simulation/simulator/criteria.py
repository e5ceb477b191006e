"""The success criteria, measured on the validation day under each policy (docs/simulation.md).

Each criterion is measured the same way for every policy; pass/fail is Switchyard's value
against the target. Two targets name a "before". The GPU row's is the FIFO run (one queue
over the whole site) of the same day: over 60 % and above FIFO's. The flow-time row's is the
project's HPC run and training run one after the other, as a project ran them when the two
could not share the site: the same day under FIFO with the training submitted when the HPC
run ends (`serial_flow_time`); the row asks at least 30 % shorter. Each row says in one
sentence how it is measured and, where it fails, what in Switchyard's run caused it
(`simulation/simulator/diagnose.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduling.sites.default import default_site
from simulation.simulator import diagnose
from simulation.simulator.engine import simulate
from simulation.simulator.metrics import flow_time, summary
from simulation.simulator.model import AGENT_STARTUP_S, POLICIES, Run, SimJob, Site
from simulation.simulator.workloads import (
    BURST_AT,
    BUSY_NODES,
    DAY_HOURS,
    HOUR,
    site_model,
    validation_day,
)

BURST_TRAINING = diagnose.BURST_TRAINING
PAIR = diagnose.PAIR


@dataclass(frozen=True, slots=True)
class Criterion:
    name: str
    target: str
    unit: str
    measure: Callable[[Run, dict], float | None]
    passes: Callable[[float, float | None], bool]  # (switchyard, the before) → met?
    how: str  # how it is measured, one sentence
    why: Callable[[diagnose.Day], str]  # where it fails: what in Switchyard's run caused it
    # The before, where it is not FIFO's own value: measured from the day's jobs and site.
    before: Callable[[list[SimJob], Site], float | None] | None = None


def _waits(run: Run, kind: str, *, room_only: bool = False) -> list[float]:
    return [
        o.wait
        for o in run.outcomes.values()
        if o.type == kind and (not room_only or o.room_at_submit)
    ]


def _training_with_room(run: Run, s: dict) -> float | None:
    """The longest wait of a training its pool could have started on arrival; None (never
    ran: the row fails) if a training never ran at all."""
    if s["never_by_type"].get("ai-training"):
        return None
    return max(_waits(run, "ai-training", room_only=True), default=0.0)


def _hpc_preemptions(run: Run, s: dict) -> float:
    """HPC runs preempted within the day's window."""
    lo, hi = s["window_s"]
    return float(
        sum(
            1
            for x in run.spans
            if x.type == "hpc-simulation" and x.ended == "preempted" and lo <= x.end <= hi
        )
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def serial_flow_time(jobs: list[SimJob], site: Site, *, rounds: int = 5) -> float | None:
    """The pair's flow time run one after the other: the day under FIFO with the training
    submitted the moment the HPC run ends. The HPC run's end can move when the training
    leaves its place in the queue, so the training follows it until it stays put (at most
    `rounds` runs); None if either never ran."""
    hpc, training = PAIR
    at: float | None = None
    run = simulate(jobs, site, "fifo")
    for _ in range(rounds):
        outcome = run.outcomes.get(hpc)
        if outcome is None or outcome.end == at:
            break
        at = outcome.end
        moved = [replace(j, submit=at) if j.key == training else j for j in jobs]
        run = simulate(moved, site, "fifo")
    return flow_time(run, PAIR)


def _max_burst_training(run: Run, _: dict) -> float | None:
    waits = [run.outcomes[k].wait for k in BURST_TRAINING if k in run.outcomes]
    return max(waits) if len(waits) == len(BURST_TRAINING) else None


CRITERIA = (
    Criterion(
        "agent mean wait",
        "< 30 s",
        "s",
        lambda run, s: _mean(_waits(run, "agent")),
        lambda v, f: v < 30,
        "The mean, over every agent of the day, of submit to its process running, which "
        f"includes the local backend's measured start-up ({1000 * AGENT_STARTUP_S:.1f} ms).",
        diagnose.agents,
    ),
    Criterion(
        "training wait when its pool had room",
        "<= 5 min",
        "s",
        _training_with_room,
        lambda v, f: v <= 300,
        "The longest wait of any training whose pool (for FIFO and EASY: the site) could "
        "have started it when it arrived, whatever its quota said, with no job waiting "
        "there before it (room already owed to an earlier job is not room for it).",
        diagnose.training_with_room,
    ),
    Criterion(
        "launch-mix trainings: longest wait",
        "<= 15 min",
        "s",
        _max_burst_training,
        lambda v, f: v <= 900,
        "The longer wait of the launch mix's two 4-node trainings, which arrive at 10:00 just "
        f"after {BUSY_NODES} nodes' worth of trainings has filled the training pool (it frees "
        "within 20 minutes): how a policy hands out the room that frees.",
        diagnose.burst_training,
    ),
    Criterion(
        "HPC preemptions in the day",
        "0 (< 1 a day)",
        "",
        _hpc_preemptions,
        lambda v, f: v < 1,
        "HPC runs preempted between 08:00 and 18:00.",
        diagnose.hpc_preempted,
    ),
    Criterion(
        "site GPU utilisation, 08:00-18:00",
        "> 60 % and above FIFO's (the before)",
        "%",
        lambda run, s: 100 * (s["utilisation"]["site"]["gpu"] or 0.0),
        lambda v, f: v > 60 and f is not None and v > f,
        "Busy GPUs over all 200 of the site's from 08:00 to 18:00; the before is the FIFO "
        "run of the same day (one queue over the whole site), and EASY is shown beside it.",
        diagnose.gpu_idle,
    ),
    Criterion(
        "HPC + training flow time (one project)",
        ">= 30 % shorter than one after the other (the before)",
        "s",
        lambda run, s: flow_time(run, PAIR),
        lambda v, before: before is not None and v <= 0.7 * before,
        "From the first submit to the last end of the climate project's 256-core HPC run "
        "and 4-node training, both of the launch mix; the before is the same day under FIFO "
        "with the training submitted when the HPC run ended (the two one after the other).",
        diagnose.pair_flow,
        before=serial_flow_time,
    ),
)


def validation_day_report(
    seed: int = 1, site: Site | None = None, jobs: list[SimJob] | None = None, progress=None
) -> dict:
    """Run the validation day under every policy; the criteria (each with how it is measured,
    and why it fails where it does), each policy's summary, and the figures for charts."""
    site = site or site_model(default_site())
    jobs = jobs if jobs is not None else validation_day(seed)
    window = (0.0, DAY_HOURS * HOUR)
    runs, summaries = {}, {}
    for i, policy in enumerate(POLICIES):
        step = (lambda d, t, i=i: progress(i * t + d, len(POLICIES) * t)) if progress else None
        runs[policy] = simulate(jobs, site, policy, progress=step, record_room=True)
        summaries[policy] = summary(runs[policy], site.pools, window=window)
    day = diagnose.Day(site, {j.key: j for j in jobs}, runs, window)
    rows = []
    for c in CRITERIA:
        values = {p: c.measure(runs[p], summaries[p]) for p in POLICIES}
        mine = values["switchyard"]
        before = c.before(jobs, site) if c.before else values["fifo"]
        passed = mine is not None and c.passes(mine, before)
        target = c.target
        if c.before:
            target += f": {format_value(before, c.unit)}"
        rows.append(
            {
                "criterion": c.name,
                "target": target,
                "unit": c.unit,
                "values": values,
                "before": before,  # what `passes` compared with: FIFO's value, or measured
                "passed": passed,
                "how": c.how,
                "why": "" if passed else c.why(day),
            }
        )
    return {
        "workload": "validation-day",
        "seed": seed,
        "jobs": len(jobs),
        "burst_at_s": BURST_AT,
        "criteria": rows,
        "summaries": summaries,
    }


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "never ran"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "s":
        if 0 < value < 1:
            return f"{value:.2f} s"
        return f"{value:,.0f} s" if value < 600 else f"{value / 60:,.1f} min"
    return f"{value:g}"


def format_table(report: dict) -> str:
    """The criteria as a Markdown table (what `manage.py simulate validation-day` prints), then
    how each row is measured and, for a FAIL, its cause."""
    head = "| criterion | target | Switchyard | FIFO | EASY | met |\n|---|---|---|---|---|---|"
    lines = [head]
    notes = []
    for row in report["criteria"]:
        v, unit = row["values"], row["unit"]
        lines.append(
            f"| {row['criterion']} | {row['target']} | {format_value(v['switchyard'], unit)} | "
            f"{format_value(v['fifo'], unit)} | {format_value(v['easy'], unit)} | "
            f"{'pass' if row['passed'] else 'FAIL'} |"
        )
        note = f"- {row['criterion']}: {row.get('how', '')}"
        if not row["passed"] and row.get("why"):
            note += f" FAIL: {row['why']}"
        notes.append(note)
    return "\n".join(lines + [""] + notes)
