"""A worker's connections give up on a link that went silent.

A connection whose packets are dropped (a host gone without a reset, a
firewall or NAT that forgot the connection, a network partition) looks alive
to the client: a query waits for its answer as long as TCP retransmits (about
15 minutes on Linux), a connect as long as it resends its SYN (about two
minutes), and an idle connection forever. Meanwhile the worker logs nothing,
its threads hold no run they can finish, and only the other workers' stuck
sweeps show the partition.

libpq's TCP keepalives, ``tcp_user_timeout`` and ``connect_timeout`` end such a
connection with an error after a bound, and the worker treats that error as
any outage: it logs it, backs off and reconnects (``process``, ``lease``). The
bound is a quarter of ``STUCK_AFTER``, at most 30 s: a worker notices a dead
link well before the runs it holds are reclaimed by others. The options are
added to the connections of the orchestration database only where its
``DATABASES`` ``OPTIONS`` set none, so a value of the project's wins.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

from django.db import connections

#: The longest a worker waits on a silent link, whatever ``STUCK_AFTER`` is.
MOST_SECONDS = 30.0
#: The shortest: keepalives count in whole seconds, and libpq waits 2 s at least for a connect.
LEAST_SECONDS = 2.0
#: Unanswered keepalive probes before an idle connection is given up, where the bound leaves room for them.
KEEPALIVE_PROBES = 3


def dead_link_seconds(stuck_after: float) -> float:
    """Seconds after which a worker gives up on a silent connection: a quarter
    of ``stuck_after``, from 2 to 30.

    >>> dead_link_seconds(300), dead_link_seconds(20), dead_link_seconds(4)
    (30.0, 5.0, 2.0)
    """
    return min(MOST_SECONDS, max(LEAST_SECONDS, stuck_after / 4))


def link_options(stuck_after: float) -> dict[str, int]:
    """The libpq options that end a silent connection within
    ``dead_link_seconds(stuck_after)``: unacknowledged data (a query sent, a
    commit) after ``tcp_user_timeout``; an idle connection after keepalive
    probes that go unanswered; a connect after ``connect_timeout`` (each host
    of a multi-host URL apart).

    >>> link_options(300)  # doctest: +NORMALIZE_WHITESPACE
    {'keepalives': 1, 'keepalives_idle': 15, 'keepalives_interval': 5, 'keepalives_count': 3,
     'tcp_user_timeout': 30000, 'connect_timeout': 30}
    >>> link_options(12)  # doctest: +NORMALIZE_WHITESPACE
    {'keepalives': 1, 'keepalives_idle': 1, 'keepalives_interval': 1, 'keepalives_count': 2,
     'tcp_user_timeout': 3000, 'connect_timeout': 3}
    """
    seconds = dead_link_seconds(stuck_after)
    # Half the bound idle, the other half probing.
    idle = max(1, math.floor(seconds / 2))
    probing = seconds - idle
    interval = max(1, math.floor(probing / KEEPALIVE_PROBES))
    return {
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": max(1, min(KEEPALIVE_PROBES, math.floor(probing / interval))),
        "tcp_user_timeout": round(seconds * 1000),
        "connect_timeout": math.floor(seconds),
    }


def missing_link_options(options: dict[str, Any], stuck_after: float) -> dict[str, int]:
    """The ``link_options`` that ``options`` (a database's ``OPTIONS``) do not
    set. None when they name a libpq service: its file may set them, and an
    option given here would override it.

    >>> missing_link_options({"keepalives_idle": 60, "tcp_user_timeout": 0}, 300)
    {'keepalives': 1, 'keepalives_interval': 5, 'keepalives_count': 3, 'connect_timeout': 30}
    >>> missing_link_options({"service": "queue"}, 300)
    {}
    """
    if "service" in options or os.environ.get("PGSERVICE"):
        return {}
    return {key: value for key, value in link_options(stuck_after).items() if key not in options}


@contextlib.contextmanager
def dead_links_given_up(alias: str, stuck_after: float) -> Iterator[dict[str, int]]:
    """While inside, connections to ``alias`` opened from now on (in any
    thread) carry the ``missing_link_options``; yields them.

    Django opens each thread's connection from the alias's settings dict, the
    one place to give every thread's connection (and a pool's) its options."""
    options: dict[str, Any] = connections.settings[alias].setdefault("OPTIONS", {})
    added = missing_link_options(options, stuck_after)
    options.update(added)
    try:
        yield added
    finally:
        for key in added:
            options.pop(key, None)
