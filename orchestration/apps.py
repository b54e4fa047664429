from __future__ import annotations

import importlib.util

from django.apps import AppConfig


class OrchestrationConfig(AppConfig):
    name = "orchestration"
    verbose_name = "Orchestration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import pre_migrate
        from django.utils.module_loading import autodiscover_modules

        from . import checks  # registers the system checks

        pre_migrate.connect(checks.refuse_migrating_elsewhere, sender=self)

        if importlib.util.find_spec("django.tasks") is not None:  # Django >= 6.0
            from . import tasks  # registers the workflow type that runs @task functions

            if tasks.configured_backends():
                # A stored task path is resolved among the tasks made at start-up, never imported.
                autodiscover_modules("tasks")
        autodiscover_modules("workflows")
