"""The usage page's charts, built with plotly on the server and drawn by plotly.js in the
browser (the figure travels as JSON in a data attribute): usage over time, each project's
share, and each pool's utilisation."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import plotly.graph_objects as go

_LAYOUT = {
    "margin": {"l": 50, "r": 10, "t": 40, "b": 40},
    "height": 320,
    "legend": {"orientation": "h", "y": -0.2},
    "font": {"family": "system-ui, sans-serif", "size": 12},
}


def over_time(rows: list[dict[str, Any]], *, dimension: str | None, metric: str, unit: str) -> str:
    """Stacked bars: one bar per period, one colour per value of `dimension`."""
    series: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["metric"] != metric:
            continue
        name = str(row.get(dimension, "all")) if dimension else "all"
        series[name][row.get("period", "all")] = float(row["quantity"])
    periods = sorted({p for values in series.values() for p in values})
    fig = go.Figure(
        [
            go.Bar(name=name, x=periods, y=[values.get(p, 0) for p in periods])
            for name, values in sorted(series.items())
        ]  # fmt: skip
    )
    fig.update_layout(barmode="stack", title=f"{unit} over time", yaxis_title=unit, **_LAYOUT)
    return fig.to_json()


def share(rows: list[dict[str, Any]], *, by: str, value: str, title: str) -> str:
    """A pie of `value` (charge or quantity) by `by`."""
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        totals[str(row.get(by, ""))] += float(row[value])
    fig = go.Figure([go.Pie(labels=list(totals), values=list(totals.values()), hole=0.4)])
    fig.update_layout(title=title, **_LAYOUT)
    return fig.to_json()


def utilisation(pools: list[dict[str, Any]]) -> str:
    """Per pool: the share of its cores and GPUs used over the period, in percent."""
    names = [p["pool"] for p in pools]
    fig = go.Figure(
        [
            go.Bar(name="cores", x=names, y=[float(p["cpu_percent"] or 0) for p in pools]),
            go.Bar(name="GPUs", x=names, y=[float(p["gpu_percent"] or 0) for p in pools]),
        ]
    )
    fig.update_layout(barmode="group", title="utilisation per pool (%)", yaxis_range=[0, 100],
                      **_LAYOUT)  # fmt: skip
    return fig.to_json()


# -- the dashboards (accounting/dashboards.py) ---------------------------------------------


def _json(fig: go.Figure, empty: str) -> str:
    """The figure, or an empty one that says why there is nothing to draw."""
    if not fig.data:
        fig.add_annotation(text=empty, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    return fig.to_json()


def waits(rows: list[dict[str, Any]]) -> str:
    """Mean and 95th percentile wait per type, in minutes."""
    kinds = [r["type"] for r in rows]
    fig = go.Figure(
        [
            go.Bar(name="mean", x=kinds, y=[r["mean_s"] / 60 for r in rows]),
            go.Bar(name="95th percentile", x=kinds, y=[r["p95_s"] / 60 for r in rows]),
        ]
    )
    fig.update_layout(barmode="group", title="waits this week (minutes)", **_LAYOUT)
    return _json(fig if rows else go.Figure(layout=fig.layout), "nothing started this week")


def queue_depth(samples: list[tuple], names: dict[int, str]) -> str:
    """Waiting tasks per queue over the last day (from the load samples)."""
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for at, queue_id, waiting, _cpus, _gpus in samples:
        xs, ys = series[names.get(queue_id, str(queue_id))]
        xs.append(at)
        ys.append(waiting)
    fig = go.Figure(
        [
            go.Scatter(name=name, x=xs, y=ys, mode="lines")
            for name, (xs, ys) in sorted(series.items())
        ]
    )
    fig.update_layout(title="queue depth: waiting tasks, last 24 h", **_LAYOUT)
    return _json(fig, "no load samples yet: a worker takes one every minute")


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
            go.Scatter(
                name=f"{pools[pool].name} {unit}",
                x=moments,
                y=[min(100.0, 100.0 * values[m] / total) for m in moments],
                mode="lines",
            )
        )
    fig = go.Figure(traces)
    fig.update_layout(title="utilisation per pool (%), last 24 h", yaxis_range=[0, 100], **_LAYOUT)
    return _json(fig, "no load samples yet: a worker takes one every minute")


def reasons(breakdown: list[tuple[str, int]]) -> str:
    fig = go.Figure(
        [go.Pie(labels=[r for r, _ in breakdown], values=[n for _, n in breakdown], hole=0.4)]
    )
    fig.update_layout(title="why work waits, now", **_LAYOUT)
    return _json(fig if breakdown else go.Figure(layout=fig.layout), "nothing waits")


def preemptions(rows: list[tuple]) -> str:
    """Preempted attempts per day and type, the last 7 days."""
    series: dict[str, dict] = defaultdict(dict)
    for day, kind, n in rows:
        series[kind][str(day)] = n
    days = sorted({d for values in series.values() for d in values})
    fig = go.Figure(
        [
            go.Bar(name=kind, x=days, y=[values.get(d, 0) for d in days])
            for kind, values in sorted(series.items())
        ]
    )
    fig.update_layout(barmode="stack", title="preemptions per day, last 7 days", **_LAYOUT)
    return _json(fig, "no preemptions this week")


def leases(rows: list, now) -> str:
    """Each lease as a bar from its start to its end (or now, while it lasts)."""
    fig = go.Figure()
    for lease in rows:
        end = lease.reclaimed_at or lease.ends_at
        fig.add_trace(
            go.Bar(
                name=f"#{lease.pk} {lease.pool.name} → {lease.queue.name}",
                y=[f"#{lease.pk} {lease.pool.name} → {lease.queue.name}"],
                x=[(end - lease.starts_at).total_seconds() * 1000],
                base=[lease.starts_at.isoformat()],
                orientation="h",
                showlegend=False,
            )
        )
    fig.update_layout(title="leases, last 7 days", xaxis_type="date", **_LAYOUT)
    return _json(fig, "no leases this week")
