"""The operator's console: every workflow and step, and the repair actions.

Django's admin autodiscovery imports this module, which registers the one
``ModelAdmin``. The rest is cut by what it does, each module importing only
those listed before it:

- ``display``: badges (a pending workflow says why), moments, JSON, links;
- ``filters``: the list's filters; ``steps``: a window of a workflow's steps;
- ``actions``: retry, restart, cancel, requeue, as the Python API does them;
- ``forms`` and ``views``: the overview, step repairs and sending an event;
- ``page``: the head of a run's page (its state, why, Retry / Restart / Cancel, its errors);
- ``limits``: the list's statement timeout;
- ``workflow_admin``: ``WorkflowAdmin``, which puts them together;
- ``workers``: ``WorkerAdmin``, the ``runworkers`` processes and what each holds;
- ``queue_admin``: ``WorkflowQueueAdmin``, the queues' flow control (pause, limits);
- ``schedule_admin``: ``WorkflowScheduleAdmin``, the schedules (make, pause, run now, backfill).
"""

from __future__ import annotations

from django.contrib import admin

from ..models import Workflow, WorkflowQueue, WorkflowSchedule, WorkflowWorker
from .queue_admin import WorkflowQueueAdmin
from .schedule_admin import WorkflowScheduleAdmin
from .workers import WorkerAdmin
from .workflow_admin import WorkflowAdmin

admin.site.register(Workflow, WorkflowAdmin)
admin.site.register(WorkflowWorker, WorkerAdmin)
admin.site.register(WorkflowQueue, WorkflowQueueAdmin)
admin.site.register(WorkflowSchedule, WorkflowScheduleAdmin)
# The site's index links to the overview (a page, not a model: the app list has
# no row for it), unless the project draws an index of its own.
if admin.site.index_template is None:
    admin.site.index_template = "admin/orchestration/site_index.html"

__all__ = ["WorkerAdmin", "WorkflowAdmin", "WorkflowQueueAdmin", "WorkflowScheduleAdmin"]
