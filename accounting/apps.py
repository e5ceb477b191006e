from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"

    def ready(self) -> None:
        # Metering reacts to an attempt's end through the state service's hook: the engine
        # never calls accounting (docs/accounting.md).
        from accounting import allocation_selectors, budget, meter, selectors
        from accounting import tasks as _celery_tasks  # noqa: F401 - registers them
        from portal.selectors import provide_project_allocations, provide_storage_warnings
        from scheduling import usage

        usage.on_attempt_end(meter.after_attempts_end)
        usage.provide_budget_reader(budget.used_hours)
        # An allocation holds its project's new work outside its dates or over its budget.
        usage.provide_allocation_reader(allocation_selectors.allocation_hold)
        usage.provide_allocated_projects(allocation_selectors.allocated_projects)
        # The project page's soft-quota warnings: portal reads them through this reader and
        # never imports accounting.
        provide_storage_warnings(selectors.storage_warnings)
        provide_project_allocations(allocation_selectors.project_allocations)
