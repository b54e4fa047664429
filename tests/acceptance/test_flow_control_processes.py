"""Flow control across real ``runworkers`` processes: a sampler on a connection
of its own reads what runs every few milliseconds while they work."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestration import pause_queue, resume_queue, set_queue_limits, start_workflow, start_workflows
from orchestration.models import Workflow, WorkflowStatus
from tests.acceptance.test_runworkers import wait_for
from tests.support import other_connection, start_workers

pytestmark = pytest.mark.django_db(transaction=True)

RUNNING_BY_KEY = (
    "SELECT concurrency_key, count(*) FROM workflows WHERE queue = 'flow' AND status = 'running' GROUP BY 1"
)


class Sampler(threading.Thread):
    """Reads the running runs of queue ``flow`` by key, every few milliseconds, until stopped.

    A sample is stamped when its query was sent: what it read holds at some moment
    between that stamp and ``answered``, which under load can be much later."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, dict[str | None, int]]] = []
        self.answered: list[float] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        with other_connection() as conn:
            while not self._stopping.is_set():
                sent = time.monotonic()
                self.samples.append((sent, dict(conn.execute(RUNNING_BY_KEY).fetchall())))
                self.answered.append(time.monotonic())
                self._stopping.wait(0.003)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)

    def most_running(self, since: float = 0.0) -> int:
        return max((sum(counts.values()) for at, counts in self.samples if at >= since), default=0)

    def running_between(self, since: float, until: float) -> list[int]:
        """The runs running in each sample read wholly inside [since, until)."""
        return [
            sum(counts.values())
            for (sent, counts), answered in zip(self.samples, self.answered, strict=False)
            if since <= sent and answered < until
        ]


@pytest.fixture
def sampler() -> Iterator[Sampler]:
    sampler = Sampler()
    sampler.start()
    yield sampler
    sampler.stop()


def all_done(count: int) -> bool:
    return Workflow.objects.filter(queue="flow", status=WorkflowStatus.COMPLETED).count() == count


def start(processes: int, threads: int, workers: list[Any]) -> None:
    for _ in range(processes):
        workers.append(start_workers("--concurrency", str(threads), "--poll-interval", "0.1"))


def test_concurrency_limit__processes_with_spare_threads__never_run_more_than_it(workers, sampler):
    set_queue_limits("flow", concurrency=3)
    start_workflows("flow_hold", [{"seconds": 0.15}] * 30)
    start(3, 4, workers)  # 12 threads for 3 slots
    assert wait_for(lambda: all_done(30), timeout=90, interval=0.1)
    sampler.stop()
    assert sampler.most_running() == 3, f"{len(sampler.samples)} samples"
    assert not Workflow.objects.exclude(status=WorkflowStatus.COMPLETED).exists()


def test_concurrency_limit__short_runs_claimed_ahead_and_handed_over__never_run_more_than_it(workers, sampler):
    set_queue_limits("flow", concurrency=4)
    start_workflows("flow_hold", [{"seconds": 0}] * 1500)
    start(3, 4, workers)  # runs of a millisecond: claimed ahead, their slots handed over claim after claim
    assert wait_for(lambda: all_done(1500), timeout=90, interval=0.1)
    sampler.stop()
    assert 0 < sampler.most_running() <= 4, f"{len(sampler.samples)} samples"


def test_per_key_limit__never_two_runs_of_a_key_at_once__the_keys_run_side_by_side(workers, sampler):
    set_queue_limits("flow", key_concurrency=1)
    start_workflows("flow_hold", [{"seconds": 0.15, "key": key} for key in ("a", "b", "c") for _ in range(6)])
    start(2, 4, workers)
    assert wait_for(lambda: all_done(18), timeout=90, interval=0.1)
    sampler.stop()
    assert max(max(counts.values(), default=0) for _, counts in sampler.samples) == 1
    assert max(len(counts) for _, counts in sampler.samples) >= 2, "the keys ran one after another"


def test_rate_limit__no_window_of_a_second_holds_more_than_5_starts(workers):
    set_queue_limits("flow", rate_limit="5/s")
    started = start_workflows("flow_hold", [{}] * 30)
    start(2, 3, workers)
    assert wait_for(lambda: all_done(30), timeout=90, interval=0.2)
    starts = sorted(Workflow.objects.filter(pk__in=[w.pk for w in started]).values_list("started_at", flat=True))
    # The guarantee (README, "Flow control"): at most N claims in any window (t - period, t],
    # on the database server's clock; a run's started_at is its first claim's.
    gaps = [later - earlier for earlier, later in zip(starts, starts[5:], strict=False)]
    assert min(gaps) >= datetime.timedelta(seconds=1), min(gaps)
    assert starts[-1] - starts[0] >= datetime.timedelta(seconds=5)


def test_pause__nothing_is_claimed_while_paused__waits_wake_into_pending__all_completes_after_resume(workers, sampler):
    napping = start_workflow("flow_naps", {"seconds": 1})
    start(2, 2, workers)
    assert wait_for(lambda: Workflow.objects.filter(pk=napping.pk, waiting_for__isnull=False).exists())
    pause_queue("flow")
    time.sleep(0.3)  # every worker has read the pause (poll interval 0.1 s)
    paused_at = time.monotonic()
    held = start_workflows("flow_hold", [{"seconds": 0.05}] * 10)
    time.sleep(2)  # the nap ends meanwhile
    assert sampler.most_running(since=paused_at) == 0
    rows = Workflow.objects.filter(queue="flow")
    assert set(rows.values_list("status", flat=True)) == {WorkflowStatus.PENDING}
    assert not rows.filter(pk__in=[w.pk for w in held], attempts__gt=0).exists()
    napping.refresh_from_db()
    # Due: made so by a claim (run_after NULL), or about to be.
    assert napping.run_after is None or napping.run_after <= datetime.datetime.now(datetime.UTC), "woken, due"
    resume_queue("flow")
    assert wait_for(lambda: all_done(11), timeout=60, interval=0.1)


def test_limit_changed_at_run_time__applies_without_restarting_the_workers(workers, sampler):
    start(2, 4, workers)  # no limit yet: they claim with the plain statement
    start_workflows("flow_hold", [{"seconds": 0.1}] * 120)
    assert wait_for(lambda: sampler.most_running() >= 5, timeout=30, interval=0.05)
    set_queue_limits("flow", concurrency=2)
    limited_since = time.monotonic() + 0.1 + 0.5  # a poll interval, and the runs in flight finishing
    time.sleep(1.5)
    assert sampler.most_running(since=limited_since) <= 2
    raising_at = time.monotonic()
    set_queue_limits("flow", concurrency=4)
    raised_at = time.monotonic()
    assert wait_for(lambda: sampler.most_running(since=raised_at) >= 3, timeout=30, interval=0.05)
    assert wait_for(lambda: all_done(120), timeout=90, interval=0.1)
    sampler.stop()
    assert sampler.most_running(since=raised_at) <= 4
    limited = sampler.running_between(limited_since, raising_at)
    assert limited and max(limited) <= 2
