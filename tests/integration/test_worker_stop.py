"""A worker's stop ends its background threads at once: the NOTIFY listener
is woken from its wait instead of running out its timeout, so that a
``runworkers`` (and every test that runs one) does not take a second more
to exit."""

from __future__ import annotations

import time

import pytest

from orchestration.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_burst_worker__with_nothing_due__stops_without_waiting_out_the_listeners_timeout():
    worker = Worker(concurrency=1, burst=True)
    started = time.monotonic()
    assert worker.run() == 0
    assert time.monotonic() - started < 1.0  # less than the listener's wait, which times out after a second
