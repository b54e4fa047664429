"""``fork_workflow``: a new run that starts from another run's checkpoints.

The fork is a run of the same type, input and options, whose steps before
``from_step`` are copies of the original's checkpoints (completed, with their
outputs and timings) and whose patches (``ctx.patched``) reached before that
step are the original's too, so it replays them and runs from ``from_step`` on
the code deployed now. The original is only read; the fork links to it
(``forked_from``). Steps copied share what they did: a copied ``start_child``
step returns the original's child, a copied ``wait_for_event`` its payload.
The fork waits for such a child as the original does, and is woken when it
ends (``waits.wake_forks``), whatever became of the original: starting
another child would do again the work of a step the fork did not re-run.
"""

from __future__ import annotations

from django.db import transaction

from .api import start_workflow
from .conf import conf
from .errors import InvalidWorkflowInput
from .models import StepStatus, Workflow, WorkflowStep
from .transitions import WorkflowRef, completed_in_a_row, completed_range, workflow_id_of

_COPIED = ("step_number", "step_name", "output_data", "started_at", "completed_at", "attempts")


def fork_workflow(workflow: WorkflowRef, from_step: int) -> Workflow:
    """Start a new run of ``workflow``'s type and input whose steps before
    ``from_step`` are copied from ``workflow`` as checkpoints, so it runs from
    step ``from_step`` on (1: from scratch). Every step before ``from_step``
    must be completed in ``workflow``; the original is left untouched."""
    if isinstance(from_step, bool) or not isinstance(from_step, int):
        raise InvalidWorkflowInput(f"from_step must be a step number (an integer >= 1), not {from_step!r}.")
    alias = conf.DATABASE
    workflow_id = workflow_id_of(workflow)
    try:
        original = Workflow.objects.using(alias).get(pk=workflow_id)
    except Workflow.DoesNotExist:
        raise Workflow.DoesNotExist(f"No workflow {workflow_id} to fork.") from None
    with transaction.atomic(using=alias):
        # Read in the transaction that makes the fork, which is claimed only with its copies.
        in_a_row = completed_in_a_row(original.pk)
        if not 1 <= from_step <= in_a_row + 1:
            raise InvalidWorkflowInput(
                f"Cannot fork workflow {original.pk} from step {from_step}: a fork copies the steps before it, "
                f"which must be completed; {completed_range(in_a_row)}, so from_step must be "
                f"between 1 and {in_a_row + 1}."
            )
        completed = WorkflowStep.objects.using(alias).filter(workflow_id=original.pk, status=StepStatus.COMPLETED)
        steps = completed.filter(step_number__lt=from_step).values(*_COPIED)
        fork = start_workflow(
            original.workflow_type,
            original.input_data,
            queue=original.queue,
            priority=original.priority,
            max_retries=original.max_retries,
            timeout=original.timeout,
            concurrency_key=original.concurrency_key,
        )
        patches = {change: n for change, n in (original.patches or {}).items() if n < from_step} or None
        fork.forked_from_id, fork.current_step, fork.patches = original.pk, from_step - 1, patches
        Workflow.objects.using(alias).filter(pk=fork.pk).update(
            forked_from=original.pk, current_step=from_step - 1, patches=patches
        )
        WorkflowStep.objects.using(alias).bulk_create(
            WorkflowStep(workflow_id=fork.pk, status=StepStatus.COMPLETED, **{k: step[k] for k in _COPIED})
            for step in steps
        )
    return fork
