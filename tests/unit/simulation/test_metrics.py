"""The simulator's summary carries the error of the run's predicted runtimes."""

from __future__ import annotations

import pytest

from simulation.simulator.metrics import with_prediction


def test_the_prediction_error_goes_under_its_own_key():
    result = with_prediction({"jobs": 2}, [(600.0, 900.0), (750.0, 600.0)])
    assert result["jobs"] == 2
    prediction = result["prediction"]
    assert prediction["count"] == 2
    assert prediction["mean_abs_error_s"] == pytest.approx(225.0)  # (300 + 150) / 2
    assert prediction["mean_abs_relative_error"] == pytest.approx((300 / 900 + 150 / 600) / 2)
    assert prediction["share_under"] == pytest.approx(0.5)
    assert prediction["mean_ratio"] == pytest.approx((600 / 900 + 750 / 600) / 2)


def test_a_run_without_predictions_says_so():
    assert with_prediction({}, [])["prediction"]["count"] == 0
    assert with_prediction({}, [])["prediction"]["mean_abs_error_s"] is None
