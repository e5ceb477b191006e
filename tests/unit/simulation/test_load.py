"""An SWF trace's arrivals stretched or compressed to an offered load (`simulate swf --load`)."""

from __future__ import annotations

import io
import json
import math

import pytest
from django.core.management import CommandError, call_command

from simulation.simulator.traces import SWF_CORES, TraceError, at_load, offered_load, read_swf

# number submit wait runtime procs cpu mem req-procs req-time req-mem status user group app
# queue partition preceding think: four jobs over 1,000 s asking 64 cores x 100-400 s.
TRACE = """; a hand-made trace
1 0 0 100 64 -1 -1 64 200 -1 1 1 1 1 1 1 -1 -1
2 200 0 200 128 -1 -1 128 400 -1 1 2 1 1 1 1 -1 -1
3 600 0 400 32 -1 -1 32 800 -1 1 1 1 1 1 1 -1 -1
4 1000 0 300 64 -1 -1 64 600 -1 1 3 1 1 1 1 -1 -1
"""
WORK = 64 * 100 + 128 * 200 + 32 * 400 + 64 * 300  # processor-seconds


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "four.swf"
    path.write_text(TRACE)
    return path


def test_the_offered_load_is_the_work_over_the_cores_times_the_span_of_arrivals(trace):
    jobs = read_swf(trace)
    assert offered_load(jobs, SWF_CORES) == pytest.approx(WORK / (256 * 1000))
    assert offered_load(jobs[:1], SWF_CORES) == math.inf  # one moment: no span to offer it over


@pytest.mark.parametrize("load", [0.05, 0.7, 0.85, 2.0])
def test_arrivals_are_stretched_about_the_first_to_the_load_asked(trace, load):
    jobs = read_swf(trace)
    moved = at_load(jobs, SWF_CORES, load)
    assert offered_load(moved, SWF_CORES) == pytest.approx(load)
    assert [j.key for j in moved] == [j.key for j in jobs] and moved[0].submit == 0
    factor = (WORK / (256 * 1000)) / load
    assert [j.submit for j in moved] == pytest.approx([j.submit * factor for j in jobs])
    # What each job asks and how long it runs are the trace's.
    assert [(j.runtime, j.spec) for j in moved] == [(j.runtime, j.spec) for j in jobs]


@pytest.mark.parametrize("load", [0, -0.5, math.nan, math.inf, "0.7", None])
def test_a_load_that_is_not_a_positive_number_is_refused_with_what_was_expected(trace, load):
    with pytest.raises(TraceError) as err:
        at_load(read_swf(trace), SWF_CORES, load)
    assert str(err.value) == f"load: expected an offered load above 0 (such as 0.7), got {load!r}"


def test_a_trace_arriving_all_at_once_cannot_be_stretched_to_a_load(trace):
    one_moment = [j for j in read_swf(trace) if j.submit == 0]
    with pytest.raises(TraceError, match="load: expected a trace whose arrivals span some time"):
        at_load(one_moment, SWF_CORES, 0.7)


def _run(*args) -> str:
    out = io.StringIO()
    call_command("simulate", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_command_runs_the_trace_at_the_load_asked_and_says_both_loads(trace, tmp_path):
    target = tmp_path / "out.json"
    text = _run("swf", str(trace), "--load", "0.7", "--policies", "easy", "--json", str(target))
    result = json.loads(target.read_text())
    native = WORK / (256 * 1000)
    assert result["load"] == pytest.approx(0.7) and result["native_load"] == pytest.approx(native)
    assert f"offered load 0.70 (the trace's: {native:.2f})" in text
    assert result["policies"]["easy"]["jobs"] == 4


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--load", "0"], "load: expected an offered load above 0 (such as 0.7), got 0.0"),
        (["--load", "-1"], "load: expected an offered load above 0 (such as 0.7), got -1.0"),
        (["--load", "nan"], "load: expected an offered load above 0 (such as 0.7), got nan"),
    ],
)
def test_the_command_refuses_a_bad_load(trace, args, said):
    with pytest.raises(CommandError) as err:
        _run("swf", str(trace), *args)
    assert str(err.value) == said


def test_a_load_is_refused_for_a_workload_that_is_not_a_trace():
    with pytest.raises(CommandError) as err:
        _run("launch-mix", "--load", "0.7")
    assert str(err.value) == "load: expected it only with swf, got it with launch-mix"
