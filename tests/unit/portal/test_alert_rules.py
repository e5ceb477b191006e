"""The alert rules shipped in docker/prometheus/: valid for promtool, each alert unit-tested
by a case that makes it fire (docs/operations.md, "Alert rules"). Debian's promtool comes
with the prometheus package (`make system-deps`); without it this skips here, fails in CI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.servers import need

RULES = ROOT / "docker" / "prometheus"


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    need("Debian's promtool (the prometheus package; make test installs it)", binary)
    return subprocess.run(
        [str(binary), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def alert_names(rules: dict) -> set[str]:
    return {
        rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule
    }


def test_promtool_accepts_the_rules_and_the_example_configuration():
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


def test_every_alert_has_a_case_that_makes_it_fire():
    rules = yaml.safe_load((RULES / "alerts.yml").read_text())
    cases = yaml.safe_load((RULES / "alerts_test.yml").read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert alert_names(rules) == fired
    assert alert_names(rules) >= {
        "SwitchyardNodeOutOfService",
        "SwitchyardAgentWaitOver30s",
        "SwitchyardTrainingWaitOverBound",
        "SwitchyardWorkerMissing",
        "SwitchyardBeatMissing",
        "SwitchyardMeteringLag",
        "SwitchyardReconciliationMismatch",
        "SwitchyardBackendErroring",
    }


def test_the_rules_pass_their_unit_tests():
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout + tested.stderr


def test_a_rule_that_no_longer_fires_fails_its_unit_test(tmp_path):
    for name in ("alerts.yml", "alerts_test.yml"):
        shutil.copy(RULES / name, tmp_path / name)
    rules = tmp_path / "alerts.yml"
    rules.write_text(rules.read_text().replace('{type="agent"}) > 30', '{type="agent"}) > 300'))
    tested = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert tested.returncode != 0
    assert "SwitchyardAgentWaitOver30s" in tested.stdout + tested.stderr
