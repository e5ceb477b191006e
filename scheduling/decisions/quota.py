"""Admission against quotas: may a task start now, must it wait, or is it refused?

A quota limits what one project (or one user within a project) holds at once in one queue:
GPUs, CPUs or running tasks. What a task "holds" is what was admitted and has not ended
(docs/policy.md). Over a quota, a task waits (`over_quota: queue`) or is refused
(`over_quota: reject`); a task that asks more than a quota allows at all is always refused.

Quotas lend (Kueue's cohorts): a project quota's `limit` is its nominal amount; with a
`borrowing_limit` the project may go that far over it on the unused nominal quota of the
other projects in the same queue (the cohort), each of which lends at most its
`lending_limit` (None: all it does not use). Borrowed room is never a lender's loss: a
lender within its nominal quota is admitted whatever others borrow, and gets the room back
as borrowed work ends (or, in a preemptible queue, by preempting it).
Pure: the engine passes the rules and the current use, read under a lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduling.decisions.humanize import count

RESOURCES = ("gpus", "cpus", "tasks", "gpu_hours", "core_hours")
# Budgets: what a scope used in the current period (settled usage records and what its
# running tasks have used so far), not what it holds at once.
BUDGETS = ("gpu_hours", "core_hours")
PERIODS = ("day", "week", "month")
_UNIT = {"gpus": "GPU", "cpus": "CPU", "tasks": "running task"}
_BUDGET_UNIT = {"gpu_hours": "GPU-hours", "core_hours": "core-hours"}
_PERIOD_TEXT = {"day": "today", "week": "this week", "month": "this month"}
# What may be lent and borrowed: what a scope holds at once, not a budget.
LENDABLE = ("gpus", "cpus", "tasks")
_UNITS = {"gpus": "GPUs", "cpus": "CPUs", "tasks": "running tasks"}


@dataclass(frozen=True, slots=True)
class QuotaRule:
    project: str
    queue: str
    resource: str  # gpus | cpus | tasks
    limit: int
    over_quota: str = "queue"  # queue: wait; reject: refuse
    user: str | None = None  # None: the whole project
    id: int | None = None
    period: str = "month"  # budgets only
    # Lending (project scope, LENDABLE resources): how far over `limit` the project may go
    # on others' unused quota (0: not at all), and how much of its own unused quota others
    # may borrow (None: all of it).
    borrowing_limit: int = 0
    lending_limit: int | None = None

    @property
    def lends(self) -> bool:
        return self.user is None and self.resource in LENDABLE

    def lendable(self, used: float) -> float:
        """What this scope lends now, using `used`: its unused nominal quota, at most its
        lending limit."""
        unused = max(0.0, self.limit - used)
        return unused if self.lending_limit is None else min(unused, self.lending_limit)

    @property
    def scope(self) -> tuple[str, str, str | None]:
        return (self.project, self.queue, self.user)

    def who(self) -> str:
        return f"{self.user} in project {self.project}" if self.user else f"project {self.project}"


@dataclass(frozen=True, slots=True)
class Ask:
    """What one task would hold once admitted."""

    project: str
    queue: str
    user: str
    gpus: int = 0
    cpus: int = 1

    def amount(self, resource: str) -> int:
        """What it adds to a resource; for a budget, 1 if the budget counts it at all."""
        return {
            "gpus": self.gpus,
            "cpus": self.cpus,
            "tasks": 1,
            "gpu_hours": int(self.gpus > 0),
            "core_hours": int(self.cpus > 0),
        }[resource]


@dataclass(frozen=True, slots=True)
class Usage:
    """What a scope (project, queue[, user]) holds now."""

    gpus: int = 0
    cpus: int = 0
    tasks: int = 0
    # Budgets: hours used in the current period (by the rule's period).
    gpu_hours: float = 0.0
    core_hours: float = 0.0

    def amount(self, resource: str) -> float:
        return getattr(self, resource)

    def plus(self, ask: Ask) -> Usage:
        return Usage(
            self.gpus + ask.gpus,
            self.cpus + ask.cpus,
            self.tasks + 1,
            self.gpu_hours,
            self.core_hours,
        )


@dataclass(frozen=True, slots=True)
class Admit:
    """Admitted; `borrowed` > 0: that much of `resource` is other projects' unused quota."""

    borrowed: int = 0
    resource: str | None = None

    @property
    def what(self) -> str:
        """`16 GPUs` of others' quota, or "" when nothing is borrowed."""
        if not self.borrowed or self.resource is None:
            return ""
        return f"{self.borrowed} {_unit(self.resource, self.borrowed)}"

    @property
    def text(self) -> str:
        """`runs on 16 borrowed GPUs`, or "" when nothing is borrowed."""
        if not self.borrowed or self.resource is None:
            return ""
        return f"runs on {self.borrowed} borrowed {_unit(self.resource, self.borrowed)}"


