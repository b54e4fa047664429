"""The operator's console: every workflow and step, and the repair actions.

Django's admin autodiscovery imports this module, which registers the one
``ModelAdmin``. The rest is cut by what it does, each module importing only
those listed before it:

- ``display``: badges (a pending workflow says why), moments, JSON, links;
- ``filters``: the list's filters; ``inlines``: a workflow's steps;
- ``actions``: retry, restart, cancel, requeue, as the Python API does them;
- ``forms`` and ``views``: the overview, step repairs and sending an event;
- ``workflow_admin``: ``WorkflowAdmin``, which puts them together;
- ``queue_admin``: ``WorkflowQueueAdmin``, the queues' flow control (pause, limits).
"""

from __future__ import annotations

from django.contrib import admin

from ..models import Workflow, WorkflowQueue
from .queue_admin import WorkflowQueueAdmin
from .workflow_admin import WorkflowAdmin

admin.site.register(Workflow, WorkflowAdmin)
admin.site.register(WorkflowQueue, WorkflowQueueAdmin)

__all__ = ["WorkflowAdmin", "WorkflowQueueAdmin"]
