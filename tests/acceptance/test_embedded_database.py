"""The example project's embedded PostgreSQL (project/embedded_db.py): private
to the checkout (no other OS user connects, whatever the path's length; a
password always; no folder's mode changed without saying so), and stopped by
the last process that uses it, even when another died without its exit
handlers (SIGKILL, os._exit): ``make serve`` stopped leaves no orphaned server."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support import ROOT

pytest.importorskip("pgserver")

JOIN = "from pathlib import Path; from project.embedded_db import embedded_database; embedded_database(Path({!r}))"
HOLD = "import sys; print('joined', flush=True); sys.stdin.read()"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another OS account only under root")


def join(data_dir: Path, then: str = "", **popen) -> subprocess.Popen[str]:
    """A process that starts (or joins) the server in ``data_dir``, then runs ``then``."""
    code = f"{JOIN.format(str(data_dir))}\n{then}"
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, text=True, **pipes, **popen)


def postmaster(data_dir: Path) -> int | None:
    """The pid of the server running in ``data_dir``, or None (pg_ctl removes postmaster.pid as it stops)."""
    try:
        pid = int((data_dir / "cluster" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    return pid


def socket_dir(data_dir: Path) -> Path:
    return Path((data_dir / "cluster" / "postmaster.pid").read_text().splitlines()[4])


def as_nobody(action: Callable[[], None]) -> str:
    """Run ``action`` in a child process switched to the OS user ``nobody`` (no
    other group); what it raised, by name, or "" when it raised nothing."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        outcome = ""
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            action()
        except BaseException as exc:
            outcome = type(exc).__name__
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        return pipe.read()


def connect_to_socket(path: Path) -> Callable[[], None]:
    def connect() -> None:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path / ".s.PGSQL.5432"))

    return connect


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder of the test's own (mode 0755) in the temporary directory; a
    server the test left running in any data folder under it is stopped."""
    folder = Path(tempfile.mkdtemp(prefix="embedded-"))
    folder.chmod(0o755)
    yield folder
    for pid_file in folder.rglob("postmaster.pid"):
        left = postmaster(pid_file.parent.parent)
        if left is not None:
            os.kill(left, signal.SIGTERM)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def held(base: Path) -> Iterator[Callable[[Path], Path]]:
    """Start the server in a data folder and hold it (a process that joined and waits) for the test."""
    holders: list[subprocess.Popen[str]] = []

    def hold(data_dir: Path) -> Path:
        holder = join(data_dir, HOLD)
        holders.append(holder)
        assert holder.stdout.readline() == "joined\n"
        return data_dir

    yield hold
    for holder in holders:
        holder.communicate("", timeout=60)


def test_the_server_stops_with_the_last_live_process_though_another_died_without_exit_handlers(base):
    data_dir = base / ".pgdata"
    assert join(data_dir, "import os; os._exit(0)").wait(60) == 0  # its pid stays in the list of holders
    holder = join(data_dir, HOLD)  # still using it
    try:
        assert holder.stdout.readline() == "joined\n"
        assert join(data_dir).wait(60) == 0
        assert postmaster(data_dir) is not None, "a process that still uses the server must keep it"
    finally:
        holder.communicate("", timeout=60)
    assert postmaster(data_dir) is None, "the last live process to exit must stop the server"


def test_the_last_process_stopped_with_sigterm_stops_the_server_as_ctrl_c_does(base):
    data_dir = base / ".pgdata"
    holder = join(data_dir, HOLD)  # as a service manager stops runserver
    assert holder.stdout.readline() == "joined\n"
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(60) == 128 + signal.SIGTERM
    assert postmaster(data_dir) is None, "a process stopped with SIGTERM must stop the server it was last to use"
    assert (data_dir / "holders").read_text().strip() in ("", "[]")


def test_embedded_database__refuses_a_connection_without_this_checkouts_password(base, held):
    data_dir = held(base / ".pgdata")
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(host=str(socket_dir(data_dir)), user="postgres", dbname="postgres")
    password = (data_dir / "password").read_text().strip()
    with psycopg.connect(host=str(socket_dir(data_dir)), user="postgres", dbname="postgres", password=password):
        pass
    assert stat.S_IMODE((data_dir / "password").stat().st_mode) == 0o600
    assert postmaster_listens_on_no_tcp_port(data_dir)


def postmaster_listens_on_no_tcp_port(data_dir: Path) -> bool:
    return (data_dir / "cluster" / "postmaster.pid").read_text().splitlines()[5].strip() == ""


@as_root
def test_embedded_database__as_root__another_os_user_can_neither_connect_nor_read_the_password(base, held):
    data_dir = held(base / ".pgdata")
    assert as_nobody(connect_to_socket(socket_dir(data_dir))) == "PermissionError"
    assert as_nobody(lambda: (data_dir / "password").read_text()) == "PermissionError"


@as_root
def test_embedded_database__as_root__a_path_too_long_for_a_socket_gets_a_private_socket_folder(base, held):
    data_dir = base / ("x" * 100) / ".pgdata"
    data_dir.parent.mkdir(mode=0o755)
    held(data_dir)
    folder = socket_dir(data_dir)
    assert not folder.is_relative_to(data_dir)
    info = folder.stat()
    assert (stat.S_IMODE(info.st_mode), pwd.getpwuid(info.st_uid).pw_name) == (0o700, "pgserver")
    assert folder.parent == Path(tempfile.gettempdir())
    assert as_nobody(connect_to_socket(folder)) == "PermissionError"


@as_root
def test_embedded_database__as_root__runs_the_server_as_its_own_account_and_group_alone(base, held):
    data_dir = held(base / ".pgdata")
    status = dict(line.split(":", 1) for line in Path(f"/proc/{postmaster(data_dir)}/status").read_text().splitlines())
    account = pwd.getpwnam("pgserver")
    assert status["Uid"].split()[0] == str(account.pw_uid)
    assert status["Gid"].split()[0] == str(account.pw_gid)
    assert status["Groups"].split() in ([], [str(account.pw_gid)])


@as_root
def test_embedded_database__as_root__says_which_folder_it_opened_to_the_server_and_changes_no_other(base):
    closed = base / "closed"
    closed.mkdir(mode=0o700)
    data_dir = closed / "checkout" / ".pgdata"
    data_dir.parent.mkdir(mode=0o755)
    modes = {folder: folder.stat().st_mode for folder in data_dir.parents}
    first = join(data_dir, stderr=subprocess.PIPE)
    assert first.wait(60) == 0
    said = first.stderr.read()
    assert f"added search permission for others (o+x) to {closed}," in said
    assert said.count("added search permission") == 1
    changed = {folder: folder.stat().st_mode for folder in data_dir.parents if folder.stat().st_mode != modes[folder]}
    assert changed == {closed: modes[closed] | 0o001}
    again = join(data_dir, stderr=subprocess.PIPE)
    assert again.wait(60) == 0
    assert "added search permission" not in again.stderr.read()