@dataclass(frozen=True, slots=True)
class Hold:
    """Wait until the quota has room; the reason names it with its numbers."""

    reason: str
    quota: int | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    reason: str
    field: str | None = None
    quota: int | None = None
    never: bool = False  # asks more than the quota allows at all


ADMIT = Admit()


def applicable(rules: Iterable[QuotaRule], ask: Ask) -> list[QuotaRule]:
    """The rules that count this task: its project's in its queue, and its user's."""
    return [
        r
        for r in rules
        if r.project == ask.project and r.queue == ask.queue and r.user in (None, ask.user)
    ]


def admit(
    ask: Ask,
    rules: Iterable[QuotaRule],
    usage: Mapping[tuple[str, str, str | None], Usage],
    *,
    cohort: Iterable[QuotaRule] = (),
) -> Admit | Hold | Reject:
    """Whether `ask` may be admitted now, given what each quota's scope holds (`usage`).

    Rules are checked in a fixed order (project rules before user rules, then by resource),
    so the reason given is stable. A task asking more than a limit is refused whatever the
    over-quota action, since waiting would never help. `cohort`: the same queue's quotas of
    the other projects, which lend to a rule with a borrowing limit (their use in `usage`).
    """
    held: Hold | None = None
    lenders = [r for r in cohort if r.lends and r.project != ask.project]
    borrowed, borrowed_resource = 0, None
    for rule in sorted(applicable(rules, ask), key=_rule_order):
        need = ask.amount(rule.resource)
        if need == 0:
            continue
        budget = rule.resource in BUDGETS
        field = (
            None
            if rule.resource == "tasks"
            else f"resources.{'gpus' if rule.resource == 'gpu_hours' else 'cpus'}"
            if budget
            else f"resources.{rule.resource}"
        )
        if budget:
            used = usage.get(rule.scope, Usage()).amount(rule.resource)
            if used < rule.limit:
                continue
            text = quota_text(rule, used)
            if rule.over_quota == "reject":
                return Reject(f"{text}; this budget refuses more work", field=field, quota=rule.id)
            if held is None:
                held = Hold(
                    f"{text}; it waits for the next period or a larger budget", quota=rule.id
                )
            continue
        used = usage.get(rule.scope, Usage()).amount(rule.resource)
        may_borrow = rule.lends and rule.borrowing_limit > 0
        peers = [r for r in lenders if r.resource == rule.resource and r.queue == rule.queue]
        ceiling = rule.limit + (
            min(rule.borrowing_limit, sum(_lends_at_most(r) for r in peers)) if may_borrow else 0
        )
        if need > ceiling:
            return Reject(
                f"asks {count(need, _UNIT[rule.resource])}, but {rule.who()} may hold at most "
                f"{count(ceiling, _UNIT[rule.resource])} in queue {rule.queue}"
                + (" with what it may borrow" if ceiling > rule.limit else ""),
                field=field,
                quota=rule.id,
                never=True,
            )
        if used + need <= rule.limit:
            continue
        text = quota_text(rule, used)
        if may_borrow:
            already = borrowing(rule, used)
            left = free_to_borrow(rule, peers, usage) - already  # what this task may borrow
            over = used + need - rule.limit  # what it would borrow in all, with this task
            if over <= rule.borrowing_limit and over - already <= left:
                if not borrowed:
                    borrowed = int(over - already)
                    borrowed_resource = rule.resource
                continue
            unit = _unit(rule.resource, 2)
            if over > rule.borrowing_limit:
                text += (
                    f"; it borrows {already:g} of at most {rule.borrowing_limit} {unit}, "
                    f"it asks {need}"
                )
            else:
                text += f"; the cohort has {max(0.0, left):g} {unit} to lend, it asks {need}"
        if rule.over_quota == "reject":
            return Reject(f"{text}; this quota refuses what is over it", field=field, quota=rule.id)
        if held is None:
            held = Hold(f"{text}; it waits for room", quota=rule.id)
    if held is not None:
        return held
    return Admit(borrowed, borrowed_resource) if borrowed else ADMIT


