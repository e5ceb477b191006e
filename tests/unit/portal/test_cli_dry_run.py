"""`switchyard submit --dry-run` against a live portal: the preview as a person reads it, the
exit codes of a refusal, and nothing stored."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from switchyard_cli import cli
from switchyard_cli.client import BAD_INPUT, CONFLICT, OK

from portal.models import AuditEvent
from scheduling.models import Quota, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import descriptor

pytestmark = pytest.mark.django_db(transaction=True)

TRAINING = descriptor(
    type="ai-training", resources={"gpus": 8, "cpus": 16}, walltime="3h", estimate="3h"
)


def _file(tmp_path, doc: dict, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if name.endswith(".yaml") else json.dumps(doc))
    return str(path)


def test_it_shows_type_queue_quotas_and_start_and_submits_nothing(cli_portal, tmp_path, capsys):
    audit = AuditEvent.objects.count()
    assert cli.main(["submit", "--dry-run", _file(tmp_path, TRAINING)]) == OK
    shown = capsys.readouterr().out
    assert "dry run: nothing is submitted" in shown
    assert "type:    ai-training (declared)" in shown
    assert "queue:   training\n         rule 10: type ai-training → queue training" in shown
    assert "quotas:  project materials uses 0/32 GPUs in queue training: room for 32" in shown
    assert "its quota has room now" in shown
    assert "start:   at once: the pool has room for it now" in shown
    assert "it would be accepted" in shown
    assert Task.objects.count() == 0 and AuditEvent.objects.count() == audit


def test_a_guessed_type_is_named_with_its_rule_and_what_to_declare(cli_portal, tmp_path, capsys):
    assert cli.main(["submit", "--dry-run", _file(tmp_path, descriptor(), "job.json")]) == OK
    shown = capsys.readouterr().out
    assert "type:    agent (guessed)" in shown and "→ agent" in shown
    assert "or declare `type: hpc-simulation` (queue hpc takes it)" in shown


def test_the_json_output_is_the_apis_preview_and_matches_the_submit(cli_portal, tmp_path, capsys):
    job = _file(tmp_path, TRAINING)
    assert cli.main(["-o", "json", "submit", "--dry-run", job]) == OK
    preview = json.loads(capsys.readouterr().out)
    assert cli.main(["-o", "json", "submit", job]) == OK
    task = Task.objects.get(pk=json.loads(capsys.readouterr().out)["id"])
    assert (preview["type"], preview["queue"]) == (task.type, task.queue.name)


def test_a_refusal_exits_as_the_submit_would_with_its_error(cli_portal, tmp_path, capsys):
    refused = descriptor(resources={"gpus": 8, "cpus": 16}, walltime="3h")
    assert cli.main(["submit", "--dry-run", _file(tmp_path, refused)]) == BAD_INPUT
    captured = capsys.readouterr()
    assert "type:    ai-inference (guessed)" in captured.out
    assert "it would be refused" in captured.out
    assert "walltime 3h exceeds queue inference-agent's maximum of 1h" in captured.err
    assert "  walltime: " in captured.err
    assert Task.objects.count() == 0


def _training_quota(**fields) -> None:
    """Materials' 8 GPUs in queue training (none borrowed), all taken by a running task."""
    quota = Quota.objects.filter(project__slug="materials", queue__name="training")
    assert quota.filter(resource="gpus").update(limit=8, borrowing_limit=0, **fields) == 1
    site_view_invalidate()
    running = descriptor(**{**TRAINING, "name": "running"})
    assert cli.main(["submit", _file(Path(tempfile.mkdtemp()), running)]) == OK
    Task.objects.update(admitted=True, state="running")


def test_a_held_task_says_it_waits_for_its_quota(cli_portal, tmp_path, capsys):
    _training_quota()
    capsys.readouterr()
    assert cli.main(["submit", "--dry-run", _file(tmp_path, TRAINING)]) == OK
    shown = capsys.readouterr().out
    assert "room for 0 more GPUs" in shown and "it waits for room" in shown
    assert "start:   waits for its quota first" in shown
    assert Task.objects.count() == 1


def test_a_workflow_is_not_sent(cli_portal, tmp_path, capsys):
    flow = {"apiVersion": "switchyard/v1", "kind": "Workflow", "name": "w", "tasks": []}
    assert cli.main(["submit", "--dry-run", _file(tmp_path, flow)]) == BAD_INPUT
    assert "--dry-run previews one task" in capsys.readouterr().err


def test_dry_run_and_wait_do_not_go_together(capsys):
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["submit", "--dry-run", "--wait", "job.yaml"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_quota_that_refuses_exits_as_the_submit_would(cli_portal, tmp_path, capsys):
    _training_quota(over_quota="reject")
    job = _file(tmp_path, TRAINING)
    assert cli.main(["submit", "--dry-run", job]) == CONFLICT
    captured = capsys.readouterr()
    assert "type:    ai-training (declared)" in captured.out
    assert "it would be refused" in captured.out and "over" in captured.err
    assert cli.main(["submit", job]) == CONFLICT
    assert Task.objects.count() == 1
