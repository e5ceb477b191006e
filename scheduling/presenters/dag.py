"""The picture on the workflow page: a DAG laid out left to right, for an inline SVG.

Presentation only: no queries (the caller prefetches `depends_on`), no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape  # Django's adds a lazy-string wrapper per call

from django.utils.safestring import SafeString, mark_safe

from scheduling.models import Task
from scheduling.selectors.dependencies import verdict

BOX_W, BOX_H = 184, 58  # one task's box
GAP_X, GAP_Y = 64, 22  # between layers (columns), between boxes of a layer
PAD = 14


@dataclass(frozen=True, slots=True)
class DagBox:
    task: Task
    layer: int
    x: int
    y: int
    label: str  # the name, shortened to fit the box

    @property
    def cx(self) -> int:
        return self.x + BOX_W // 2


@dataclass(frozen=True, slots=True)
class DagEdge:
    path: str  # SVG path data, from the dependency's right side to the dependant's left
    kind: str  # done: the dependency lets it run; blocked: never will; open: not yet
    source: int = 0  # the dependency's task id (the live update recolours its edges)


@dataclass(frozen=True, slots=True)
class DagPicture:
    width: int
    height: int
    boxes: list[DagBox]
    edges: list[DagEdge]
    box_w: int = BOX_W
    box_h: int = BOX_H


def dag_picture(tasks: list[Task], depends_on: dict[int, list[int]] | None = None) -> DagPicture:
    """Lay a workflow's DAG out left to right for an inline SVG.

    Layers by longest path from the roots (a task sits one column right of its furthest
    dependency); inside a layer, tasks are ordered by the mean row of their dependencies,
    which keeps most edges straight. `depends_on` maps each task's id to its dependencies'
    ids; without it, `tasks` must have `depends_on` prefetched. Ids of tasks outside the
    workflow are left out (the table lists them). No queries, no I/O.
    """
    by_id = {task.pk: task for task in tasks}
    if depends_on is None:
        depends_on = {task.pk: [d.pk for d in task.depends_on.all()] for task in tasks}
    deps = {pk: [d for d in depends_on.get(pk, ()) if d in by_id] for pk in by_id}
    layer: dict[int, int] = {}
    # Ids follow the DAG (upstream tasks are stored first), but do not rely on it here.
    for task_id in _topological(deps):
        layer[task_id] = 1 + max((layer[d] for d in deps[task_id]), default=-1)
    columns: list[list[int]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for task_id in sorted(layer):
        columns[layer[task_id]].append(task_id)
    row: dict[int, float] = {}
    for column in columns:
        column.sort(key=lambda i: (_mean(row[d] for d in deps[i]), i))
        for position, task_id in enumerate(column):
            row[task_id] = position
    tallest = max((len(c) for c in columns), default=0)
    boxes: dict[int, DagBox] = {}
    for number, column in enumerate(columns):
        # Each column is centred on the tallest one.
        top = PAD + (tallest - len(column)) * (BOX_H + GAP_Y) // 2
        for position, task_id in enumerate(column):
            task = by_id[task_id]
            boxes[task_id] = DagBox(
                task=task,
                layer=number,
                x=PAD + number * (BOX_W + GAP_X),
                y=top + position * (BOX_H + GAP_Y),
                label=task.name if len(task.name) <= 22 else task.name[:21] + "…",
            )
    edges = []
    kinds: dict[int, str] = {}  # one verdict per dependency, however many edges leave it
    for task_id, dep_ids in deps.items():
        for dep_id in dep_ids:
            a, b = boxes[dep_id], boxes[task_id]
            x1, y1 = a.x + BOX_W, a.y + BOX_H // 2
            x2, y2 = b.x - 3, b.y + BOX_H // 2  # stop short: the arrow head ends at the box
            bend = max(GAP_X // 2, (x2 - x1) // 3)
            if dep_id not in kinds:
                kinds[dep_id] = edge_kind(by_id[dep_id])
            edges.append(
                DagEdge(
                    path=f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}",
                    kind=kinds[dep_id],
                    source=dep_id,
                )
            )
    width = PAD * 2 + len(columns) * BOX_W + max(len(columns) - 1, 0) * GAP_X
    height = PAD * 2 + tallest * BOX_H + max(tallest - 1, 0) * GAP_Y
    return DagPicture(width=width, height=height, boxes=[boxes[t.pk] for t in tasks], edges=edges)


def edge_kind(dep: Task) -> str:
    """How the edges leaving `dep` are drawn: done, blocked or open (see DagEdge)."""
    state = verdict(dep)
    return "open" if state is None else "done" if state else "blocked"


def edges_svg(edges: list[DagEdge]) -> SafeString:
    """The edges as SVG markup, built here: a 1,000-task workflow has ~20,000 of them, and
    a template loop over them was most of its page's time. Only numbers and fixed words go
    in, so nothing needs escaping; the arrow heads come from CSS (`marker-end`)."""
    return mark_safe(  # noqa: S308 - numbers and fixed words only (see above)
        "\n".join(
            f'<path class="dag-edge {e.kind}" data-from="{e.source}" d="{e.path}"/>' for e in edges
        )
    )


def boxes_svg(picture: DagPicture, task_url: str) -> SafeString:
    """The boxes as SVG markup (as `edges_svg`, for speed): each a link to its task's page
    (`task_url` with the id in place of 0), its state as a class, its name and reason
    escaped."""
    head, tail = task_url.split("/0/", 1)
    w, h = picture.box_w, picture.box_h
    out = []
    for box in picture.boxes:
        t, x, y = box.task, box.x, box.y
        why = f" — {t.reason}" if t.reason else ""
        more = f" · attempt {t.attempts}" if t.attempts > 1 else ""
        out.append(
            f'<a href="{head}/{t.pk}/{tail}" class="dag-node dag-{t.state}" id="dag-task-{t.pk}" '
            f'data-state="{t.state}" data-layer="{box.layer}">'
            f"<title>{escape(t.name)} (#{t.pk}): {t.state}{escape(why)}</title>"
            f'<rect class="box" x="{x}" y="{y}" width="{w}" height="{h}" rx="9"/>'
            f'<rect class="stripe" x="{x + 5}" y="{y + 9}" width="4" height="{h - 18}" rx="2"/>'
            f'<text class="name" x="{x + 16}" y="{y + 24}">{escape(box.label)}</text>'
            f'<text class="sub" x="{x + 16}" y="{y + 44}"><tspan class="st">{t.state}</tspan>'
            f"{more}</text></a>"
        )
    return mark_safe("\n".join(out))  # noqa: S308 - names and reasons escaped above


def _topological(deps: dict[int, list[int]]) -> list[int]:
    indegree = {task_id: len(d) for task_id, d in deps.items()}
    dependants: dict[int, list[int]] = {task_id: [] for task_id in deps}
    for task_id, dep_ids in deps.items():
        for dep_id in dep_ids:
            dependants[dep_id].append(task_id)
    ready = deque(sorted(i for i, n in indegree.items() if n == 0))
    order = []
    while ready:
        task_id = ready.popleft()
        order.append(task_id)
        for nxt in dependants[task_id]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return order


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
