"""``ctx.patched``: versioned workflow code, decided from the run's history.

A run records, in ``workflows.patches``, each change id it took the new branch
of, with the number of the step that came next. How a call decides:

- the id is recorded: the run took the new branch before; it takes it again;
- else a step is recorded at or after the number the next step gets (a named
  row: the claim's unnamed placeholder is no history): the run passed this
  point on the code before the patch, so it takes the old branch;
- else the run reaches this point on the new code for the first time: the id
  is recorded (fenced by the lease, before anything of the new branch runs)
  and it takes the new branch.

The first call of an id in an attempt decides for the rest of it, as it
would in every replay. Markers take no step number, so removing a
``patched`` call once no run needs it shifts no step.
"""

from __future__ import annotations

from typing import Any

from ..claim.lease import Lease, RecordedStep
from ..errors import NonDeterministicWorkflow
from ..validation import validate_patch_id


class Patches:
    """The patch decisions of one attempt of a run."""

    def __init__(self, run: Lease) -> None:
        self._run = run
        self._decided: dict[str, bool] = {}
        self._recorded: dict[str, Any] | None = None  # read once an attempt, when a replay needs it

    def patched(self, change_id: str, number: int, history: dict[int, RecordedStep]) -> bool:
        validate_patch_id(change_id)
        decided = self._decided.get(change_id)
        if decided is None:
            decided = self._decided[change_id] = self._decide(change_id, number, history)
        return decided

    def deprecated(self, change_id: str, number: int, history: dict[int, RecordedStep]) -> None:
        if not self.patched(change_id, number, history):
            raise NonDeterministicWorkflow(
                f"Non-deterministic workflow: patch {change_id!r} is deprecated (only its new branch is left), "
                f"but this run passed it on the code before the patch (step {number} is recorded without it). "
                "Deploy deprecate_patch only once the runs started before the patch have finished."
            )

    def _decide(self, change_id: str, number: int, history: dict[int, RecordedStep]) -> bool:
        passed = any(step.name is not None for n, step in history.items() if n >= number)
        if not passed:
            self._run.record_patch(change_id, number)
            return True
        if self._recorded is None:
            self._recorded = self._run.recorded_patches()
        return change_id in self._recorded
