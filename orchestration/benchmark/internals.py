"""The harness's only imports from orchestration beyond its public API.

Everything else goes through ``start_workflow(s)``, ``@workflow``, the
``migrate`` and ``runworkers`` commands and plain SQL on the tables. The core
modules are being reorganised: when a name below moves, this file is the one
to change.
"""

from __future__ import annotations

from typing import Any

from orchestration import queue, sql
from orchestration.conf import conf


def queue_database() -> str:
    """The alias the workers use (``ORCHESTRATION["DATABASE"]``): the scratch
    databases are created on its server, with its credentials."""
    return conf.DATABASE


def claim_sql_for_explain(batch: int) -> tuple[list[str], str, list[Any]] | None:
    """The session settings the workers plan their claim under, then the claim
    of ``batch`` runs and its parameters, for ``EXPLAIN``; None when the engine
    has no single claim statement to show."""
    if not hasattr(queue, "claim_statement"):
        return None
    statement, params = queue.claim_statement("benchmark-explain", None, batch)
    return [sql.INDEX_PLANS_ONLY], statement, params
