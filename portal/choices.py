"""Django's `TextChoices` as a type checker should see it.

The type check runs without Django's stubs, so to it `models.TextChoices` is an unknown base
and `QUEUED = "queued", "Queued"` a tuple; at run time the metaclass makes each member the
string "queued". Under TYPE_CHECKING this is the str-valued enum Django builds; at run time it
is Django's own class, so models and migrations are unchanged.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:

    class TextChoices(enum.StrEnum):
        _value_: str
        label: str
        choices: ClassVar[list[tuple[str, str]]]
        values: ClassVar[list[str]]
        labels: ClassVar[list[str]]
        names: ClassVar[list[str]]

        @property
        def value(self) -> str: ...

else:
    from django.db.models import TextChoices

__all__ = ["TextChoices"]
