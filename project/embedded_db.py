"""An embedded PostgreSQL for the example project when DATABASE_URL is unset.

``pgserver`` ships the PostgreSQL binaries in a wheel; this module runs them
itself, so that the server is private to the checkout:

- it listens on no TCP address, only on a Unix socket in a folder of mode 0700
  that belongs to the server's OS account, and the socket itself is 0700;
- every connection needs the password of the ``postgres`` role (SCRAM), which
  is generated on the first run and kept in ``.pgdata/password`` (mode 0600);
- when the socket's path inside ``.pgdata`` is too long for a Unix socket (107
  bytes), the socket goes to a new private folder (mode 0700) in the temporary
  directory, never to a shared one.

PostgreSQL refuses to run as root. Started by root, the server runs as the
system account ``pgserver`` (made on the first run, without a login shell or a
home), with its own group and no other. That account must be able to traverse
the folders above ``.pgdata`` and above the binaries; where one of them does
not let it, search permission for others (``o+x``, never read) is added, and
the first run says so on stderr, folder by folder.

Layout of ``.pgdata/``: ``cluster/`` (the data directory, owned by the server's
account), ``password``, ``holders`` (the processes using the server) and
``lock``. Every process (web, workers, tests) that points at the same folder
shares one server; the last one to exit (normally, by Ctrl-C or by SIGTERM)
stops it, and each drops the pids of processes that died without their exit
handlers (SIGKILL, ``os._exit``), so that no server is left running orphaned.
"""

from __future__ import annotations

import atexit
import fcntl
import importlib.util
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The OS account the server runs as when started by root.
SERVER_ACCOUNT = "pgserver"
PORT = 5432
SOCKET_NAME = f".s.PGSQL.{PORT}"
#: A Unix socket's path fits in 108 bytes with its terminating NUL.
MAX_SOCKET_PATH = 107
#: What ``.pgdata`` holds besides the cluster (``secret_key`` is the example project's, see settings.py).
OWN_FILES = frozenset({"cluster", "lock", "password", "holders", "socket_dir", "secret_key"})
HBA = """\
# Written by the example project's embedded_db: the socket only, a password always.
local all all scram-sha-256
"""


def embedded_database(data_dir: Path) -> dict[str, Any]:
    """Start (or join) the server in ``data_dir`` and return a DATABASES entry."""
    return EmbeddedPostgres(data_dir).join()


