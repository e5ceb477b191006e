"""Chart figures as plain plotly JSON, drawn in the browser by plotly.js
(static/switchyard-charts.js): the one layout every console chart shares, and a figure that
says so in words when it has nothing to draw. Used by the usage dashboards
(accounting/charts.py) and the simulation pages (simulation/presenters.py)."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

LAYOUT = {
    "margin": {"l": 50, "r": 10, "t": 40, "b": 40},
    "height": 320,
    "legend": {"orientation": "h", "y": -0.2},
    "font": {"family": "system-ui, sans-serif", "size": 12},
}


def figure_json(traces: list[dict], title: str, empty: str, **layout: Any) -> str:
    """`traces` under `title`; with none, `empty` written across the chart's middle."""
    figure: dict[str, Any] = {
        "data": traces,
        "layout": {**LAYOUT, "title": {"text": title}, **layout},
    }
    if not traces:
        figure["layout"].update(
            annotations=[
                {
                    "text": empty,
                    "showarrow": False,
                    "xref": "paper",
                    "yref": "paper",
                    "x": 0.5,
                    "y": 0.5,
                }
            ],
            xaxis={"visible": False},
            yaxis={"visible": False},
        )
    return json.dumps(figure, cls=DjangoJSONEncoder)
