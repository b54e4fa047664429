"""An embedded PostgreSQL for the example project when DATABASE_URL is unset.

``pgserver`` ships the PostgreSQL binaries in a wheel; the data lives in
``.pgdata/`` at the repository root, and every process (web, workers, tests)
that points at the same directory shares one server. The reusable app never
starts a server: this module belongs to the example project only.
"""

from __future__ import annotations

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
    info = server.get_postmaster_info()
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(info.socket_dir),
        "PORT": str(info.port or ""),
    }
