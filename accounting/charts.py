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
