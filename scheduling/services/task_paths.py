"""A task's paths checked against where its jobs work: its `workdir` and its trigger file,
made absolute (a relative one lies in its project's folder) and refused, naming the field,
when its jobs could not reach them (docs/storage.md, docs/workflows.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from portal.errors import ApplicationError
from scheduling.decisions.storage import (
    AreaView,
    in_project_folder,
    project_folder,
    workdir_problem,
)
from scheduling.spec import TaskSpec
from scheduling.triggers import trigger_allowed, trigger_path_problem


def task_paths(
    spec: TaskSpec, areas: Iterable[AreaView], *, pool: str, user: str, prefix: str = ""
) -> TaskSpec:
    """The spec with its paths absolute, or ApplicationError naming the first bad one
    (`prefix`: a workflow's task's fields are `tasks[2].…`)."""
    if not spec.workdir and not spec.trigger_file:
        return spec
    areas = list(areas)
    folder = project_folder(areas, pool=pool, project=spec.project)
    workdir = _absolute(spec.workdir, folder, f"{prefix}workdir")
    trigger = _absolute(spec.trigger_file, folder, f"{prefix}trigger.file")
    if trigger:
        allowed = trigger_allowed(areas, pool=pool, project=spec.project, user=user)
        problem = trigger_path_problem(trigger, allowed)
        if problem is not None:
            raise ApplicationError(problem, field=f"{prefix}trigger.file", got=trigger)
    if workdir:
        problem = workdir_problem(areas, workdir, pool=pool, project=spec.project, user=user)
        if problem is not None:
            raise ApplicationError(problem, field=f"{prefix}workdir", got=workdir)
    return dataclasses.replace(spec, workdir=workdir, trigger_file=trigger)


def _absolute(path: str | None, folder: str, field: str) -> str | None:
    if not path:
        return path
    absolute = in_project_folder(path, folder)
    if absolute is None:
        raise ApplicationError(
            "a relative path lies in the project's folder, and this queue's pool mounts no "
            "writable project storage area: give an absolute path",
            field=field,
            got=path,
        )
    return absolute
