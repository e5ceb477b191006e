"""Stage 2 for a workflow: `parse_workflow` (kind: Workflow), its size caps, each entry of
`tasks` as a task body, the DAG checks (duplicate names, unknown dependencies, cycles), and
`topological_order` for the service (see docs/workflows.md)."""

from __future__ import annotations

import difflib
import heapq
from typing import Any, TypeGuard

from scheduling.descriptor.errors import DescriptorError, FieldError, _document_error
from scheduling.descriptor.fields import _add, _check_header, _check_unknown, _required
from scheduling.descriptor.limits import (
    _HEADER_FIELDS,
    _MAX_DEPENDS,
    _MAX_HINTS,
    _MAX_NAME,
    _NAME_RE,
    _NAME_RULE,
    _SLUG_RE,
    _SLUG_RULE,
    _WORKFLOW_FIELDS,
    _WORKFLOW_TASK_FIELDS,
    MAX_WORKFLOW_EDGES,
    MAX_WORKFLOW_TASKS,
    WORKFLOW_KIND,
)
from scheduling.descriptor.task import _task_values
from scheduling.spec import TaskSpec, WorkflowSpec


def parse_workflow(data: dict) -> WorkflowSpec:
    """Validate a `kind: Workflow` mapping into a WorkflowSpec, or raise DescriptorError.

    Every error is collected: the workflow's own fields, each task's fields (as
    `tasks[2].resources.gpus`), then the DAG (duplicate names, unknown dependencies, cycles).
    The task and dependency counts are checked first, so an oversized workflow is refused
    without validating any of its tasks.
    """
    if not isinstance(data, dict):
        raise _document_error("the descriptor must be a mapping of fields", type(data).__name__)
    errors: list[FieldError] = []
    if not _check_header(data, errors, WORKFLOW_KIND):
        raise DescriptorError(errors)
    _check_unknown(data, _WORKFLOW_FIELDS, "", errors)
    name = _required(data.get("name"), "name", _NAME_RE, _MAX_NAME, _NAME_RULE, errors)
    project = _required(data.get("project"), "project", _SLUG_RE, _MAX_NAME, _SLUG_RULE, errors)
    entries = data.get("tasks")
    if not _check_sizes(entries, errors):
        raise DescriptorError(errors)

    tasks: list[TaskSpec | None] = []
    names: list[str | None] = []  # valid names, by index
    for index, entry in enumerate(entries):
        spec, task_name = _workflow_task(index, entry, data.get("project"), project, errors)
        tasks.append(spec)
        names.append(task_name)
    # depends_on names as read, even for tasks with other errors, so the DAG is still checked.
    _check_dag(entries, tasks, names, errors)

    if errors:
        raise DescriptorError(errors)
    return WorkflowSpec(name=name, project=project, tasks=tuple(t for t in tasks if t is not None))


def _check_sizes(entries: Any, errors: list[FieldError]) -> TypeGuard[list[Any]]:
    """False when `tasks` cannot be checked task by task (missing, not a list, too big)."""
    limit = MAX_WORKFLOW_TASKS
    if entries is None:
        _add(errors, "tasks", f"is required: a list of 1 to {limit} tasks")
        return False
    if not isinstance(entries, list):
        _add(errors, "tasks", f"must be a list of 1 to {limit} tasks", entries)
        return False
    if not entries:
        _add(errors, "tasks", "must have at least one task", entries)
        return False
    if len(entries) > limit:
        _add(errors, "tasks", f"must have at most {limit} tasks, got {len(entries)}")
        return False
    edges = sum(
        len(deps)
        for entry in entries
        if isinstance(entry, dict) and isinstance(deps := entry.get("depends_on"), list)
    )
    if edges > MAX_WORKFLOW_EDGES:
        _add(
            errors,
            "tasks",
            f"must have at most {MAX_WORKFLOW_EDGES} depends_on entries in all, got {edges}",
        )
        return False
    return True


def _workflow_task(
    index: int,
    entry: Any,
    raw_project: Any,
    project: str | None,
    errors: list[FieldError],
) -> tuple[TaskSpec | None, str | None]:
    """One entry of `tasks`: its spec (None when wrong) and its name (None when invalid)."""
    prefix = f"tasks[{index}]"
    if not isinstance(entry, dict):
        _add(errors, prefix, "must be a mapping of task fields (name, command, ...)", entry)
        return None, None
    own: list[FieldError] = []
    body = entry
    if "apiVersion" in entry or "kind" in entry:
        for key in _HEADER_FIELDS:
            if key in entry:
                _add(own, key, "is set once on the workflow, not on each task", entry[key])
        body = {k: v for k, v in entry.items() if k not in _HEADER_FIELDS}
    _check_unknown(body, _WORKFLOW_TASK_FIELDS, "", own)
    task_project = entry.get("project")
    if task_project is not None and task_project != raw_project and project is not None:
        _add(
            own,
            "project",
            f'must be the workflow\'s project "{project}" or left out: '
            "every task of a workflow belongs to its project",
            task_project,
        )
    values = _task_values(body, own, in_workflow=True)
    for error in own:
        field = f"{prefix}.{error.field}" if error.field else prefix
        errors.append(FieldError(field, error.message, error.got))
    spec = None if own or project is None else TaskSpec(project=project, **values)
    return spec, values["name"]


