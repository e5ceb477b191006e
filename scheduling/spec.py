"""The validated form of a task descriptor.

`TaskSpec` is what the descriptor parser produces and what every decision function and
backend consumes. It is plain data: frozen, no ORM, sizes in MiB and durations in seconds,
so the same value can be stored (`as_dict`), shipped to a worker, and fed to the simulator.
`WorkflowSpec` is a validated `kind: Workflow`: a project, a name, and its tasks in document
order, whose `depends_on` names refer to each other (the DAG is checked by the parser).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

TASK_TYPES = ("hpc-simulation", "ai-training", "ai-inference", "agent", "sandbox")
SANDBOXED_TYPES = frozenset({"agent", "sandbox"})
FAIL_ACTIONS = ("abort", "skip")
PRIORITIES = ("low", "normal", "high")
NOTIFY = ("end", "none")


@dataclass(frozen=True, slots=True)
class Resources:
    cpus: int = 1
    memory_mib: int = 1024  # per node
    gpus: int = 0
    nodes: int | None = None  # None: the scheduler spreads the cores where they fit
    gpu_type: str | None = None


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    project: str
    resources: Resources = field(default_factory=Resources)
    type: str | None = None  # declared type; None lets the classifier decide
    queue: str | None = None
    walltime_s: int | None = None
    estimate_s: int | None = None
    command: tuple[str, ...] | None = None
    script: str | None = None
    image: str | None = None
    # What `image` named when the task was submitted (`sha256:…`): every attempt runs it, even
    # after the tag moves (docs/containers.md). Set by the portal, never by a descriptor.
    image_digest: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    # Values no one is shown, stored sealed (scheduling/sealed.py); in clear only in the spec
    # the parser makes and the one the engine hands a backend.
    secret_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    depends_on: tuple[str, ...] = ()  # names of tasks in the same workflow
    retry_count: int = 0
    fail_action: str = "abort"
    wait_timeout_s: int | None = None
    trigger_file: str | None = None
    # Where the job starts: inside a storage folder it mounts (docs/storage.md); None: a
    # folder of its own in its project's area.
    workdir: str | None = None
    # Files and folders linked into the working folder under their own names before the
    # command starts (docs/storage.md); each inside a folder the job mounts.
    inputs: tuple[str, ...] = ()
    priority: str = "normal"
    notify: str | None = None  # "end": mail the owner when it ends; "none"; None: their setting
    # ids of tasks that already exist; the service checks the submitter may see them
    depends_on_ids: tuple[int, ...] = ()
    # A live sandbox (docs/sandboxes.md): set by the portal's sandbox service, never by a
    # descriptor. `session_idle_s` not None makes the job a session: its command is the
    # backend's in-sandbox agent, execs reach it until it ends (idle this long, its walltime,
    # or deleted). `egress`: the "host:port" pairs its proxy lets through; () is no network.
    session_idle_s: int | None = None
    egress: tuple[str, ...] = ()
    # A batch task that asked (`sandboxes: true`) gets a token for its project's live-sandbox
    # API in its environment, valid until its walltime ends (docs/sandboxes.md).
    sandboxes: bool = False

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def as_dict(self) -> dict[str, Any]:
        # Field by field: dataclasses.asdict deep-copies recursively, a tenth of the cost of
        # storing a batch of tasks. A test holds the two equal.
        data = {name: getattr(self, name) for name in _TASK_FIELDS}
        data["resources"] = {name: getattr(self.resources, name) for name in _RESOURCE_FIELDS}
        data["command"] = list(self.command) if self.command is not None else None
        data["env"] = dict(self.env)
        data["secret_env"] = dict(self.secret_env)
        data["depends_on"] = list(self.depends_on)
        data["inputs"] = list(self.inputs)
        data["depends_on_ids"] = list(self.depends_on_ids)
        data["egress"] = list(self.egress)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSpec:
        data = dict(data)
        data["resources"] = Resources(**data.get("resources") or {})
        if data.get("command") is not None:
            data["command"] = tuple(data["command"])
        data["env"] = tuple(sorted((data.get("env") or {}).items()))
        data["secret_env"] = tuple(sorted((data.get("secret_env") or {}).items()))
        depends_on = data.get("depends_on") or ()
        if "depends_on_ids" not in data:
            # Stored before depends_on_ids existed: task ids were kept in depends_on as text
            # ("42"). A lone task had no siblings, so its only meaningful references were ids.
            ids = [int(ref) for ref in depends_on if _legacy_id(ref)]
            depends_on = [ref for ref in depends_on if not _legacy_id(ref)]
            data["depends_on_ids"] = ids
        data["depends_on"] = tuple(depends_on)
        data["depends_on_ids"] = tuple(data.get("depends_on_ids") or ())
        data["inputs"] = tuple(data.get("inputs") or ())
        data["egress"] = tuple(data.get("egress") or ())
        return cls(**data)


_TASK_FIELDS = tuple(f.name for f in fields(TaskSpec))
_RESOURCE_FIELDS = tuple(f.name for f in fields(Resources))


def _legacy_id(ref: Any) -> bool:
    return (type(ref) is int) or (isinstance(ref, str) and ref.isascii() and ref.isdigit())


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """A validated workflow: every task carries the workflow's project, names are unique,
    `depends_on` names exist in `tasks` and form no cycle."""

    name: str
    project: str
    tasks: tuple[TaskSpec, ...] = ()

    @property
    def external_ids(self) -> tuple[int, ...]:
        """Ids of existing tasks that some task depends on, once each, in document order."""
        return tuple(dict.fromkeys(i for task in self.tasks for i in task.depends_on_ids))

    def task(self, name: str) -> TaskSpec:
        """The task called `name`; KeyError when there is none."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "tasks": [task.as_dict() for task in self.tasks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkflowSpec:
        return cls(
            name=data["name"],
            project=data["project"],
            tasks=tuple(TaskSpec.from_dict(task) for task in data.get("tasks") or ()),
        )
