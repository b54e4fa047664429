from __future__ import annotations

import factory

from orchestration.models import StepStatus, Workflow, WorkflowSchedule, WorkflowStatus, WorkflowStep, WorkflowWorker


class WorkflowFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Workflow

    workflow_type = "three_steps"
    status = WorkflowStatus.PENDING
    input_data = factory.Sequence(lambda n: {"n": n})
    max_retries = 3


class WorkflowStepFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WorkflowStep

    workflow = factory.SubFactory(WorkflowFactory)
    step_number = factory.Sequence(lambda n: n + 1)
    step_name = factory.LazyAttribute(lambda step: f"step {step.step_number}")
    status = StepStatus.COMPLETED
    output_data = factory.LazyAttribute(lambda step: {"step": step.step_number})


class WorkflowWorkerFactory(factory.django.DjangoModelFactory):
    """A worker process's row (``runworkers`` writes its own)."""

    class Meta:
        model = WorkflowWorker

    id = factory.Sequence(lambda n: f"host-{n}:{1000 + n}:cafe{n:04x}")
    host = factory.Sequence(lambda n: f"host-{n}")
    pid = factory.Sequence(lambda n: 1000 + n)
    concurrency = 1
    version = "test"


class WorkflowScheduleFactory(factory.django.DjangoModelFactory):
    """A schedule's row as ``orchestration.schedule`` writes one (its checks skipped:
    give it a registered type), its ticks counted from ``active_since``."""

    class Meta:
        model = WorkflowSchedule

    name = factory.Sequence(lambda n: f"schedule-{n}")
    workflow_type = "echo"
    cron = "0 * * * *"
    timezone = "UTC"