def _check_dag(
    entries: list[Any],
    tasks: list[TaskSpec | None],
    names: list[str | None],
    errors: list[FieldError],
) -> None:
    """Duplicate names, unknown dependencies and cycles, each error naming the tasks."""
    first: dict[str, int] = {}  # name -> index of its first use
    for index, task_name in enumerate(names):
        if task_name is None:
            continue
        if task_name in first:
            _add(
                errors,
                f"tasks[{index}].name",
                f"duplicate task name '{task_name}': tasks[{first[task_name]}] already has it",
                task_name,
            )
        else:
            first[task_name] = index
    # Names that were given but are invalid already have an error; don't call them unknown.
    written = {
        entry["name"]
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    }
    successors: list[list[int]] = [[] for _ in names]  # edges dependency -> dependant
    hints: dict[str, str] = {}
    for index, entry in enumerate(entries):
        task_name = names[index]
        # Only a task whose name is valid and first used is a node of the graph.
        is_node = task_name is not None and first[task_name] == index
        for position, dep in _dependency_names(entry, tasks[index], task_name):
            target = first.get(dep)
            if target is None:
                if dep not in written:
                    _add(
                        errors,
                        f"tasks[{index}].depends_on[{position}]",
                        _unknown_message(task_name, dep, first, hints),
                        dep,
                    )
            elif is_node and target != index:
                successors[target].append(index)
    for cycle in _cycles(successors):
        _add(errors, "tasks", "cycle: " + _cycle_text([str(names[i]) for i in cycle]))


def _dependency_names(
    entry: Any, spec: TaskSpec | None, task_name: str | None
) -> list[tuple[int, str]]:
    """(position in depends_on, name) of each valid dependency name of one entry."""
    if spec is not None:
        if not spec.depends_on:
            return []
        wanted = set(spec.depends_on)
        return [(i, d) for i, d in enumerate(entry["depends_on"]) if type(d) is str and d in wanted]
    # The task has errors: reread its depends_on leniently (valid, distinct, not itself).
    deps = entry.get("depends_on") if isinstance(entry, dict) else None
    if not isinstance(deps, list) or len(deps) > _MAX_DEPENDS:
        return []
    found: list[tuple[int, str]] = []
    seen: set[str] = set()
    for position, dep in enumerate(deps):
        if (
            isinstance(dep, str)
            and dep not in seen
            and dep != task_name
            and len(dep) <= _MAX_NAME
            and _NAME_RE.fullmatch(dep)
        ):
            seen.add(dep)
            found.append((position, dep))
    return found


def _unknown_message(
    task_name: str | None, dep: str, known: dict[str, int], hints: dict[str, str]
) -> str:
    # difflib costs ~15 µs per known name: a hostile document of 20,000 unknown names against
    # 1000 tasks would take minutes, so only the first few distinct names get a suggestion.
    hint = hints.get(dep)
    if hint is None:
        hint = ""
        if len(hints) < _MAX_HINTS:
            close = difflib.get_close_matches(dep, known, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
        hints[dep] = hint
    who = f"task '{task_name}': " if task_name else ""
    return f"{who}no task named '{dep}' in this workflow{hint}"


def _cycle_text(cycle: list[str]) -> str:
    """`a → b → c → a`: each task waits for the one before it; long cycles are shortened."""
    shown = cycle if len(cycle) <= 12 else [*cycle[:10], "…", cycle[-1]]
    text = " → ".join([*shown, cycle[0]])
    if len(cycle) > 12:
        text += f" ({len(cycle)} tasks)"
    return text


def _cycles(successors: list[list[int]]) -> list[list[int]]:
    """One cycle per strongly connected component with more than one node, each as a list of
    node indices starting at the component's first node, in the order of the edges; the
    components in order of their first node. Iterative Tarjan, then one BFS per component:
    O(V + E), no recursion."""
    count = len(successors)
    order = [-1] * count  # discovery index
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in range(count):
        if order[root] != -1:
            continue
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, 0)]
        while work:
            node, edge = work[-1]
            if edge < len(successors[node]):
                work[-1] = (node, edge + 1)
                nxt = successors[node][edge]
                if order[nxt] == -1:
                    order[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt] and order[nxt] < low[node]:
                    low[node] = order[nxt]
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[node] < low[parent]:
                    low[parent] = low[node]
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    cycles = [_cycle_through(min(c), set(c), successors) for c in components]
    cycles.sort(key=lambda cycle: cycle[0])
    return cycles


def _cycle_through(start: int, members: set[int], successors: list[list[int]]) -> list[int]:
    """A shortest cycle through `start` inside its strongly connected component (BFS)."""
    parent = {start: start}
    queue = [start]
    for node in queue:  # the list grows while it is read: a FIFO without popping
        for nxt in successors[node]:
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if nxt in members and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError("a strongly connected component without a cycle")  # pragma: no cover


# DAG helpers for the service and the workflow page -----------------------------------------
def _graph(spec: WorkflowSpec) -> tuple[list[str], list[list[int]], list[int]]:
    """Names, successors (dependency -> dependants, in document order) and in-degrees."""
    names = [task.name for task in spec.tasks]
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise ValueError("the workflow has duplicate task names")
    successors: list[list[int]] = [[] for _ in names]
    indegree = [0] * len(names)
    for i, task in enumerate(spec.tasks):
        for dep in dict.fromkeys(task.depends_on):
            j = index.get(dep)
            if j is None or j == i:
                raise ValueError(f"task {task.name!r} depends on {dep!r}, which is not a sibling")
            successors[j].append(i)
            indegree[i] += 1
    return names, successors, indegree


def topological_order(spec: WorkflowSpec) -> list[str]:
    """Task names, every task after the tasks it depends on; ties in document order.

    Only names count: ids of existing tasks are outside the workflow. Raises ValueError for a
    spec that `parse_workflow` would refuse (cycle, unknown or duplicate names).
    """
    names, successors, indegree = _graph(spec)
    ready = [i for i, degree in enumerate(indegree) if degree == 0]  # sorted: a valid heap
    order: list[str] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(names[node])
        for nxt in successors[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(order) != len(names):
        raise ValueError("the workflow has a cycle")
    return order
