"""Retry policy: pure functions, no database."""

from __future__ import annotations

import random
import threading


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Delay before retrying after failed attempt number ``attempt`` (1-based).

    Exponential (base, 2*base, 4*base ...) capped at ``cap``, with "equal
    jitter": half the delay is fixed and half random, so retries of many
    workflows that failed together spread out but never fire at once.

    >>> backoff_seconds(1, base=1, cap=600, rng=random.Random(0)) <= 1
    True
    >>> backoff_seconds(30, base=1, cap=600, rng=random.Random(0)) <= 600
    True
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    ceiling = min(cap, base * 2 ** min(attempt - 1, 62))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def wait_to_reconnect(stop: threading.Event, failures: int, *, base: float = 0.5, cap: float = 30.0) -> bool:
    """Wait after the ``failures``-th failed try to reach the database, or
    until ``stop`` is set (then True). Jittered as ``backoff_seconds``: the
    threads that lost the server together do not come back in lock-step."""
    return stop.wait(backoff_seconds(failures, base, cap))


def should_retry(attempts: int, max_retries: int) -> bool:
    """Whether a workflow that failed its ``attempts``-th attempt gets another.

    The first attempt is not a retry, so at most ``max_retries + 1`` attempts.
    """
    return attempts <= max_retries
