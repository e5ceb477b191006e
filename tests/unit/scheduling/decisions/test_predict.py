"""Predicted runtimes: the history key, the mean of the last two capped by the walltime, the
history the simulator feeds, the correction of an outlived prediction, and the error."""

from __future__ import annotations

import math
import time

import pytest

from scheduling.decisions.predict import (
    History,
    corrected,
    history_key,
    planned_runtime,
    predict,
    prediction_error,
)
from scheduling.spec import TaskSpec


def spec(**kw) -> TaskSpec:
    return TaskSpec(**{"name": "train", "project": "p", "command": ("python", "t.py"), **kw})


class TestHistoryKey:
    def test_the_same_work_has_the_same_key(self):
        # The name, resources and walltime are not the work: a renamed rerun is the same run.
        again = spec(name="train-2", walltime_s=7200)
        assert history_key("ana", "p", spec()) == history_key("ana", "p", again)

    def test_user_project_and_command_each_tell_work_apart(self):
        base = history_key("ana", "p", spec())
        assert history_key("bob", "p", spec()) != base
        assert history_key("ana", "q", spec()) != base
        assert history_key("ana", "p", spec(command=("python", "t.py", "--big"))) != base

    def test_arguments_are_not_run_together(self):
        # ("a b",) and ("a", "b") are different commands.
        one = history_key("ana", "p", spec(command=("a b",)))
        assert one != history_key("ana", "p", spec(command=("a", "b")))

    def test_a_script_then_an_image_then_the_name_name_the_work(self):
        by_script = history_key("ana", "p", spec(command=None, script="echo 1"))
        assert by_script != history_key("ana", "p", spec(command=None, script="echo 2"))
        by_image = history_key("ana", "p", spec(command=None, image="reg/x:1"))
        assert by_image != history_key("ana", "p", spec(command=None, image="reg/y:1"))
        by_name = history_key("ana", "p", spec(command=None, name="a"))
        assert by_name != history_key("ana", "p", spec(command=None, name="b"))

    def test_it_is_32_hex_digits(self):
        key = history_key("ana", "p", spec())
        assert len(key) == 32 and int(key, 16) >= 0


class TestPredict:
    def test_no_history_no_prediction(self):
        assert predict([], 3600) is None

    def test_one_run_is_its_own_prediction(self):
        assert predict([600.0], 3600) == 600.0

    def test_the_mean_of_the_last_two_only(self):
        # 100 is older than the last two: (600 + 900) / 2.
        assert predict([100.0, 600.0, 900.0], 3600) == 750.0

    def test_capped_by_the_walltime(self):
        assert predict([3000.0, 5000.0], 3600) == 3600.0

    def test_no_walltime_no_cap(self):
        assert predict([3000.0, 5000.0], None) == 4000.0

    def test_with_the_walltimes_the_runs_asked_it_scales_this_jobs_own_where_longer(self):
        # The runs used a quarter and three quarters of their 1 h: half of the 2 h asked now
        # (their mean, 30 min, is shorter).
        assert predict([900.0, 2700.0], 7200, [3600.0, 3600.0]) == 3600.0
        # Asking less now: the mean of the runs, capped, is the larger.
        assert predict([900.0, 2700.0], 1200, [3600.0, 3600.0]) == 1200.0
        assert predict([900.0, 2700.0], 3000, [3600.0, 3600.0]) == 1800.0
        # A user who asks exactly what the work takes is planned by that, however the
        # work's runtimes vary (the SWF model trace's walltimes are its runtimes).
        assert predict([100.0, 9000.0], 5000, [100.0, 9000.0]) == 5000.0
        # A run past its walltime (a timeout's last seconds) counts as all of it.
        assert predict([3700.0, 3600.0], 600, [3600.0, 3600.0]) == 600.0

    def test_a_run_that_asked_no_walltime_leaves_the_mean_of_the_runtimes(self):
        assert predict([600.0, 900.0], 3600, [3600.0, None]) == 750.0
        assert predict([600.0, 900.0], None, [3600.0, 3600.0]) == 750.0


