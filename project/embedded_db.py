"""An embedded PostgreSQL for the example project when DATABASE_URL is unset.

``pgserver`` ships the PostgreSQL binaries in a wheel; the data lives in
``.pgdata/`` at the repository root, and every process (web, workers, tests)
that points at the same directory shares one server. The reusable app never
starts a server: this module belongs to the example project only.

pgserver stops the server when the last process that holds it exits: each
process adds its pid to ``.handle_pids.json`` and, at exit, removes it and stops
the server if its own was the only one left. A process that dies without
running its exit handlers (SIGKILL, a SIGTERM it does not handle, ``os._exit``
as mypy's django-stubs plugin exits) stays in that list, and then no exit ever
finds itself the last: the server ran on, orphaned, after ``make serve`` was
stopped. So every process drops the pids of dead ones from the list when it
joins and again as it exits, just before pgserver's own exit handler runs.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any


def embedded_database(data_dir: Path) -> dict[str, Any]:
    """Start (or join) the server in ``data_dir`` and return a DATABASES entry."""
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "DATABASE_URL is not set and the embedded PostgreSQL (the 'pgserver' package) is not installed. "
            "Run 'make demo' (it installs everything), or set DATABASE_URL=postgres://user:pass@host:5432/db."
        ) from exc
    data_dir.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    forget_dead_handles(server)
    # Exit handlers run last registered first: this one runs before pgserver's.
    atexit.register(forget_dead_handles, server)
    info = server.get_postmaster_info()
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(info.socket_dir),
        "PORT": str(info.port or ""),
    }


def forget_dead_handles(server: Any) -> list[int]:
    """Drop from pgserver's list of the processes holding ``server`` those that
    are gone (or zombies); return the live ones. Taken under pgserver's own
    lock, which its joins and exits take too."""
    import psutil

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    handles = server.global_process_id_list
    with type(server)._lock:
        pids = handles.get()
        live = [pid for pid in pids if alive(pid)]
        if live != pids:
            handles.put(live)
    return live
