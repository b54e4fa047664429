from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "project.demo"
    label = "demo"
    verbose_name = "Demo workflows"

    def ready(self) -> None:
        from orchestration.benchmark import workflows  # noqa: F401  (registers the workflow `manage.py benchmark` runs)
