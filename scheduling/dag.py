"""The picture on the workflow page: a DAG laid out left to right, for an inline SVG.

Presentation only: no queries (the caller prefetches `depends_on`), no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from scheduling.engine.settle import verdict
from scheduling.models import Task

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


@dataclass(frozen=True, slots=True)
class DagPicture:
    width: int
    height: int
    boxes: list[DagBox]
    edges: list[DagEdge]
    box_w: int = BOX_W
    box_h: int = BOX_H


def dag_picture(tasks: list[Task]) -> DagPicture:
    """Lay a workflow's DAG out left to right for an inline SVG.

    Layers by longest path from the roots (a task sits one column right of its furthest
    dependency); inside a layer, tasks are ordered by the mean row of their dependencies,
    which keeps most edges straight. `tasks` must have `depends_on` prefetched; ids of
    tasks outside the workflow are left out (the table lists them). No queries, no I/O.
    """
    by_id = {task.pk: task for task in tasks}
    deps = {task.pk: [d.pk for d in task.depends_on.all() if d.pk in by_id] for task in tasks}
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
    for task_id, dep_ids in deps.items():
        for dep_id in dep_ids:
            a, b = boxes[dep_id], boxes[task_id]
            x1, y1 = a.x + BOX_W, a.y + BOX_H // 2
            x2, y2 = b.x - 3, b.y + BOX_H // 2  # stop short: the arrow head ends at the box
            bend = max(GAP_X // 2, (x2 - x1) // 3)
            state = verdict(by_id[dep_id])
            edges.append(
                DagEdge(
                    path=f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}",
                    kind="open" if state is None else "done" if state else "blocked",
                )
            )
    width = PAD * 2 + len(columns) * BOX_W + max(len(columns) - 1, 0) * GAP_X
    height = PAD * 2 + tallest * BOX_H + max(tallest - 1, 0) * GAP_Y
    return DagPicture(width=width, height=height, boxes=[boxes[t.pk] for t in tasks], edges=edges)


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
