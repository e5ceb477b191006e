"""The task table of the workflow page, built as HTML here rather than in a template loop: a
1,000-task workflow has 1,000 rows, and the template took most of the page's time (docs/
workflows.md). Each row is what `templates/scheduling/workflow_status.html` showed; every
text from a user or a backend is escaped."""

from __future__ import annotations

from html import escape  # Django's adds a lazy-string wrapper per call: 10,000 calls a page

from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from scheduling.decisions import lifecycle
from scheduling.models import Task

OUTSIDE = "a task outside this workflow"
MORE = "the graph shows every dependency"
WHY_CHARS = 110  # a row's reason is cut here; the full text is its title


def rows_html(rows: list[tuple[Task, list[Task], list[int], int]], tasks_url: str) -> SafeString:
    """`rows`: (task, dependencies shown, ids shown of dependencies outside the workflow,
    how many more it has); a task's page is `tasks_url` + id + "/"."""
    out = []
    for task, deps, outside, more in rows:
        pk, shown = task.pk, task.display_state
        link = f"{tasks_url}{pk}/"
        exit_code = ""
        if task.exit_code is not None and task.state != lifecycle.SUCCEEDED:
            exit_code = f' <small class="muted">exit {task.exit_code}</small>'
        links = [f'<a href="{tasks_url}{d.pk}/">{escape(d.name)}</a>' for d in deps] + [
            f'<a href="{tasks_url}{i}/" title="{OUTSIDE}">#{i}</a>' for i in outside
        ]
        dep_cell = ", ".join(links) or '<span class="muted">—</span>'
        if more:
            dep_cell += f' <span class="muted" title="{MORE}">+{more} more</span>'
        skip = ""
        if task.fail_action == "skip":
            skip = ' <small class="muted" title="fail_action: skip">· skip</small>'
        reason = escape(task.reason)
        short = (
            task.reason
            if len(task.reason) <= WHY_CHARS
            else Truncator(task.reason).chars(WHY_CHARS)
        )
        out.append(
            f'<tr id="task-{pk}" data-state="{task.state}">'
            f'<td class="num"><a href="{link}">{pk}</a></td>'
            f'<td class="name"><a href="{link}">{escape(task.name)}</a></td>'
            f'<td class="state-cell nowrap"><span class="state state-{shown}">{shown}</span>'
            f"{exit_code}</td>"
            f'<td class="deps">{dep_cell}</td>'
            f'<td class="nowrap">{escape(task.queue.name)}</td>'
            f'<td class="nowrap attempts"><span class="n">{task.attempts}</span> '
            f'<span class="muted">of {task.retry_count + 1}</span>{skip}</td>'
            f'<td class="why" title="{reason}">{escape(short)}</td>'
            "</tr>"
        )
    return mark_safe("\n".join(out))  # noqa: S308 - every text escaped above
