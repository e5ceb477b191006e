"""Stage 2 for one task: `parse_task` (kind: Task) and the task body shared with the entries
of a workflow (resources, command or script, image, env, depends_on, trigger, ...)."""

from __future__ import annotations

import posixpath
from typing import Any

from scheduling.descriptor.errors import DescriptorError, FieldError, _document_error
from scheduling.descriptor.fields import (
    _add,
    _check_header,
    _check_unknown,
    _optional_choice,
    _optional_duration,
    _optional_int,
    _optional_match,
    _path,
    _required,
    parse_size,
)
from scheduling.descriptor.limits import (
    _ENV_NAME_RE,
    _GPU_TYPE_RE,
    _IMAGE_RE,
    _MAX_ARG_CHARS,
    _MAX_COMMAND_ARGS,
    _MAX_CPUS,
    _MAX_DEPENDS,
    _MAX_ENV,
    _MAX_ENV_NAME,
    _MAX_ENV_VALUE,
    _MAX_GPUS,
    _MAX_IMAGE,
    _MAX_INPUTS,
    _MAX_NAME,
    _MAX_NODES,
    _MAX_PATH,
    _MAX_RETRIES,
    _MAX_SCRIPT_BYTES,
    _MAX_TASK_ID,
    _NAME_RE,
    _NAME_RULE,
    _RESOURCE_FIELDS,
    _SLUG_RE,
    _SLUG_RULE,
    _TOP_FIELDS,
    _TRIGGER_FIELDS,
    ENV_NAME_PATTERN,
    KIND,
    SECRET_MASK,
    env_reserved,
)
from scheduling.spec import FAIL_ACTIONS, NOTIFY, PRIORITIES, TASK_TYPES, Resources, TaskSpec


def parse_task(data: dict) -> TaskSpec:
    """Validate a descriptor's mapping into a TaskSpec, or raise DescriptorError with all errors.

    An optional field given as null counts as not given (forms and YAML's `key:` send that).
    A single task's `depends_on` takes task ids only: it has no siblings to name.
    """
    if not isinstance(data, dict):
        raise _document_error("the descriptor must be a mapping of fields", type(data).__name__)
    errors: list[FieldError] = []
    if not _check_header(data, errors, KIND):
        # Another kind has other fields: checking them as a Task would only add noise.
        raise DescriptorError(errors)
    _check_unknown(data, _TOP_FIELDS, "", errors)
    values = _task_values(data, errors, in_workflow=False)
    if errors:
        raise DescriptorError(errors)
    return TaskSpec(**values)


