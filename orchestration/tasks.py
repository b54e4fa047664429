"""Django's Tasks framework backend: ``@task`` functions run by ``runworkers``.

    TASKS = {"default": {"BACKEND": "orchestration.tasks.WorkflowBackend"}}

A task becomes a one-step workflow of the reserved type ``django.tasks`` whose
input holds the task's import path and its JSON arguments. Workers run it like
any workflow (claim, heartbeat, retries with backoff, the admin), so a task is
retried up to ``max_retries`` times and its body runs at least once: make it
idempotent, or raise ``PermanentError`` to fail it without retries.

Needs Django 6.0 or newer; on older versions importing this module raises
ImportError and the rest of the package works without it.
"""

from __future__ import annotations

import datetime
import inspect
import traceback
import uuid
from typing import TYPE_CHECKING, Any

try:
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError as exc:  # Django < 6.0
    import django

    raise ImportError(
        f"orchestration.tasks is the backend for Django's Tasks framework (django.tasks), which needs "
        f"Django 6.0 or newer; this is Django {django.get_version()}. Remove it from TASKS, or upgrade "
        "Django. Workflows (@workflow, start_workflow, runworkers) work without it."
    ) from exc

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from .decorator import workflow
from .errors import (
    PERMANENT_ERRORS,
    ControlFlow,
    InvalidWorkflowInput,
    OrchestrationError,
    UnknownWorkflowType,
    WorkflowCancelled,
    class_path,
)
from .registry import add_queue_source, reserve, starting_reserved
from .validation import STEP_NAME_MAX_LENGTH, NotJSONSerializable, to_json_value, validate_queue

if TYPE_CHECKING:
    from .ctx.context import WorkflowContext
    from .models import Workflow

#: The workflow type under which every task runs.
TASK_WORKFLOW_TYPE = "django.tasks"

_OPTIONS = ("MAX_RETRIES",)

_STATUSES = {
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
    "paused": TaskResultStatus.READY,  # held by an operator; it runs once resumed
}


class UnknownTask(UnknownWorkflowType):
    """The task is not registered: no module imported by this process defines it."""


#: The tasks of this backend by their path, registered as Django makes them (``WorkflowBackend.validate_task``).
_registered: dict[str, Task[Any, Any]] = {}


class WorkflowBackend(BaseTaskBackend):
    """Stores tasks as workflows in PostgreSQL; ``runworkers`` runs them.

    ``QUEUES`` (default ``["default"]``; empty allows any) are the queue names
    tasks may use; ``OPTIONS = {"MAX_RETRIES": n}`` sets their retries (default
    ``ORCHESTRATION["DEFAULT_MAX_RETRIES"]``). Django's priorities (-100 to 100,
    higher first) are the workflows' own, so tasks and workflows share one order.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        """Store a run of ``task``; inside ``transaction.atomic()`` workers see it after commit."""
        self._require_app()
        from .api import start_workflow

        self.validate_task(task)
        run_after = task.run_after
        arguments = [_argument(value, f"Argument {n} of task {task.module_path!r}") for n, value in enumerate(args)]
        keywords = {
            name: _argument(value, f"Keyword argument {name!r} of task {task.module_path!r}")
            for name, value in kwargs.items()
        }
        _check_call(task, arguments, keywords)
        with starting_reserved(TASK_WORKFLOW_TYPE):
            row = start_workflow(
                TASK_WORKFLOW_TYPE,
                {
                    "task": task.module_path,
                    "args": arguments,
                    "kwargs": keywords,
                    "backend": self.alias,
                    "run_after": None if run_after is None else run_after.isoformat(),
                },
                run_after=run_after,
                queue=task.queue_name,
                priority=task.priority,
                max_retries=self.options.get("MAX_RETRIES"),
            )
        result = _task_result(row, last_attempted_at=None)
        task_enqueued.send(type(self), task_result=result)
        return result

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks of ``task``, which it runs on every task made for this
        backend (``@task`` at import, ``.using()``); a valid one is registered,
        and only registered tasks are ever run or resolved from a stored path."""
        super().validate_task(task)
        _registered.setdefault(task.module_path, task)

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The task's state read from its workflow row; ``TaskResultDoesNotExist`` if none."""
        self._require_app()
        return _task_result(*_read_row(result_id))

    def check(self, **kwargs: Any) -> list[Any]:
        from .checks import check_database

        problems = list(super().check(**kwargs))
        where = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("orchestration"):
            problems.append(checks.Error(self._not_installed(), hint=_INSTALL_HINT, id="orchestration.E010"))
            # With the app installed its own checks report the database.
            problems.extend(check_database())
        for queue in sorted(self.queues):
            try:
                validate_queue(queue)
            except ValueError as exc:
                problems.append(checks.Error(f"{where}['QUEUES']: {exc}", id="orchestration.E011"))
        unknown = sorted(set(self.options) - set(_OPTIONS))
        if unknown:
            problems.append(
                checks.Warning(
                    f"{where}['OPTIONS'] has unknown keys {', '.join(map(repr, unknown))}.",
                    hint=f"Known options: {', '.join(_OPTIONS)}.",
                    id="orchestration.W010",
                )
            )
        max_retries = self.options.get("MAX_RETRIES")
        if max_retries is not None and (
            isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0
        ):
            problems.append(
                checks.Error(
                    f"{where}['OPTIONS']['MAX_RETRIES'] is {max_retries!r}; it must be an integer >= 0.",
                    id="orchestration.E012",
                )
            )
        return problems

    def _require_app(self) -> None:
        # Without the app its models cannot even be imported; say why instead.
        if not apps.is_installed("orchestration"):
            raise ImproperlyConfigured(f"{self._not_installed()} {_INSTALL_HINT}")

    def _not_installed(self) -> str:
        return (
            f"TASKS[{self.alias!r}] uses orchestration.tasks.WorkflowBackend, but 'orchestration' is not in "
            "INSTALLED_APPS: its tables would not exist and no worker could run the tasks."
        )


