import random
import threading

import pytest

from orchestration.retry import backoff_seconds, should_retry, wait_to_reconnect


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "ceiling"),
    [(1, 1, 600, 1), (2, 1, 600, 2), (3, 1, 600, 4), (10, 1, 600, 512), (11, 1, 600, 600), (500, 2, 60, 60)],
)
def test_backoff__doubles_per_attempt_up_to_the_cap(attempt, base, cap, ceiling):
    rng = random.Random(attempt)
    delays = [backoff_seconds(attempt, base, cap, rng) for _ in range(200)]
    assert all(ceiling / 2 <= delay <= ceiling for delay in delays)


def test_backoff__is_jittered():
    rng = random.Random(1)
    assert len({backoff_seconds(5, 1, 600, rng) for _ in range(20)}) == 20


def test_backoff__rejects_attempt_zero():
    with pytest.raises(ValueError):
        backoff_seconds(0, 1, 600)


@pytest.mark.parametrize(
    ("attempts", "max_retries", "expected"),
    [(1, 0, False), (1, 3, True), (3, 3, True), (4, 3, False)],
)
def test_should_retry__allows_max_retries_plus_one_attempts(attempts, max_retries, expected):
    assert should_retry(attempts, max_retries) is expected


def test_retry_module_examples_hold():
    import doctest

    from orchestration import retry

    assert doctest.testmod(retry).failed == 0


class WaitsRecorded(threading.Event):
    """An event never set, which keeps how long each wait would have been."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        return False


def test_wait_to_reconnect__threads_that_failed_together_wait_different_times_within_the_backoff():
    stop = WaitsRecorded()
    for _ in range(20):
        wait_to_reconnect(stop, 3)
    assert len(set(stop.waits)) == 20
    assert all(1.0 <= wait <= 2.0 for wait in stop.waits)


def test_wait_to_reconnect__is_capped():
    stop = WaitsRecorded()
    wait_to_reconnect(stop, 50, base=0.1, cap=1.0)
    assert 0.5 <= stop.waits[0] <= 1.0


def test_wait_to_reconnect__returns_at_once_when_stopped():
    stop = threading.Event()
    stop.set()
    assert wait_to_reconnect(stop, 10) is True
