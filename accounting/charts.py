"""The usage page's charts as plotly figure JSON, built on the server and drawn by plotly.js
in the browser (the figure travels in a data attribute): usage over time, each project's
share, and each pool's utilisation; each says in words when it has nothing to draw."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from accounting.reports import period_label
from portal.charts import figure_json


def over_time(
    rows: list[dict[str, Any]], *, dimension: str | None, metric: str, unit: str, period: str
) -> str:
    """Stacked bars: one bar per period, named as people name it ("Dec 2026"), one colour per
    value of `dimension`."""
    series: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["metric"] != metric:
            continue
        name = str(row.get(dimension, "all")) if dimension else "all"
        series[name][row.get("period", "all")] = float(row["quantity"])
    periods = sorted({p for values in series.values() for p in values})
    labels = [period_label(p, period) if p != "all" else p for p in periods]
    traces = [
        {
            "type": "bar",
            "name": name,
            "x": labels,
            "y": [values.get(p, 0) for p in periods],
            "hovertemplate": f"%{{x}}: %{{y:,.3f}} {unit}<extra>{name}</extra>",
        }
        for name, values in sorted(series.items())
    ]
    return figure_json(
        traces,
        f"{unit} over time",
        f"no {unit} used in this period",
        barmode="stack",
        yaxis={"title": {"text": unit}},
        xaxis={"type": "category"},
    )


def share(rows: list[dict[str, Any]], *, by: str, value: str, title: str) -> str:
    """A pie of `value` (charge or quantity) by `by`."""
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        totals[str(row.get(by, ""))] += float(row[value])
    shown = {name: amount for name, amount in totals.items() if amount}
    traces = (
        [{"type": "pie", "hole": 0.4, "labels": list(shown), "values": list(shown.values())}]
        if shown
        else []
    )
    return figure_json(traces, title, "nothing charged in this period")


def utilisation(pools: list[dict[str, Any]]) -> str:
    """Per pool: the share of its cores and GPUs used over the period, in percent."""
    names = [p["pool"] for p in pools]
    cores = [float(p["cpu_percent"] or 0) for p in pools]
    gpus = [float(p["gpu_percent"] or 0) for p in pools]
    traces = (
        [
            {"type": "bar", "name": "cores", "x": names, "y": cores},
            {"type": "bar", "name": "GPUs", "x": names, "y": gpus},
        ]
        if any(cores) or any(gpus)
        else []
    )
    return figure_json(
        traces,
        "utilisation per pool (%)",
        "no work ran on the pools in this period",
        barmode="group",
        yaxis={"range": [0, 100]},
    )


# -- the dashboards (accounting/dashboards.py) ---------------------------------------------
# Written as plain figure JSON (what plotly.py's to_json writes), not through graph objects:
# the dashboards are redrawn every few seconds, and validating thousands of points through
# plotly.py's objects cost more than every query of the page together.


def waits(rows: list[dict[str, Any]], unit: tuple[str, int]) -> str:
    """Mean and 95th percentile wait per type, in `unit` (a name and its seconds), the one
    the table beside it uses."""
    name, seconds = unit
    kinds = [r["type"] for r in rows]
    traces = (
        [
            {
                "type": "bar",
                "name": "mean",
                "x": kinds,
                "y": [r["mean_s"] / seconds for r in rows],
            },
            {
                "type": "bar",
                "name": "95th percentile",
                "x": kinds,
                "y": [r["p95_s"] / seconds for r in rows],
            },
        ]
        if rows
        else []
    )
    return figure_json(
        traces, f"waits this week ({name})", "nothing started this week", barmode="group"
    )


def queue_depth(samples: list[tuple], names: dict[int, str]) -> str:
    """Waiting tasks per queue over the last day (from the load samples)."""
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for at, queue_id, waiting, _cpus, _gpus in samples:
        xs, ys = series[names.get(queue_id, str(queue_id))]
        xs.append(at)
        ys.append(waiting)
    traces = [
        {"type": "scatter", "mode": "lines", "name": name, "x": xs, "y": ys}
        for name, (xs, ys) in sorted(series.items())
    ]
    return figure_json(
        traces,
        "queue depth: waiting tasks, last 24 h",
        "no load samples yet: a worker takes one every minute",
    )


def utilisation_over_time(
    samples: list[tuple], pool_of: dict[int, int], pools: dict, capacity: dict
) -> str:
    """Busy cores (and GPUs) as a share of each pool's, over the last day."""
    busy: dict[tuple[int, str], dict] = defaultdict(lambda: defaultdict(int))
    for at, queue_id, _waiting, cpus, gpus in samples:
        pool = pool_of[queue_id]
        busy[(pool, "cores")][at] += cpus
        busy[(pool, "GPUs")][at] += gpus
    traces = []
    for (pool, unit), values in sorted(
        busy.items(), key=lambda kv: (pools[kv[0][0]].name, kv[0][1])
    ):
        total = capacity.get(pool, {}).get("cpus" if unit == "cores" else "gpus", 0)
        if not total:
            continue
        moments = sorted(values)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{pools[pool].name} {unit}",
                "x": moments,
                "y": [min(100.0, 100.0 * values[m] / total) for m in moments],
            }
        )
    return figure_json(
        traces,
        "utilisation per pool (%), last 24 h",
        "no load samples yet: a worker takes one every minute",
        yaxis={"range": [0, 100]},
    )


def reasons(breakdown: list[tuple[str, int]]) -> str:
    traces = (
        [
            {
                "type": "pie",
                "hole": 0.4,
                "labels": [r for r, _ in breakdown],
                "values": [n for _, n in breakdown],
            }
        ]
        if breakdown
        else []
    )
    return figure_json(traces, "why work waits, now", "nothing waits")


def preemptions(rows: list[tuple]) -> str:
    """Preempted attempts per day and type, the last 7 days."""
    series: dict[str, dict] = defaultdict(dict)
    for day, kind, n in rows:
        series[kind][str(day)] = n
    days = sorted({d for values in series.values() for d in values})
    traces = [
        {"type": "bar", "name": kind, "x": days, "y": [values.get(d, 0) for d in days]}
        for kind, values in sorted(series.items())
    ]
    return figure_json(
        traces, "preemptions per day, last 7 days", "no preemptions this week", barmode="stack"
    )


def leases(rows: list, now) -> str:
    """Each lease as a bar from its start to its end (or its reclaim)."""
    traces = []
    for lease in rows:
        end = lease.reclaimed_at or lease.ends_at
        label = f"#{lease.pk} {lease.pool.name} → {lease.queue.name}"
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "showlegend": False,
                "name": label,
                "y": [label],
                "x": [(end - lease.starts_at).total_seconds() * 1000],
                "base": [lease.starts_at.isoformat()],
            }
        )
    return figure_json(traces, "leases, last 7 days", "no leases this week", xaxis={"type": "date"})