def free_to_borrow(
    rule: QuotaRule,
    cohort: Iterable[QuotaRule],
    usage: Mapping[tuple[str, str, str | None], Usage],
) -> float:
    """What `rule`'s project may borrow now: the cohort's lenders' unused nominal quota (each
    at most its lending limit), less what the other projects of the cohort already borrow."""
    lent, taken = 0.0, 0.0
    for peer in cohort:
        if peer.project == rule.project or peer.resource != rule.resource or not peer.lends:
            continue
        used = usage.get(peer.scope, Usage()).amount(peer.resource)
        lent += peer.lendable(used)
        taken += max(0.0, used - peer.limit)
    return max(0.0, lent - taken)


def borrowing(rule: QuotaRule, used: float) -> float:
    """How much of `used` is over the rule's nominal quota: borrowed."""
    return max(0.0, used - rule.limit) if rule.lends else 0.0


def _lends_at_most(rule: QuotaRule) -> int:
    return rule.limit if rule.lending_limit is None else min(rule.limit, rule.lending_limit)


def _unit(resource: str, amount: float) -> str:
    return _UNITS[resource] if amount != 1 else _UNIT[resource]


def quota_text(rule: QuotaRule, used: float) -> str:
    """`project materials uses 32/32 GPUs in queue training`; for a budget, `project
    materials used 130.5/100 GPU-hours in queue training this month`."""
    if rule.resource in BUDGETS:
        return (
            f"{rule.who()} used {used:g}/{rule.limit} {_BUDGET_UNIT[rule.resource]} in queue "
            f"{rule.queue} {_PERIOD_TEXT.get(rule.period, 'this ' + rule.period)}"
        )
    unit = {"gpus": "GPUs", "cpus": "CPUs", "tasks": "running tasks"}[rule.resource]
    return f"{rule.who()} uses {used}/{rule.limit} {unit} in queue {rule.queue}"


def lending_text(rule: QuotaRule, used: float) -> str:
    """What a lending quota adds to `quota_text`: `16 of it borrowed; may borrow up to 64
    GPUs over its quota, lends at most 16 of what it does not use`; "" for one that neither
    lends nor borrows."""
    if not rule.lends or (not rule.borrowing_limit and rule.lending_limit is None):
        return ""
    unit = _UNITS[rule.resource]
    parts = []
    if rule.borrowing_limit:
        taken = borrowing(rule, used)
        if taken:
            parts.append(f"{taken:g} of it borrowed from other projects' unused quota")
        parts.append(f"may borrow up to {rule.borrowing_limit} {unit} over its quota")
    lends = "all" if rule.lending_limit is None else f"at most {rule.lending_limit}"
    parts.append(f"lends {lends} of what it does not use")
    return "; ".join(parts)


def _rule_order(rule: QuotaRule) -> tuple:
    return (rule.user is not None, RESOURCES.index(rule.resource), rule.user or "")
