"""Starting points for the Submit page: one per workload type, with what such work usually
asks for on the default site (docs/descriptor.md has every field), and the shipped examples
whole descriptors are (examples/)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent / "examples"
# What an example names its project; the page puts the researcher's first project there.
EXAMPLE_PROJECT = "my-project"

# type → the form's fields. Commands are placeholders a researcher replaces.
STARTERS: dict[str, dict[str, str]] = {
    "hpc-simulation": {
        "label": "HPC simulation",
        "name": "mpi-simulation",
        "cpus": "32",
        "gpus": "0",
        "memory": "32Gi",
        "walltime": "4h",
        "command": "sh -c 'echo simulating on $(nproc) cores; sleep 60'",
    },
    "ai-training": {
        "label": "AI training",
        "name": "train-model",
        "cpus": "16",
        "gpus": "8",
        "memory": "64Gi",
        "walltime": "12h",
        "estimate": "8h",
        # Runs as it stands: without a train.py of yours in its working folder it writes a
        # tiny one (the standard library only) that trains for show and saves model.txt.
        "command": (
            r"""sh -c 'test -f train.py || printf "%s\n" "import sys, time" """
            r""""epochs = int(sys.argv[2])" "for epoch in range(1, epochs + 1):" """
            r""""    print(f\"epoch {epoch}/{epochs}: loss {1 / epoch:.3f}\", flush=True)" """
            r""""    time.sleep(0.5)" """
            r""""print(f\"trained for {epochs} epochs\", file=open(\"model.txt\", \"w\"))" """
            r"""> train.py; python3 train.py --epochs 10'"""
        ),
    },
    "ai-inference": {
        "label": "AI inference",
        "name": "serve-model",
        "cpus": "4",
        "gpus": "1",
        "memory": "16Gi",
        "walltime": "1h",
        "command": "python3 serve.py --port 8080",
    },
    "agent": {
        "label": "Agent step",
        "name": "agent-step",
        "cpus": "1",
        "gpus": "0",
        "memory": "2Gi",
        "walltime": "5m",
        "command": "sh -c 'echo thinking; sleep 5'",
    },
    "sandbox": {
        "label": "Sandbox",
        "name": "sandbox-run",
        "cpus": "1",
        "gpus": "0",
        "memory": "1Gi",
        "walltime": "10m",
        "command": "python3 -c 'print(2 + 2)'",
    },
    # A whole descriptor, in the descriptor box (docs/sandboxes.md, "From a batch task").
    "agent-tools": {"label": "Agent with tool calls", "example": "agent-tool-calls.yaml"},
}


@cache
def _example_text(name: str) -> str:
    return (EXAMPLES / name).read_text(encoding="utf-8")


def example(name: str, project: str) -> str:
    """A shipped example descriptor (examples/<name>) for `project`."""
    return _example_text(name).replace(EXAMPLE_PROJECT, project)


def starter_initial(kind: str, project: str = EXAMPLE_PROJECT) -> dict[str, str] | None:
    """The form's initial values for a type (or an example's descriptor), or None for an
    unknown one."""
    found = STARTERS.get(kind)
    if found is None:
        return None
    if "example" in found:
        return {"descriptor": example(found["example"], project)}
    return {"type": kind, **{k: v for k, v in found.items() if k != "label"}}