class TestHistory:
    def test_it_keeps_the_last_two_runs_per_key(self):
        h = History()
        for runtime in (100.0, 200.0, 400.0):
            h.record("a", runtime)
        h.record("b", 50.0)
        assert h.recent("a") == (200.0, 400.0)
        assert h.predict("a", 3600) == 300.0
        assert h.predict("b", 3600) == 50.0
        assert h.predict("c", 3600) is None
        assert h.recent("c") == ()
        assert len(h) == 2

    def test_it_keeps_what_each_run_asked_beside_it(self):
        h = History()
        h.record("a", 600.0, 3600.0)
        h.record("a", 1200.0, 1200.0)
        assert h.predict("a", 2400) == 2400 * (1 / 6 + 1) / 2  # above their mean, 900
        h.record("a", 300.0)  # asked none: the plain mean of the last two
        assert h.predict("a", 2400) == 750.0

    def test_it_caps_by_the_walltime_asked_now(self):
        h = History()
        h.record(("ana", "p", "t.py"), 7200.0)
        assert h.predict(("ana", "p", "t.py"), 3600) == 3600.0

    @pytest.mark.parametrize("bad", [-1.0, math.nan])
    def test_it_refuses_a_negative_or_missing_runtime(self, bad):
        with pytest.raises(ValueError, match=r"runtime_s: expected seconds >= 0, got"):
            History().record("a", bad)

    def test_a_hundred_thousand_jobs_take_well_under_a_second(self):
        h = History()
        started = time.perf_counter()
        for i in range(100_000):
            key = i % 997
            h.predict(key, 3600)
            h.record(key, float(i % 3000))
        assert time.perf_counter() - started < 1.0


class TestCorrected:
    def test_the_next_step_past_what_it_has_run(self):
        assert corrected(90, 36_000) == 300.0
        assert corrected(300, 36_000) == 900.0  # a step equal to the elapsed time has passed

    def test_never_past_the_walltime(self):
        assert corrected(1000, 1200) == 1200.0

    def test_past_the_last_step(self):
        assert corrected(400 * 3600, 500 * 3600) == 500 * 3600
        assert corrected(400 * 3600, None) == 800 * 3600


class TestPlannedRuntime:
    def test_the_prediction_while_it_holds(self):
        assert planned_runtime(0, 600.0, 3600) == 600.0
        assert planned_runtime(599, 600.0, 3600) == 600.0

    def test_corrected_once_outlived(self):
        assert planned_runtime(600, 600.0, 3600) == 900.0
        assert planned_runtime(1000, 600.0, 1200) == 1200.0

    def test_no_prediction_the_walltime_or_nothing(self):
        assert planned_runtime(5000, None, 3600) == 3600.0
        assert planned_runtime(5000, None, None) is None


class TestPredictionError:
    def test_hand_checked(self):
        # Off by 60 (under), 120 (over), 0: mean 60 s; relative 60/600, 120/1200, 0 → 1/15;
        # ratios 0.9, 1.1, 1.0 → 1.0; one of three ran longer than predicted.
        error = prediction_error([(540.0, 600.0), (1320.0, 1200.0), (300.0, 300.0)])
        assert error.count == 3
        assert error.mean_abs_error_s == pytest.approx(60.0)
        assert error.mean_abs_relative_error == pytest.approx(1 / 15)
        assert error.mean_ratio == pytest.approx(1.0)
        assert error.share_under == pytest.approx(1 / 3)

    def test_a_run_under_a_second_counts_as_a_second_in_relative_terms(self):
        error = prediction_error([(1.0, 0.2)])
        assert error.mean_abs_relative_error == pytest.approx(0.8)
        assert error.mean_ratio == pytest.approx(1.0)

    def test_nothing_measured(self):
        error = prediction_error([])
        assert error.count == 0
        assert error.as_dict() == {
            "count": 0,
            "mean_abs_error_s": None,
            "mean_abs_relative_error": None,
            "share_under": None,
            "mean_ratio": None,
        }

    def test_it_reads_any_iterable_once(self):
        error = prediction_error((p, a) for p, a in [(10.0, 20.0)])
        assert error.count == 1 and error.share_under == 1.0
