"""What a submitted task's job is given: its descriptor's `inputs` checked against the
folders its queue's pool mounts (docs/storage.md); its `workdir` and trigger are checked by
`task_paths`."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User

from portal.errors import ApplicationError, prefixed
from scheduling.decisions.storage import AreaView, input_mount, input_problem
from scheduling.selectors.storage import input_type
from scheduling.spec import TaskSpec


def check_task_inputs(
    spec: TaskSpec,
    areas: Iterable[AreaView],
    *,
    pool: str,
    user: User | None,
    field_prefix: str = "",
) -> None:
    """Refuse, naming the field, an input outside the folders the job mounts or (with the
    submitting `user`) one that is not there for the user's job account to read: a file or
    folder, reached without a link."""
    if not spec.inputs:
        return
    areas = list(areas)
    username = user.get_username() if user is not None else ""
    for index, path in enumerate(spec.inputs):
        field = prefixed(field_prefix, f"inputs[{index}]")
        problem = input_problem(areas, path, pool=pool, project=spec.project, user=username)
        if problem is not None:
            raise ApplicationError(problem, field=field, got=path)
        mount = input_mount(areas, path, pool=pool, project=spec.project, user=username)
        if user is None or mount is None:
            continue
        try:
            kind = input_type(user, mount[0], mount[1], path)
        except ApplicationError as exc:
            raise ApplicationError(
                f"must be a file or folder your jobs can read: {exc}",
                field=field,
                got=path,
                status=503 if exc.status == 503 else 400,  # no account to look as: not yours
            ) from None
        if kind not in ("file", "folder"):
            why = "a symbolic link: give the path it leads to" if kind == "link" else "neither"
            raise ApplicationError(f"must be a file or folder; it is {why}", field=field, got=path)
