"""NVIDIA's tool, as the tests have it: the stand-in tests/fixtures/nvidia-smi, which prints
an 8-GPU H200 node's answers (tests/fixtures/nvidia-smi.recorded/: the tool's format, an
H200's figures, not yet captured from a machine), linked into a folder of the test's own
that goes first on PATH, so that the portal finds it where it finds the real one
(docs/operations.md, "GPU use and GPU health")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STAND_IN = FIXTURES / "nvidia-smi"
RECORDED = FIXTURES / "nvidia-smi.recorded"


class FakeSmi:
    """The stand-in's folder: `scene` picks the recording, `holding` says which processes
    (host pids) hold the recorded GPU contexts, in the recording's order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / "nvidia-smi"

    def scene(self, name: str) -> None:
        assert (RECORDED / f"query-gpu-{name}.csv").exists(), name
        (self.folder / "nvidia-smi.scene").write_text(name + "\n")

    def holding(self, pids: list[int]) -> None:
        tmp = self.folder / "nvidia-smi.pids.tmp"
        tmp.write_text("".join(f"{pid}\n" for pid in pids))
        tmp.replace(self.folder / "nvidia-smi.pids")  # never read half-written


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSmi:
    folder = tmp_path / "bin"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "nvidia-smi").symlink_to(STAND_IN)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return FakeSmi(folder)