class EmbeddedPostgres:
    """The server whose files live in ``data_dir``, shared by every process that joins it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.cluster = self.data_dir / "cluster"
        self.bin = postgres_binaries()
        self.account = ServerAccount.for_current_user()

    # -- the processes that share it

    def join(self) -> dict[str, Any]:
        """Start the server unless it runs, count this process among its users
        until it exits, and return the connection settings."""
        with self._locked():
            self._prepare()
            if self._running_pid() is None:
                self._start()
            holders = [pid for pid in self._holders() if alive(pid)]
            self._write_holders([*dict.fromkeys([*holders, os.getpid()])])
        atexit.register(self.leave)
        exit_handlers_on_sigterm()
        return self.settings()

    def leave(self) -> None:
        """Stop counting this process; the last live one stops the server."""
        with self._locked():
            left = [pid for pid in self._holders() if pid != os.getpid() and alive(pid)]
            self._write_holders(left)
            if not left and self._running_pid() is not None:
                self._pg_ctl("stop", "-m", "fast")
                self._remove_private_socket_dir()

    def restart(self) -> None:
        """Restart the server in place (fast shutdown: open connections are cut)."""
        with self._locked():
            options = self._server_options(self._socket_dir())
            self._pg_ctl("restart", "-m", "fast", "-o", options, "-l", str(self.cluster / "server.log"))

    def settings(self) -> dict[str, Any]:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "PASSWORD": self.password(),
            "HOST": str(self._socket_dir()),
            "PORT": str(PORT),
        }

    def password(self) -> str:
        return (self.data_dir / "password").read_text().strip()

    # -- first run and start

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.data_dir / "lock", "a") as lock:
            os.chmod(lock.fileno(), 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _prepare(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            self._move_old_layout()
        self.account.own_top_folder(self.data_dir)
        password_file = self.data_dir / "password"
        if not password_file.exists():
            fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_urlsafe(32) + "\n")
        if self._running_pid() is not None:
            return
        self.account.reach(self.data_dir, self.bin / "postgres")
        if not (self.cluster / "PG_VERSION").exists():
            shutil.rmtree(self.cluster, ignore_errors=True)  # what an interrupted initdb left
            self.cluster.mkdir(mode=0o700)
            self.account.give(self.cluster)
            # Trust lasts until the pg_hba.conf below: no server runs in between.
            self._run(self.bin / "initdb", "-D", self.cluster, "-U", "postgres", "--encoding=UTF8", "--auth=trust")
        with open(self.cluster / "pg_hba.conf", "w") as hba:  # an existing file keeps its owner
            hba.write(HBA)
        # Every start sets the role's password from the file, in single-user mode (nothing listens).
        said = self._run(
            self.bin / "postgres",
            *("--single", "-D", self.cluster, "-c", "listen_addresses=", "postgres"),
            stdin=f"ALTER ROLE postgres PASSWORD '{self.password()}';\n",
        )
        if "ERROR:" in said:
            raise RuntimeError(f"The embedded PostgreSQL could not set its password:\n{said}")

    def _move_old_layout(self) -> None:
        """An older version kept the cluster in ``.pgdata`` itself, trusting
        every local connection: stop it and move it into ``cluster/``."""
        old = ServerAccount.for_uid(self.data_dir.stat().st_uid)
        if running_pid(self.data_dir) is not None:
            old.run(self.bin / "pg_ctl", "-D", self.data_dir, "-w", "-t", "60", "-m", "fast", "stop")
        self.cluster.mkdir(mode=0o700, exist_ok=True)
        for entry in self.data_dir.iterdir():
            if entry.name in (".handle_pids.json", "log"):
                entry.unlink()
            elif entry.name not in OWN_FILES:
                entry.rename(self.cluster / entry.name)
        self.account.give(self.cluster, recursive=True)
        self.account.own_top_folder(self.data_dir)

    def _start(self) -> None:
        self._remove_private_socket_dir()
        socket_dir = self.cluster
        if len(os.fsencode(socket_dir / SOCKET_NAME)) > MAX_SOCKET_PATH:
            socket_dir = private_socket_dir()
            self.account.give(socket_dir)
            (self.data_dir / "socket_dir").write_text(str(socket_dir))
        self._pg_ctl("start", "-o", self._server_options(socket_dir), "-l", str(self.cluster / "server.log"))

    def _server_options(self, socket_dir: Path) -> str:
        options = ["-c", "listen_addresses=", "-k", str(socket_dir), "-p", str(PORT)]
        return shlex.join([*options, "-c", "unix_socket_permissions=0700"])

    def _pg_ctl(self, *args: str) -> None:
        self._run(self.bin / "pg_ctl", "-D", str(self.cluster), "-w", "-t", "60", *args)

    def _run(self, *args: Any, stdin: str | None = None) -> str:
        return self.account.run(*args, stdin=stdin)

    # -- state on disk

    def _running_pid(self) -> int | None:
        return running_pid(self.cluster)

    def _socket_dir(self) -> Path:
        lines = (self.cluster / "postmaster.pid").read_text().splitlines()
        return Path(lines[4])

    def _remove_private_socket_dir(self) -> None:
        record = self.data_dir / "socket_dir"
        if record.exists():
            path = Path(record.read_text())
            if path.is_dir() and not path.is_symlink() and path.stat().st_uid == self.account.uid:
                shutil.rmtree(path, ignore_errors=True)
            record.unlink()

    def _holders(self) -> list[int]:
        try:
            return [int(pid) for pid in json.loads((self.data_dir / "holders").read_text())]
        except FileNotFoundError:
            return []

    def _write_holders(self, pids: list[int]) -> None:
        fd = os.open(self.data_dir / "holders", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps(pids))


class ServerAccount:
    """The OS account that runs the server's programs: the current user, or,
    for root, the system account ``pgserver`` with its own group alone."""

    def __init__(self, uid: int, gid: int, name: str) -> None:
        self.uid, self.gid, self.name = uid, gid, name

    @classmethod
    def for_current_user(cls) -> ServerAccount:
        if os.geteuid() != 0:
            return cls(os.geteuid(), os.getegid(), "")
        return cls.for_uid(system_account())

    @classmethod
    def for_uid(cls, uid: int) -> ServerAccount:
        import pwd

        if uid == os.geteuid():
            return cls(uid, os.getegid(), "")
        entry = pwd.getpwuid(uid)
        return cls(entry.pw_uid, entry.pw_gid, entry.pw_name)

    @property
    def is_other(self) -> bool:
        return self.uid != os.geteuid()

    def run(self, *args: Any, stdin: str | None = None) -> str:
        """Run a program as the account, from ``/``; its output, or RuntimeError naming it."""
        switch: dict[str, Any] = {"user": self.uid, "group": self.gid, "extra_groups": []} if self.is_other else {}
        result = subprocess.run(
            [str(arg) for arg in args],
            input=stdin or "",
            capture_output=True,
            text=True,
            cwd="/",  # the caller's folder may be closed to the server's account
            **switch,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"The embedded PostgreSQL's {Path(str(args[0])).name} failed (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result.stdout + result.stderr

    def give(self, path: Path, *, recursive: bool = False) -> None:
        """Make ``path`` (a folder) the account's, mode 0700."""
        if self.is_other:
            for item in [path, *(path.rglob("*") if recursive else [])]:
                os.chown(item, self.uid, self.gid, follow_symlinks=False)
        path.chmod(0o700)

    def own_top_folder(self, data_dir: Path) -> None:
        """``.pgdata`` itself stays the caller's; the server's account may only
        traverse it (its group alone, 0710) to reach its cluster."""
        if self.is_other:
            os.chown(data_dir, os.geteuid(), self.gid)
            data_dir.chmod(0o710)
        else:
            data_dir.chmod(0o700)

    def reach(self, *targets: Path) -> None:
        """Let the account traverse every folder above ``targets``, adding o+x
        where it may not and saying so on stderr."""
        if not self.is_other:
            return
        folders = list(dict.fromkeys(parent for target in targets for parent in reversed(target.parents)))
        if not self._blocked(folders + list(targets)):
            return
        changed = []
        for folder in folders:
            stat = folder.stat()
            bit = 0o100 if stat.st_uid == self.uid else 0o010 if stat.st_gid == self.gid else 0o001
            if not stat.st_mode & bit:
                folder.chmod(stat.st_mode | 0o001)
                changed.append(folder)
        for folder in changed:
            print(
                f"embedded PostgreSQL: added search permission for others (o+x) to {folder}, "
                f"so that the server's OS account '{self.name}' can reach .pgdata and its binaries "
                "(PostgreSQL refuses to run as root). Set DATABASE_URL to use a server of your own instead.",
                file=sys.stderr,
            )
        blocked = self._blocked(folders + list(targets))
        if blocked:
            raise RuntimeError(
                f"The embedded PostgreSQL's OS account '{self.name}' cannot reach {', '.join(map(str, blocked))}. "
                "Give it access, move the checkout, or set DATABASE_URL."
            )

    def _blocked(self, paths: list[Path]) -> list[Path]:
        """The paths the account may not traverse or execute, asked of the kernel as that account."""
        script = 'for p; do test -x "$p" || printf "%s\\n" "$p"; done'
        result = subprocess.run(
            ["/bin/sh", "-c", script, "sh", *map(str, paths)],
            capture_output=True,
            text=True,
            cwd="/",
            user=self.uid,
            group=self.gid,
            extra_groups=[],
        )
        return [Path(line) for line in result.stdout.splitlines()]


