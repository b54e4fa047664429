"""``DATABASE_ROUTERS = ["orchestration.routers.OrchestrationRouter"]``: the
app's tables live on ``ORCHESTRATION["DATABASE"]``, for every query.

The engine itself always names that alias; the router makes everything else
follow it too (the admin, ``Workflow.objects`` in user code, ``migrate``),
when a busy deployment gives the queue a PostgreSQL of its own.
"""

from __future__ import annotations

from typing import Any

from .conf import conf

APP_LABEL = "orchestration"


class OrchestrationRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return conf.DATABASE if model._meta.app_label == APP_LABEL else None

    db_for_write = db_for_read

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        if APP_LABEL in (obj1._meta.app_label, obj2._meta.app_label):
            return obj1._meta.app_label == obj2._meta.app_label or None
        return None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        return db == conf.DATABASE if app_label == APP_LABEL else None