def _task_values(data: dict, errors: list[FieldError], *, in_workflow: bool) -> dict[str, Any]:
    """TaskSpec's fields from a task body; `errors` gets what is wrong. In a workflow the
    project is the workflow's and is not among them (the caller checks and sets it).

    `name` and `depends_on` hold what could be read even when other fields are wrong, so a
    workflow can still check its DAG.
    """
    get = data.get
    name = _required(get("name"), "name", _NAME_RE, _MAX_NAME, _NAME_RULE, errors)
    values: dict[str, Any] = {"name": name}
    if not in_workflow:
        values["project"] = _required(
            get("project"), "project", _SLUG_RE, _MAX_NAME, _SLUG_RULE, errors
        )
    task_type = _optional_choice(get("type"), "type", TASK_TYPES, None, errors)
    queue = _optional_match(get("queue"), "queue", _SLUG_RE, _MAX_NAME, _SLUG_RULE, errors)
    resources = _resources(get("resources"), errors)
    walltime = _optional_duration(get("walltime"), "walltime", errors)
    estimate = _optional_duration(get("estimate"), "estimate", errors)
    wait_timeout = _optional_duration(get("wait_timeout"), "wait_timeout", errors)
    if walltime is not None and estimate is not None and estimate > walltime:
        _add(
            errors,
            "estimate",
            f"must not be longer than walltime ({get('walltime')})",
            get("estimate"),
        )
    command, script = _program(get("command"), get("script"), errors, image=get("image"))
    image = _optional_match(
        get("image"),
        "image",
        _IMAGE_RE,
        _MAX_IMAGE,
        "must be a container image NAME[:TAG][@sha256:DIGEST] such as "
        "registry.example.org/hpc/gromacs:2024.1 (letters, digits and . _ : / @ -)",
        errors,
    )
    env = _env(get("env"), errors)
    secret_env = _env(get("secret_env"), errors, field="secret_env", secret=True)
    for name in sorted({n for n, _ in env} & {n for n, _ in secret_env}):
        _add(errors, f"secret_env.{name}", "is also in env: a name goes in one of them", name)
    depends_on, depends_on_ids = _depends_on(
        get("depends_on"), name, errors, names_allowed=in_workflow
    )
    retry_count = _optional_int(get("retry_count"), "retry_count", 0, _MAX_RETRIES, 0, errors)
    fail_action = _optional_choice(get("fail_action"), "fail_action", FAIL_ACTIONS, "abort", errors)
    trigger_file = _trigger(get("trigger"), errors)
    if wait_timeout is not None and get("depends_on") is None and get("trigger") is None:
        _add(
            errors,
            "wait_timeout",
            "limits a wait for depends_on or a trigger; this task has neither",
            get("wait_timeout"),
        )
    workdir = _file_path(get("workdir"), "workdir", errors)
    inputs = _inputs(get("inputs"), errors)
    priority = _optional_choice(get("priority"), "priority", PRIORITIES, "normal", errors)
    notify = _optional_choice(get("notify"), "notify", NOTIFY, None, errors)
    sandboxes = get("sandboxes")
    if sandboxes is not None and not isinstance(sandboxes, bool):
        _add(errors, "sandboxes", "must be true or false", sandboxes)
    return {
        **values,
        "resources": resources,
        "type": task_type,
        "queue": queue,
        "walltime_s": walltime,
        "estimate_s": estimate,
        "command": command,
        "script": script,
        "image": image,
        "env": env,
        "secret_env": secret_env,
        "depends_on": depends_on,
        "depends_on_ids": depends_on_ids,
        "retry_count": retry_count,
        "fail_action": fail_action,
        "wait_timeout_s": wait_timeout,
        "trigger_file": trigger_file,
        "workdir": workdir,
        "inputs": inputs,
        "priority": priority,
        "notify": notify,
        "sandboxes": sandboxes is True,
    }


# resources ----------------------------------------------------------------------------------
def _resources(value: Any, errors: list[FieldError]) -> Resources | None:
    if value is None:
        return Resources()
    if not isinstance(value, dict):
        _add(
            errors, "resources", f"must be a mapping with keys {', '.join(_RESOURCE_FIELDS)}", value
        )
        return None
    before = len(errors)
    _check_unknown(value, _RESOURCE_FIELDS, "resources.", errors)
    get = value.get
    cpus = _optional_int(get("cpus"), "resources.cpus", 1, _MAX_CPUS, 1, errors)
    gpus = _optional_int(get("gpus"), "resources.gpus", 0, _MAX_GPUS, 0, errors)
    nodes = _optional_int(get("nodes"), "resources.nodes", 1, _MAX_NODES, None, errors)
    memory = 1024
    if get("memory") is not None:
        try:
            memory = parse_size(get("memory"))
        except ValueError as exc:
            _add(errors, "resources.memory", str(exc), get("memory"))
    gpu_type = _optional_match(
        get("gpu_type"),
        "resources.gpu_type",
        _GPU_TYPE_RE,
        _MAX_NAME,
        "must be a GPU model name of letters, digits and . _ - (e.g. a100, h100-80gb)",
        errors,
    )
    if nodes is not None:
        # cpus and gpus are totals for the task: each node must get the same share.
        for field, total, given in (("cpus", cpus, "cpus" in value), ("gpus", gpus, True)):
            if total is not None and total % nodes:
                _add(
                    errors,
                    f"resources.{field}",
                    f"must divide evenly by resources.nodes ({nodes}); it is the total "
                    f"for the task{'' if given else ', and defaults to 1'}",
                    total,
                )
    # cpus and gpus have defaults: None only with an error added above.
    if len(errors) > before or cpus is None or gpus is None:
        return None
    return Resources(cpus=cpus, memory_mib=memory, gpus=gpus, nodes=nodes, gpu_type=gpu_type)


# program ------------------------------------------------------------------------------------
def _program(
    command: Any, script: Any, errors: list[FieldError], *, image: Any = None
) -> tuple[tuple[str, ...] | None, str | None]:
    if command is None and script is None and image is not None:
        return None, None  # the image's own Entrypoint and Cmd run (docs/containers.md)
    if command is None and script is None:
        _add(errors, None, "exactly one of command or script is required; got neither")
        return None, None
    if command is not None and script is not None:
        _add(errors, None, "exactly one of command or script is required; got both")
        return None, None
    if command is not None:
        return _command(command, errors), None
    return None, _script(script, errors)


