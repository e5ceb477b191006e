"""What a lease does to the pools: lent nodes leave their pool for the borrower's, until an end.

Pure: the portal's view of the site and the local backend's own inventory both pass through
`lend()`; `place()` then only puts on a lent node work whose walltime ends before the lease
does (`fits_before`). docs/capacity.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from scheduling.decisions.types import NodeView


@dataclasses.dataclass(frozen=True, slots=True)
class Loan:
    """A lent node: the pool it serves now, and until when (epoch seconds)."""

    pool: str
    until: float


def lend(
    pools: Mapping[str, Sequence[NodeView]], loans: Mapping[str, Loan]
) -> dict[str, list[NodeView]]:
    """`pools` with every lent node (by name in `loans`) moved to its borrowing pool."""
    moved: dict[str, list[NodeView]] = {name: [] for name in pools}
    for name, nodes in pools.items():
        for node in nodes:
            loan = loans.get(node.name)
            if loan is None:
                moved[name].append(node)
            else:
                moved.setdefault(loan.pool, []).append(
                    dataclasses.replace(node, available_until=loan.until)
                )
    return moved
