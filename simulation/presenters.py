"""What a what-if run's page shows: the validation day's criteria, the policies side by side, and the charts.

The charts are plain plotly figure JSON, drawn in the browser as the dashboards' are
(accounting/charts.py, static/switchyard-charts.js). Pure: a run's stored result in, rows and
figures out, so a result kept from an older run still reads.
"""

from __future__ import annotations

from typing import Any

from portal.charts import figure_json
from simulation.simulator.criteria import format_value
from simulation.simulator.model import POLICIES

NAMES = {"switchyard": "Switchyard", "fifo": "FIFO", "easy": "EASY"}
CRITERIA_ORDER = (
    "switchyard",
    "fifo",
    "easy",
)  # the table's columns, as `simulate validation-day` prints


def summaries(result: dict | None) -> dict[str, dict]:
    """Each policy's summary, in the simulator's policy order: the validation day's report keeps them under
    `summaries`, the other workloads under `policies`."""
    found = (result or {}).get("summaries") or (result or {}).get("policies") or {}
    return {p: found[p] for p in sorted(found, key=_policy_order)}


def criteria_rows(result: dict | None) -> list[dict[str, Any]]:
    """The validation day's criteria: criterion, target, Switchyard, FIFO, EASY, met; how each is
    measured and, for a FAIL, its cause (empty in results kept from before they were stored)."""
    rows = []
    for row in (result or {}).get("criteria", []):
        values = row["values"]
        rows.append(
            {
                "criterion": row["criterion"],
                "target": row["target"],
                "values": [format_value(values.get(p), row["unit"]) for p in CRITERIA_ORDER],
                "passed": row["passed"],
                "how": row.get("how", ""),
                "why": "" if row["passed"] else row.get("why", ""),
            }
        )
    return rows


def policy_rows(result: dict | None) -> list[dict[str, Any]]:
    """The policies side by side: jobs, waits, slowdown, makespan, utilisation, preemptions."""
    rows = []
    for policy, s in summaries(result).items():
        site = s.get("utilisation", {}).get("site", {})
        types = list(s.get("types", {}).values())
        rows.append(
            {
                "policy": NAMES.get(policy, policy),
                "jobs": s.get("jobs", 0),
                "mean_wait": _duration(mean_wait(s)),
                "p95_wait": _duration(max((t["p95_wait_s"] for t in types), default=None)),
                "longest_wait": _duration(max((t["max_wait_s"] for t in types), default=None)),
                "bsld": "-" if s.get("mean_bsld") is None else f"{s['mean_bsld']:,.2f}",
                "makespan": f"{s.get('makespan_s', 0) / 3600:,.1f} h",
                "cpu": _percent(site.get("cpu")),
                "gpu": _percent(site.get("gpu")),
                "preempted": sum(t.get("preempted", 0) for t in types),
                "never": s.get("never", 0),
            }
        )
    return rows


def compare_rows(runs: list[tuple[str, dict | None]]) -> list[dict[str, Any]]:
    """Runs beside each other: `policy_rows` of each, grouped by policy, labelled by run."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for label, result in runs:
        for row in policy_rows(result):
            by_policy.setdefault(row["policy"], []).append({"run": label, **row})
    return [row for rows in by_policy.values() for row in rows]


def mean_wait(summary: dict) -> float | None:
    """The mean wait over every job: the types' means weighted by their counts."""
    types = summary.get("types", {}).values()
    n = sum(t["n"] for t in types)
    return sum(t["n"] * t["mean_wait_s"] for t in types) / n if n else None


def figures(result: dict | None) -> dict[str, str]:
    """Mean wait per task type per policy, site utilisation per policy, mean bounded slowdown
    per policy."""
    found = summaries(result)
    names = [NAMES.get(p, p) for p in found]
    kinds = sorted({kind for s in found.values() for kind in s.get("types", {})})
    waits = (
        [
            {
                "type": "bar",
                "name": NAMES.get(p, p),
                "x": kinds,
                "y": [_minutes(s["types"].get(k, {}).get("mean_wait_s")) for k in kinds],
            }
            for p, s in found.items()
        ]
        if kinds
        else []
    )
    site = [s.get("utilisation", {}).get("site", {}) for s in found.values()]
    utilisation = [
        {
            "type": "bar",
            "name": unit.upper(),
            "x": names,
            "y": [_hundred(u.get(unit)) for u in site],
        }
        for unit in ("cpu", "gpu")
        if any(u.get(unit) is not None for u in site)  # a trace's site may have no GPUs
    ]
    bsld = (
        [
            {
                "type": "bar",
                "name": "mean bounded slowdown",
                "x": names,
                "y": [s.get("mean_bsld") for s in found.values()],
            }
        ]
        if found
        else []
    )
    return {
        "waits": figure_json(
            waits, "mean wait per task type (minutes)", "no job ran", barmode="group"
        ),
        "utilisation": figure_json(
            utilisation,
            "site utilisation (%)",
            "no job ran",
            barmode="group",
            yaxis={"range": [0, 100]},
        ),
        "bsld": figure_json(bsld, "mean bounded slowdown", "no job ran"),
    }


def compare_figures(runs: list[tuple[str, dict | None]]) -> dict[str, str]:
    """Two (or more) runs beside each other, per policy: mean wait and bounded slowdown."""
    policies = sorted({p for _, r in runs for p in summaries(r)}, key=_policy_order)
    names = [NAMES.get(p, p) for p in policies]
    waits, bsld = [], []
    for label, result in runs:
        found = summaries(result)
        waits.append(
            {
                "type": "bar",
                "name": label,
                "x": names,
                "y": [_minutes(mean_wait(found[p])) if p in found else None for p in policies],
            }
        )
        bsld.append(
            {
                "type": "bar",
                "name": label,
                "x": names,
                "y": [found[p].get("mean_bsld") if p in found else None for p in policies],
            }
        )
    empty = "neither run has a result"
    return {
        "waits": figure_json(
            waits if policies else [], "mean wait, every job (minutes)", empty, barmode="group"
        ),
        "bsld": figure_json(
            bsld if policies else [], "mean bounded slowdown", empty, barmode="group"
        ),
    }


def _policy_order(policy: str) -> tuple[int, str]:
    return (POLICIES.index(policy) if policy in POLICIES else len(POLICIES), policy)


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_value(seconds, "s")


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f} %"


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60


def _hundred(share: float | None) -> float | None:
    return None if share is None else 100 * share
