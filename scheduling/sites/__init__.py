"""Sites as plain data (no Django): what `seed_demo` writes, and what tests, benchmarks and
the simulator run on without a database."""

from __future__ import annotations

from scheduling.sites.default import default_site
from scheduling.sites.types import POOL_KINDS, LeaseTemplate, PoolSpec, QuotaTemplate, Site

__all__ = ["POOL_KINDS", "LeaseTemplate", "PoolSpec", "QuotaTemplate", "Site", "default_site"]
