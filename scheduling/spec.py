"""The validated form of a task descriptor.

`TaskSpec` is what the descriptor parser produces and what every decision function and
backend consumes. It is plain data: frozen, no ORM, sizes in MiB and durations in seconds,
so the same value can be stored (`as_dict`), shipped to a worker, and fed to the simulator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

TASK_TYPES = ("hpc-simulation", "ai-training", "ai-inference", "agent", "sandbox")
SANDBOXED_TYPES = frozenset({"agent", "sandbox"})
FAIL_ACTIONS = ("abort", "skip")
PRIORITIES = ("low", "normal", "high")


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
    env: tuple[tuple[str, str], ...] = ()
    depends_on: tuple[str, ...] = ()
    retry_count: int = 0
    fail_action: str = "abort"
    wait_timeout_s: int | None = None
    trigger_file: str | None = None
    priority: str = "normal"

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command) if self.command is not None else None
        data["env"] = dict(self.env)
        data["depends_on"] = list(self.depends_on)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSpec:
        data = dict(data)
        data["resources"] = Resources(**data.get("resources") or {})
        if data.get("command") is not None:
            data["command"] = tuple(data["command"])
        data["env"] = tuple(sorted((data.get("env") or {}).items()))
        data["depends_on"] = tuple(data.get("depends_on") or ())
        return cls(**data)
