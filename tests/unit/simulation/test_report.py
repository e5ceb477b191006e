"""`manage.py simulate report`: every acceptance figure in one table, written between markers."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from simulation.simulator import report
from simulation.simulator.criteria import CRITERIA
from tests.unit.simulation.test_load import TRACE

PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-0,4000,8192,1,1000,,LS,Running,0,4000,0
pod-1,4000,8192,2,1000,,BE,Running,100,9000,100
pod-2,8000,8192,0,0,,BE,Running,200,5000,200
pod-3,4000,8192,2,500,,LS,Running,300,7000,300
pod-4,4000,8192,1,1000,,Burstable,Pending,400,,
"""
NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,16000,65536,2,V100
node-1,16000,65536,2,V100
"""
DOC = "# Doc\n\nbefore\n\n{start}\nold table\n{end}\n\nafter\n"


@pytest.fixture
def traces(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / report.SWF).write_text(TRACE)
    (folder / report.PODS).write_text(PODS)
    (folder / report.NODES).write_text(NODES)
    return folder


def _run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("simulate", "report", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines]


def test_the_report_runs_every_figure_and_writes_one_table_between_the_markers(traces, tmp_path):
    doc = tmp_path / "simulation.md"
    doc.write_text(DOC.format(start=report.START, end=report.END))
    out, err = _run("--seeds", "1", "--traces", str(traces), "--write", str(doc))
    rows = _rows(out)
    assert rows[0] == [
        "run",
        "figure",
        "target",
        "Switchyard",
        "EASY",
        "ratio",
        "met",
        "run time",
    ]
    # The day's criteria and GPU against EASY; SWF at three loads, two figures each; Alibaba
    # over every pod and per type (inference, training, CPU-only).
    day = [r for r in rows[1:] if r[0] == "validation day, seed 1"]
    assert [r[1] for r in day] == [c.name for c in CRITERIA] + ["site GPU utilisation against EASY"]
    swf = [r for r in rows[1:] if r[0].startswith("SWF")]
    assert [r[1] for r in swf] == ["mean bounded slowdown", "longest wait"] * 3
    assert swf[2][0] == "SWF lublin_256.swf, offered load 0.70"
    assert swf[4][0] == "SWF lublin_256.swf, offered load 0.85"
    ali = [r[1] for r in rows[1:] if r[0].startswith("Alibaba")]
    assert ali == [
        "mean bounded slowdown, every pod",
        "mean bounded slowdown, ai-inference",
        "mean bounded slowdown, ai-training",
        "mean bounded slowdown, hpc-simulation",
    ]
    assert len(rows) == 1 + len(day) + len(swf) + len(ali)
    for r in rows[1:]:
        assert r[6] == "pass" or r[6] == "**FAIL**" or r[6].startswith("pass: both at the floor")
        assert r[7].endswith(" s") or r[7].endswith("(3 policies)")
    for r in swf + [r for r in rows[1:] if r[0].startswith("Alibaba")]:
        mine, easy, ratio = float(r[3].rstrip(" shmin")), float(r[4].rstrip(" shmin")), r[5]
        if easy and r[1] != "longest wait":
            assert ratio == f"{mine / easy:.2f}"
    # Progress, one line a simulation: 1 day, 6 SWF runs, 2 Alibaba runs.
    assert "9 simulations in 2 process(es)" in err and "[9/9]" in err
    written = doc.read_text()
    assert written.startswith("# Doc\n\nbefore\n\n" + report.START + "\n")
    assert written.endswith("\n" + report.END + "\n\nafter\n") and "old table" not in written
    assert out.split("\nwritten into")[0] in written
    # Again: the table is replaced, not added to.
    _run("--seeds", "1", "--traces", str(traces), "--write", str(doc), "--jobs", "1")
    again = doc.read_text()
    assert again.count(report.START) == 1 and again.count("| run | figure |") == 1


def test_a_missing_trace_leaves_its_rows_out_and_says_so(tmp_path):
    out, _ = _run("--seeds", "2", "--traces", str(tmp_path), "--jobs", "1")
    runs = {r[0] for r in _rows(out)[1:]}
    assert runs == {"validation day, seed 2"}
    assert f"Not run: lublin_256.swf, {report.PODS}, {report.NODES} not found" in out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--seeds", "5-1"],
            "seeds: expected a range such as 1-5 or a list such as 1,2,3, got '5-1'",
        ),
        (
            ["--seeds", "one"],
            "seeds: expected a range such as 1-5 or a list such as 1,2,3, got 'one'",
        ),
        (["--jobs", "0"], "jobs: expected at least 1 process, got 0"),
        (["extra.swf"], "files: report takes 0 file(s), got 1"),
    ],
)
def test_bad_input_is_refused_with_the_field_and_what_was_expected(args, said):
    with pytest.raises(CommandError) as err:
        _run(*args)
    assert str(err.value) == said


def test_a_file_without_the_markers_is_refused_before_anything_runs(tmp_path):
    doc = tmp_path / "plain.md"
    doc.write_text("# no markers here\n")
    with pytest.raises(CommandError) as err:
        _run("--write", str(doc), "--traces", str(tmp_path))
    assert str(err.value) == (
        f"write: expected the lines {report.START} and {report.END} in {doc}, got none"
    )
    assert doc.read_text() == "# no markers here\n"


def test_seeds_read_as_a_range_a_list_or_one():
    assert report.parse_seeds("1-5") == [1, 2, 3, 4, 5]
    assert report.parse_seeds("2, 4") == [2, 4]
    assert report.parse_seeds("3") == [3]
