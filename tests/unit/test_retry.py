import random

import pytest

from orchestration.retry import backoff_seconds, should_retry


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