_INSTALL_HINT = "Add 'orchestration' to INSTALLED_APPS, then run `manage.py migrate`."


def _check_call(task: Task[Any, Any], args: Any, kwargs: Any) -> None:
    """Refuse arguments the task's function cannot be called with (a task's
    declared input is its signature) before anything is written, not when a
    worker calls it."""
    context = (None,) if task.takes_context else ()
    try:
        inspect.signature(task.func).bind(*context, *args, **kwargs)
    except TypeError as exc:
        raise InvalidWorkflowInput(f"Task {task.module_path!r} cannot be called with these arguments: {exc}.") from None


def _argument(value: Any, what: str) -> Any:
    """``value`` as the task will receive it, or a clear error before anything is written."""
    try:
        value = normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise NotJSONSerializable(
            f"{what} is not JSON-serialisable ({exc}); pass plain data (str, int, float, bool, None, lists, "
            "dicts), for example a primary key instead of a model instance."
        ) from None
    return to_json_value(value, what)


def _read_row(result_id: str) -> tuple[Workflow, datetime.datetime | None]:
    from django.db.models import OuterRef, Subquery

    from .conf import conf
    from .models import Workflow, WorkflowStep

    try:
        pk = uuid.UUID(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None
    # The step's start is the start of the attempt that last ran the task body.
    step_started = WorkflowStep.objects.filter(workflow=OuterRef("pk"), step_number=1).values("started_at")
    row = (
        Workflow.objects.using(conf.DATABASE)
        .filter(pk=pk, workflow_type=TASK_WORKFLOW_TYPE)
        .annotate(step_started_at=Subquery(step_started[:1]))
        .first()
    )
    if row is None:
        raise TaskResultDoesNotExist(result_id)
    return row, row.step_started_at


def _task_result(row: Workflow, last_attempted_at: datetime.datetime | None) -> TaskResult[Any, Any]:
    data = _task_input(row.input_data)
    status = _STATUSES[row.status]
    result: TaskResult[Any, Any] = TaskResult(
        task=_load_task(data, row),
        id=str(row.pk),
        status=status,
        enqueued_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        last_attempted_at=last_attempted_at or (row.started_at if row.attempts else None),
        args=data["args"],
        kwargs=data["kwargs"],
        backend=data["backend"],
        errors=[] if status == TaskResultStatus.SUCCESSFUL else _errors(row),
        # Django counts attempts as len(worker_ids); the row keeps only the
        # latest worker, so it stands for every attempt.
        worker_ids=[row.worker_id] * row.attempts if row.worker_id else [],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", row.output_data)
    return result


def _task_input(data: Any) -> dict[str, Any]:
    """The stored input, checked: rows inserted by SQL need only ``task``."""
    if not isinstance(data, dict) or not isinstance(data.get("task"), str):
        raise InvalidWorkflowInput(
            f'A {TASK_WORKFLOW_TYPE} workflow needs the input {{"task": "module.function", "args": [...], '
            f'"kwargs": {{...}}}}, not {data!r}.'
        )
    checked = {"args": [], "kwargs": {}, "backend": "default", "run_after": None, **data}
    if not isinstance(checked["args"], list) or not isinstance(checked["kwargs"], dict):
        raise InvalidWorkflowInput(f"The task input's args must be a list and kwargs an object, not {data!r}.")
    return checked


def _load_task(data: dict[str, Any], row: Workflow) -> Task[Any, Any]:
    path = data["task"]
    # Never imported from here: a stored path naming any module would run that module's code.
    task = _registered.get(path)
    if task is None:
        raise UnknownTask(
            f"Task {path!r} is not registered in this process: no @task function of this backend has that "
            "path among the modules imported at start-up (installed apps' tasks.py, and what they import)."
        )
    run_after = data["run_after"]
    try:
        return task.using(
            priority=max(TASK_MIN_PRIORITY, min(TASK_MAX_PRIORITY, row.priority)),
            queue_name=row.queue,
            run_after=None if run_after is None else datetime.datetime.fromisoformat(run_after),
            backend=data["backend"],
        )
    except InvalidTask:  # settings changed since it was enqueued (a queue removed ...)
        return task


def _errors(row: Workflow) -> list[TaskError]:
    """The latest attempt's error: the row keeps only that one."""
    if row.status == "cancelled":
        return [TaskError(exception_class_path=class_path(WorkflowCancelled), traceback=row.error_message or "")]
    if not row.error_message:
        return []
    # No class: an error the engine recorded (a worker that died leaves its
    # message beside an older attempt's traceback), or one from before the column.
    if row.error_class is None:
        return [TaskError(exception_class_path=class_path(OrchestrationError), traceback=row.error_message)]
    return [TaskError(exception_class_path=row.error_class, traceback=row.error_traceback or "")]


def configured_backends() -> list[dict[str, Any]]:
    """The ``TASKS`` entries whose backend is this one (or a subclass of it)."""
    ours = []
    for params in getattr(settings, "TASKS", {}).values():
        try:
            backend = import_string(params["BACKEND"])
        except (ImportError, KeyError):
            continue  # Django's own checks report it
        if isinstance(backend, type) and issubclass(backend, WorkflowBackend):
            ours.append(params)
    return ours


def _task_queues() -> list[str]:
    """The queues of every TASKS backend of ours, so ``runworkers --queues`` accepts them."""
    return [queue for params in configured_backends() for queue in params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME])]


