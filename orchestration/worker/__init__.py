"""The ``runworkers`` process, cut by job: ``process`` (lifecycle and signals),
``dispatch`` (the claim hand-off between threads), ``services`` (heartbeat,
stuck sweep, scheduler, listener) and ``execution`` (one attempt of a run)."""

from .dispatch import CLAIM_AHEAD_TIMEOUT, CLAIM_AHEAD_WHILE_RUNS_UNDER, MOST_CLAIMED_AHEAD_A_THREAD, Dispatcher
from .execution import Outcome, execute
from .process import Worker, worker_identity

__all__ = [
    "CLAIM_AHEAD_TIMEOUT",
    "CLAIM_AHEAD_WHILE_RUNS_UNDER",
    "MOST_CLAIMED_AHEAD_A_THREAD",
    "Dispatcher",
    "Outcome",
    "Worker",
    "execute",
    "worker_identity",
]
