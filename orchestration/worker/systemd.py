"""systemd's ``Type=notify`` protocol, for ``runworkers`` run by a unit.

systemd passes the path of a datagram socket in ``NOTIFY_SOCKET`` and, with
``WatchdogSec=``, the watchdog's period in ``WATCHDOG_USEC``. The process
sends ``READY=1`` once it claims work, ``WATCHDOG=1`` after each heartbeat
written, and ``STOPPING=1`` when it begins to stop: systemd then knows the
worker started, restarts one whose heartbeat stopped working, and waits for
its stop. The protocol is one datagram of ``KEY=value`` lines (sd_notify(3));
nothing here runs when ``NOTIFY_SOCKET`` is unset.
"""

from __future__ import annotations

import logging
import os
import socket

logger = logging.getLogger(__name__)


def _address() -> str | None:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return None
    if address.startswith("@"):  # a socket in the abstract namespace
        return "\0" + address[1:]
    return address


def notify(*lines: str) -> bool:
    """Send ``lines`` (``READY=1``, ``STATUS=...``) to systemd; False when no
    socket is given, or the datagram could not be sent (logged: a worker never
    fails for it)."""
    address = _address()
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(lines).encode())
    except OSError as exc:
        logger.warning("systemd notification %s not sent to %s (%s)", lines[0], os.environ["NOTIFY_SOCKET"], exc)
        return False
    return True


def watchdog_seconds() -> float | None:
    """The period of systemd's watchdog for this process (``WatchdogSec=``), or
    None when there is none (or it watches another process: ``WATCHDOG_PID``)."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or _address() is None or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1_000_000 or None
    except ValueError:
        return None