def system_account() -> int:
    """The uid of ``pgserver``, made on the first run (a system account, no login shell, no home)."""
    import pwd

    try:
        return pwd.getpwnam(SERVER_ACCOUNT).pw_uid
    except KeyError:
        pass
    command = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
    command += ["--shell", "/usr/sbin/nologin", SERVER_ACCOUNT]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(
            f"The embedded PostgreSQL cannot run as root and could not make the system account "
            f"'{SERVER_ACCOUNT}' to run it ({exc}). Make it yourself, run as another user, or set DATABASE_URL."
        ) from exc
    print(
        f"embedded PostgreSQL: made the system account '{SERVER_ACCOUNT}' (no login shell, no home) to run "
        "the server, since PostgreSQL refuses to run as root.",
        file=sys.stderr,
    )
    return pwd.getpwnam(SERVER_ACCOUNT).pw_uid


def postgres_binaries() -> Path:
    """The folder of the PostgreSQL programs that the ``pgserver`` wheel ships."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "DATABASE_URL is not set and the embedded PostgreSQL (the 'pgserver' package) is not installed. "
            "Run 'make demo' (it installs everything), or set DATABASE_URL=postgres://user:pass@host:5432/db."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def private_socket_dir() -> Path:
    """A new folder of mode 0700 with a path short enough for the socket."""
    for base in (tempfile.gettempdir(), "/tmp"):
        if len(os.fsencode(Path(base) / "pg-XXXXXXXX" / SOCKET_NAME)) <= MAX_SOCKET_PATH:
            return Path(tempfile.mkdtemp(prefix="pg-", dir=base))
    raise RuntimeError("No temporary folder has a path short enough for PostgreSQL's Unix socket; set TMPDIR.")


def running_pid(cluster: Path) -> int | None:
    """The pid of the server running in ``cluster``, or None (a stale postmaster.pid too)."""
    try:
        pid = int((cluster / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if alive(pid) else None


def exit_handlers_on_sigterm() -> None:
    """Let SIGTERM end this process as Ctrl-C does, through its exit handlers
    (``leave`` among them): a service manager stops a process with SIGTERM,
    whose default action skips them and so would leave the server running.
    Only where nothing handles SIGTERM yet (``runworkers`` sets its own, and
    exits through them) and in the main thread, where Python runs handlers."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
