"""The submit page's live preview in real Chromium: before anything is submitted it names the
type (guessed, with its rule) and the queue, changes as the fields change, and what the
submit then stores is what it said."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "docs" / "screenshots"


def _log_in(page) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-demo-pass")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()


def test_the_preview_names_type_and_queue_before_submit_and_follows_the_fields(
    site, page, tmp_path
):
    _log_in(page)
    page.goto("/tasks/new/")
    page.evaluate("window.notReloaded = true")
    preview = page.locator("#submit-preview")
    page.get_by_label("Name").fill("md-simulation")
    page.get_by_label("Project").select_option("materials")
    page.get_by_label("Command").fill("python3 md.py")
    page.get_by_label("CPUs").fill("4")
    page.get_by_label("Walltime").fill("15m")

    # Left to Switchyard, a 4-CPU 15-minute job is guessed an agent task: said, with the rule
    # and the type that fits batch work better, before anything is submitted.
    expect(preview.locator(".preview-type")).to_contain_text("agent")
    expect(preview.locator(".preview-type")).to_contain_text("guessed")
    expect(preview.locator(".preview-type")).to_contain_text(
        "small request (4 CPUs ≤ 4, no GPUs) and walltime 15min (under 30min) → agent"
    )
    expect(preview.locator(".preview-queue")).to_contain_text("inference-agent")
    expect(preview.locator(".preview-others")).to_contain_text("type: hpc-simulation")
    expect(preview.locator(".preview-start")).to_contain_text("the pool has room for it now")
    page.screenshot(path=str(tmp_path / "submit-preview.png"), full_page=True)
    if os.environ.get("SWITCHYARD_UPDATE_SCREENSHOTS") == "1":  # refresh the docs' picture
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "submit-preview.png", SCREENSHOTS / "submit-preview.png")

    # A GPU count and a longer walltime: the guess, and the refusal that would follow, change.
    page.get_by_label("GPUs").fill("8")
    page.get_by_label("CPUs").fill("16")
    page.get_by_label("Walltime").fill("3h")
    expect(preview.locator(".preview-type")).to_contain_text("ai-inference")
    refusal = preview.locator(".preview-refusal")
    expect(refusal).to_contain_text("exceeds queue inference-agent's maximum of 1h")
    expect(refusal).to_contain_text("was guessed, not given")
    expect(refusal.locator("code", has_text="type: ai-training")).to_be_visible()

    # Back to the CPU job; one click on the preview's advice declares the type.
    page.get_by_label("GPUs").fill("0")
    page.get_by_label("CPUs").fill("4")
    page.get_by_label("Walltime").fill("15m")
    preview.get_by_role("button", name="use hpc-simulation").click()
    expect(page.get_by_label("Type")).to_have_value("hpc-simulation")
    expect(preview.locator(".preview-type")).to_contain_text("declared")
    expect(preview.locator(".preview-queue")).to_contain_text("hpc")
    expect(preview.locator("#preview-verdict")).to_be_visible()
    assert page.evaluate("window.notReloaded") is True  # updated in place, never reloaded

    # What the submit stores is what the preview said.
    page.locator("#submit").click()
    expect(page).to_have_url(re.compile(r"/tasks/\d+/$"))
    expect(page.locator("#routing-reason")).to_contain_text("queue hpc")
    expect(page.locator("dl.facts")).to_contain_text("hpc-simulation")

    # Submit again opens the fields as they were, the project chosen.
    page.locator("#submit-again").click()
    expect(page.get_by_label("Name")).to_have_value("md-simulation")
    expect(page.get_by_label("Project")).to_have_value("materials")
    expect(page.get_by_label("Type")).to_have_value("hpc-simulation")
    expect(preview.locator(".preview-queue")).to_contain_text("hpc")

    # A descriptor file chosen is what the preview reads then.
    yaml = (
        "apiVersion: switchyard/v1\nkind: Task\nname: from-file\nproject: climate\n"
        "resources: {cpus: 128}\nwalltime: 2h\ncommand: ['true']\n"
    )
    page.locator("#id_descriptor_file").set_input_files(
        files=[{"name": "t.yaml", "mimeType": "application/yaml", "buffer": yaml.encode()}]
    )
    expect(preview.locator("#preview-source")).to_contain_text("From the uploaded file")
    expect(preview.locator(".preview-type")).to_contain_text("no GPUs and 128 CPUs")


def test_on_a_phone_the_preview_sits_below_the_form_without_sideways_scroll(site, page):
    _log_in(page)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/tasks/new/")
    page.get_by_label("Name").fill("md-simulation")
    page.get_by_label("Command").fill("python3 md.py")
    preview = page.locator("#submit-preview")
    expect(preview.locator(".preview-queue")).to_contain_text("inference-agent")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    form_bottom = page.locator("#submit-form").bounding_box()
    box = preview.bounding_box()
    assert form_bottom is not None and box is not None
    assert box["y"] >= form_bottom["y"] + form_bottom["height"] - 1  # below, not beside
