"""Status ``paused`` (``pause_workflow``) among the choices of ``workflows.status``.
Choices live in Django's state only: no SQL runs, so no lock is taken; the
column is a ``varchar(20)`` that already holds the word. The previous release's
workers claim only ``pending`` rows, so they never take a paused run."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0030_workflow_schedules"),
    ]

    operations = [
        migrations.AlterField(
            model_name="workflow",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                    ("paused", "Paused"),
                ],
                db_default="pending",
                default="pending",
                max_length=20,
            ),
        ),
    ]