add_queue_source(_task_queues)


# -- the worker's side ---------------------------------------------------------


@workflow(TASK_WORKFLOW_TYPE)
def run_task(ctx: WorkflowContext, data: Any) -> Any:
    """The reserved workflow: one step that calls the task."""
    path = _task_input(data)["task"]
    name = path if len(path) <= STEP_NAME_MAX_LENGTH else "..." + path[-(STEP_NAME_MAX_LENGTH - 3) :]
    return ctx.step(name, _call_task, str(ctx.workflow_id))


reserve(TASK_WORKFLOW_TYPE, "the Tasks backend (task.enqueue())")


def _call_task(result_id: str) -> Any:
    from .retry import should_retry

    row, last_attempted_at = _read_row(result_id)
    result = _task_result(row, last_attempted_at)
    task = result.task
    sender = type(task_backends[result.backend])
    task_started.send(sender, task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        try:
            value = normalize_json(value)
        except (TypeError, ValueError) as exc:
            raise NotJSONSerializable(f"The return value of task {task.module_path!r} is not JSON: {exc}") from None
        # task_finished's receivers read it as get_result will: as stored.
        value = to_json_value(value, lambda: f"The return value of task {task.module_path!r}")
    except ControlFlow:
        raise
    except BaseException as exc:  # fails the attempt like any error (see worker.execution)
        # Django's task_finished means finished for good, not "will be retried".
        if isinstance(exc, PERMANENT_ERRORS) or not should_retry(row.attempts, row.max_retries):
            _finish(result, TaskResultStatus.FAILED)
            # This attempt's error replaces the previous one, as it will on the row.
            result.errors[:] = [
                TaskError(
                    exception_class_path=class_path(type(exc)), traceback="".join(traceback.format_exception(exc))
                )
            ]
            task_finished.send(sender, task_result=result)
        raise
    _finish(result, TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender, task_result=result)
    return value


def _finish(result: TaskResult[Any, Any], status: TaskResultStatus) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())


__all__ = ["TASK_WORKFLOW_TYPE", "UnknownTask", "WorkflowBackend"]
