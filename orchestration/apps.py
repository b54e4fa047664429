from __future__ import annotations

from django.apps import AppConfig


class OrchestrationConfig(AppConfig):
    name = "orchestration"
    verbose_name = "Orchestration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from . import checks  # noqa: F401  (registers the system checks)

        autodiscover_modules("workflows")