def _command(value: Any, errors: list[FieldError]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        _add(
            errors,
            "command",
            'must be a list of strings, e.g. ["python", "train.py"]; for a shell line use script',
            value,
        )
        return None
    if not isinstance(value, list) or not value:
        _add(errors, "command", "must be a non-empty list of strings", value)
        return None
    if len(value) > _MAX_COMMAND_ARGS:
        _add(errors, "command", f"must have at most {_MAX_COMMAND_ARGS} arguments", len(value))
        return None
    if _command_ok(value):
        return tuple(value)
    before = len(errors)
    for index, arg in enumerate(value):
        field = f"command[{index}]"
        if not isinstance(arg, str):
            _add(errors, field, "expected a string, quote it", arg)
        elif len(arg) > _MAX_ARG_CHARS:
            _add(errors, field, f"must be at most {_MAX_ARG_CHARS} characters", arg)
        elif "\x00" in arg or "\r" in arg:
            _add(errors, field, "must not contain a NUL or carriage return character", arg)
        elif index == 0 and not arg:
            _add(errors, field, "must not be empty: it is the program to run", arg)
    return tuple(value) if len(errors) == before else None


def _command_ok(args: list[Any]) -> bool:
    if not all(type(arg) is str for arg in args):
        return False
    joined = "".join(args)
    return (
        args[0] != ""
        and "\x00" not in joined
        and "\r" not in joined
        and max(map(len, args)) <= _MAX_ARG_CHARS
    )


def _script(value: Any, errors: list[FieldError]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        _add(errors, "script", "must be a non-empty string (a shell script body)", value)
        return None
    size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if size > _MAX_SCRIPT_BYTES:
        _add(errors, "script", f"must be at most {_MAX_SCRIPT_BYTES} bytes; it is {size}", value)
    elif "\x00" in value:
        _add(errors, "script", "must not contain a NUL character", value)
    elif "\r" in value:
        _add(errors, "script", "must not contain a carriage return; use LF line endings", value)
    else:
        return value
    return None


# env ----------------------------------------------------------------------------------------
def _env(
    value: Any, errors: list[FieldError], *, field: str = "env", secret: bool = False
) -> tuple[tuple[str, str], ...]:
    """`env`, or `secret_env` (secret=True): the same rules, but an error never repeats a
    secret value (it names the variable, and says what kind of value it got)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        got = type(value).__name__ if secret else value
        _add(errors, field, "must be a mapping of variable names to string values", got)
        return ()
    if len(value) > _MAX_ENV:
        _add(errors, field, f"must have at most {_MAX_ENV} variables", len(value))
        return ()
    before = len(errors)
    for name, text in value.items():
        path = _path(f"{field}.", name)
        shown = (SECRET_MASK if isinstance(text, str) else type(text).__name__) if secret else text
        if (
            not isinstance(name, str)
            or len(name) > _MAX_ENV_NAME
            or not _ENV_NAME_RE.fullmatch(name)
        ):
            _add(
                errors,
                path,
                "is not a valid variable name: upper-case letters, digits and _, "
                f"not starting with a digit (pattern {ENV_NAME_PATTERN})",
                name,
            )
            continue
        reason = env_reserved(name)
        if reason is not None:
            _add(errors, path, f"is reserved: {reason}", name)
        elif not isinstance(text, str):
            _add(errors, path, "expected a string, quote it", shown)
        elif len(text) > _MAX_ENV_VALUE:
            _add(errors, path, f"must be at most {_MAX_ENV_VALUE} characters", shown)
        elif "\n" in text or "\r" in text or "\x00" in text:
            _add(errors, path, "must not contain a newline or NUL character", shown)
        elif secret and text == SECRET_MASK:
            _add(
                errors,
                path,
                "is the mask shown in place of a secret value, not the value: enter the "
                "value again (secret values are never shown, not even to their owner)",
                shown,
            )
    if len(errors) > before:
        return ()
    # Sorted: the same canonical order TaskSpec.from_dict produces, so round trips compare equal.
    return tuple(sorted(value.items()))


# workflow fields ----------------------------------------------------------------------------
def _depends_on(
    value: Any, own_name: str | None, errors: list[FieldError], *, names_allowed: bool
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(names, ids) in `value`: a string is a task name, an integer (not a bool) a task id."""
    if value is None:
        return (), ()
    if not isinstance(value, list):
        _add(errors, "depends_on", "must be a list of task names or task ids", value)
        return (), ()
    if len(value) > _MAX_DEPENDS:
        _add(errors, "depends_on", f"must have at most {_MAX_DEPENDS} entries", len(value))
        return (), ()
    seen: dict[str | int, int] = {}
    names: list[str] = []
    ids: list[int] = []
    for index, item in enumerate(value):
        field = f"depends_on[{index}]"
        is_id = type(item) is int
        if is_id and item > _MAX_TASK_ID:
            _add(errors, field, f"is not a task id: ids are at most {_MAX_TASK_ID}", item)
            continue
        if not (
            (is_id and item >= 1)
            or (isinstance(item, str) and len(item) <= _MAX_NAME and _NAME_RE.fullmatch(item))
        ):
            _add(
                errors,
                field,
                "must be a task name (lower-case letters, digits and hyphens) "
                "or a task id (an integer >= 1)",
                item,
            )
            continue
        if item in seen:
            _add(errors, field, f"duplicate of depends_on[{seen[item]}]", item)
            continue
        seen[item] = index
        if is_id:
            ids.append(item)
        elif item == own_name:
            _add(errors, field, f"task '{item}' cannot depend on itself", item)
        elif not names_allowed:
            _add(
                errors,
                field,
                "a single task has no siblings to depend on; use a Workflow, or give a task id",
                item,
            )
        else:
            names.append(item)
    return tuple(names), tuple(ids)


def _trigger(value: Any, errors: list[FieldError]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        _add(errors, "trigger", "must be a mapping like {file: flows/run-1/READY}", value)
        return None
    _check_unknown(value, _TRIGGER_FIELDS, "trigger.", errors)
    path = value.get("file")
    if path is None:
        _add(errors, "trigger.file", "is required: the path of the file to wait for")
        return None
    return _file_path(path, "trigger.file", errors)


def _file_path(
    path: Any, field: str, errors: list[FieldError], *, relative: bool = True
) -> str | None:
    """An absolute path, or (`relative`) one relative to the task's project folder (made
    absolute once the task is routed: scheduling/decisions/storage.py `in_project_folder`)."""
    if path is None:
        return None
    if (
        not isinstance(path, str)
        or not path
        or not (relative or path.startswith("/"))
        or len(path) > _MAX_PATH
        or "\x00" in path
        or "\r" in path
        or "\n" in path
    ):
        what = (
            "a path: absolute, or relative to the project's folder"
            if relative
            else "an absolute path, starting with /"
        )
        _add(
            errors,
            field,
            f"must be {what} (at most {_MAX_PATH} characters, one line)",
            path,
        )
        return None
    names = path.split("/")
    if ".." in names:
        _add(errors, field, "must not contain .. components", path)
        return None
    if not path.startswith("/") and ("." in names or "" in names):
        _add(errors, field, "a relative path is names joined by single /, with no . in it", path)
        return None
    return path


def _inputs(value: Any, errors: list[FieldError]) -> tuple[str, ...]:
    """Absolute, normalised paths, linked into the working folder under their last names:
    two with one name would be linked at the same place. Where they may be is checked at
    submission, against the folders the job mounts (docs/storage.md)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        _add(errors, "inputs", "must be a list of absolute paths of files or folders", value)
        return ()
    if len(value) > _MAX_INPUTS:
        _add(errors, "inputs", f"must have at most {_MAX_INPUTS} paths", len(value))
        return ()
    before = len(errors)
    named: dict[str, int] = {}
    for index, item in enumerate(value):
        field = f"inputs[{index}]"
        path = _file_path(item, field, errors, relative=False)
        if path is None:
            continue
        if posixpath.normpath(path) != path or path.startswith("//") or path == "/":
            _add(
                errors,
                field,
                "must be a normalised path of a file or folder (no //, /./ or trailing /)",
                path,
            )
            continue
        name = posixpath.basename(path)
        if name in named:
            _add(
                errors,
                field,
                f"has the name {name!r} of inputs[{named[name]}]: both would be linked as "
                f"./{name} in the working folder",
                path,
            )
            continue
        named[name] = index
    return tuple(value) if len(errors) == before else ()
