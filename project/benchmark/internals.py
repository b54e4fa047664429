"""The harness's only imports from orchestration beyond its public API.

Everything else goes through ``start_workflow(s)``, ``@workflow``, the
``migrate`` and ``runworkers`` commands and plain SQL on the tables.
"""

from __future__ import annotations

from typing import Any

from orchestration.claim import claims, statements
from orchestration.conf import conf


def queue_database() -> str:
    """The alias the workers use (``ORCHESTRATION["DATABASE"]``): the scratch
    databases are created on its server, with its credentials."""
    return conf.DATABASE


def claim_sql_for_explain(batch: int) -> tuple[list[str], str, dict[str, Any]]:
    """The session settings the workers plan their claim under, then the claim
    of ``batch`` runs and its parameters, for ``EXPLAIN``."""
    statement, params = claims.claim_statement("benchmark-explain", None, [], batch)
    return [statements.INDEX_PLANS_ONLY], statement, params
