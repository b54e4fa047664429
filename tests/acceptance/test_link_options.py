"""The options a ``runworkers`` process gives its connections so that it gives
up a silent link to the database (see tests/fault_injection/test_silent_link.py
for a link that goes silent), and the project's own, which win."""

from __future__ import annotations

import pytest

from orchestration import start_workflow
from orchestration.models import Workflow
from orchestration.worker.links import link_options
from tests.support import database_url, run_burst, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = [*link_options(300)]
STUCK_AFTER = 60


def parameters_seen_by_a_worker(url: str) -> dict[str, str]:
    run = start_workflow("connection_parameters", NAMES)
    result = run_burst(env=worker_env(DATABASE_URL=url, ORCHESTRATION_STUCK_AFTER=str(STUCK_AFTER)))
    assert result.returncode == 0, result.stderr
    return Workflow.objects.get(pk=run.pk).output_data


def test_worker_connections__carry_the_link_options_of_a_quarter_of_stuck_after():
    seen = parameters_seen_by_a_worker(database_url())
    assert seen == {name: str(value) for name, value in link_options(STUCK_AFTER).items()}


def test_worker_connections__keep_each_link_option_the_database_url_sets():
    seen = parameters_seen_by_a_worker(database_url(keepalives_idle="60", tcp_user_timeout="0"))
    ours = {name: str(value) for name, value in link_options(STUCK_AFTER).items()}
    assert seen == {**ours, "keepalives_idle": "60", "tcp_user_timeout": "0"}
