"""What the task list says in words: relative times, durations, node ranges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.presenters.task_list import ago, node_span, short_duration

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0, "just now"),
        (59, "just now"),
        (-5, "just now"),  # a clock a little ahead is not "in the future"
        (60, "1 min ago"),
        (3599, "59 min ago"),
        (3600, "1 h ago"),
        (86400, "1 day ago"),
        (10 * 86400, "10 days ago"),
    ],
)
def test_ago_never_says_zero_minutes(seconds, said):
    assert ago(NOW - timedelta(seconds=seconds), NOW) == said


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(45, "45s"), (60, "1min"), (725, "12min"), (11100, "3h05"), (2 * 86400 + 4 * 3600, "2d 4h")],
)
def test_short_duration(seconds, said):
    assert short_duration(seconds) == said


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        ([], ""),
        (["gpu003"], "gpu003"),
        (["gpu003", "gpu004"], "gpu003-gpu004"),
        (["gpu001", "gpu002", "gpu003", "cpu7"], "gpu001-gpu003, cpu7"),
        (["gpu009", "gpu010"], "gpu009-gpu010"),
        (["gpu9", "gpu010"], "gpu9, gpu010"),  # different widths: not one range
        (["hpc-01", "hpc-03"], "hpc-01, hpc-03"),
    ],
)
def test_node_span(nodes, said):
    assert node_span(nodes) == said
