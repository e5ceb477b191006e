"""How the submit page shows the words of a decision: what a refusal or the preview writes
between backticks (`type: ai-training`, what to put in the descriptor) as code."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_SPAN = re.compile(r"`([^`]+)`")


@register.filter
def code_spans(text: object) -> SafeString:
    """`text` escaped, with each `…` span as <code>…</code>."""
    return mark_safe(_SPAN.sub(r"<code>\1</code>", escape(str(text))))  # noqa: S308 - escaped first
