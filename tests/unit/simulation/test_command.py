"""`manage.py simulate`: the validation day's table, traces, the portal's own history, and bad
input."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduling import services
from scheduling.models import Task
from simulation.simulator.criteria import CRITERIA, validation_day_report
from simulation.simulator.traces import TraceError, read_swf
from tests.conftest import ROOT, descriptor

TRACES = ROOT.parent / "shared" / "traces"


def _run(*args) -> str:
    out = io.StringIO()
    call_command("simulate", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_validation_day_prints_each_criterion_with_fifo_and_easy_beside_it_and_pass_or_fail(
    tmp_path,
):
    target = tmp_path / "day.json"
    text = _run("validation-day", "--seed", "2", "--json", str(target))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].split("|")[1:7] == [
        " criterion ",
        " target ",
        " Switchyard ",
        " FIFO ",
        " EASY ",
        " met ",
    ]
    assert len(rows) == 1 + len(CRITERIA)
    saved = json.loads(target.read_text())
    again = validation_day_report(2)  # the same seed gives the same day, and the same numbers
    for row, line, fresh in zip(saved["criteria"], rows[1:], again["criteria"], strict=True):
        assert line.startswith(f"| {row['criterion']} | {row['target']} |")
        assert line.rstrip().endswith("| pass |" if row["passed"] else "| FAIL |")
        assert row["values"] == fresh["values"]
        assert set(row["values"]) == {"switchyard", "fifo", "easy"}
    # Agents: their own pool under Switchyard; behind the head of one queue under FIFO.
    agents = saved["criteria"][0]["values"]
    assert agents["switchyard"] < 30 < agents["fifo"]


@pytest.mark.parametrize("name", ["r14", "r14-burst", "burst"])
def test_a_workload_name_not_offered_is_refused_with_the_names_that_are(name):
    with pytest.raises(CommandError) as err:
        _run(name)
    said = str(err.value)
    assert f"invalid choice: '{name}'" in said
    for workload in ("validation-day", "launch-mix", "swf", "alibaba", "history"):
        assert f"'{workload}'" in said


def test_an_swf_trace_runs_under_every_policy(tmp_path):
    target = tmp_path / "swf.json"
    text = _run("swf", str(TRACES / "lublin_256.swf"), "--limit", "400", "--json", str(target))
    result = json.loads(target.read_text())
    assert result["jobs"] == 400 and set(result["policies"]) == {"fifo", "easy", "switchyard"}
    for policy, s in result["policies"].items():
        assert s["jobs"] == 400 and s["never"] == 0, policy
        assert s["mean_bsld"] >= 1 and f"| {policy} | 400 |" in text
    # Backfilling never makes the mean wait worse than FIFO on this prefix.
    wait = {p: s["types"]["hpc-simulation"]["mean_wait_s"] for p, s in result["policies"].items()}
    assert wait["easy"] <= wait["fifo"] and wait["switchyard"] <= wait["fifo"]


def test_the_alibaba_trace_reads_pods_and_nodes_and_says_what_it_left_out(tmp_path):
    target = tmp_path / "ali.json"
    _run(
        "alibaba",
        str(TRACES / "openb_pod_list_default.csv"),
        str(TRACES / "openb_node_list_gpu_node.csv"),
        "--limit",
        "300",
        "--compress",
        "50",
        "--policies",
        "fifo,switchyard",
        "--json",
        str(target),
    )
    result = json.loads(target.read_text())
    assert result["jobs"] == 300 and set(result["policies"]) == {"fifo", "switchyard"}
    assert result["left_out"]["never scheduled"] > 0 and result["compress"] == 50


def test_history_replays_the_portals_own_tasks(site, researcher, tmp_path):
    ran = services.task_submit(user=researcher, text=json.dumps(descriptor(name="ran")), fmt="json")
    never = services.task_submit(
        user=researcher, text=json.dumps(descriptor(name="never")), fmt="json"
    )
    now = timezone.now()
    Task.objects.filter(pk=ran.pk).update(
        state="succeeded",
        started_at=now - timedelta(minutes=5),
        ended_at=now - timedelta(minutes=2),
    )
    Task.objects.filter(pk=never.pk).update(state="cancelled")
    target = tmp_path / "history.json"
    _run("history", "--days", "1", "--json", str(target))
    result = json.loads(target.read_text())
    assert result["jobs"] == 1 and result["left_out"] == {"never started (cancelled)": 1}
    for policy, s in result["policies"].items():
        assert s["jobs"] == 1, policy
    assert result["bound"]["cpu_s"] > 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("swf",), "files: swf takes 1 file(s), got 0"),
        (("validation-day", "--policies", "fifo,bogus"), None),
        (("swf", "/nonexistent.swf"), "No such file"),
        (("alibaba", "a.csv", "b.csv", "--compress", "0.5"), "compress"),
    ],
)
def test_bad_input_is_refused_with_what_was_expected(args, says, tmp_path):
    if (
        args[0] == "validation-day"
    ):  # the validation day runs all three policies; a bad list is refused for traces
        args = ("swf", str(TRACES / "lublin_256.swf"), "--policies", "fifo,bogus")
        says = "policies: expected some of fifo, easy, switchyard, got ['bogus']"
    with pytest.raises(CommandError) as err:
        _run(*args)
    assert says in str(err.value)


def test_a_malformed_swf_line_names_its_line(tmp_path):
    bad = tmp_path / "bad.swf"
    bad.write_text("; header\n1 0 -1 10 4 -1 -1 4 20 -1 1 3 1 -1 1 -1 -1 -1\n2 5 -1 ten 4\n")
    with pytest.raises(TraceError, match=r"bad.swf:3: expected 18 columns, got 5"):
        read_swf(bad)
    bad.write_text("1 0 -1 ten 4 -1 -1 4 20 -1 1 3 1 -1 1 -1 -1 -1\n")
    with pytest.raises(TraceError, match=r"bad.swf:1: expected numbers"):
        read_swf(bad)
