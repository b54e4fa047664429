"""A TCP link to the test database that a test can make silent: its packets
dropped both ways, nothing reset or closed, as when a host vanishes or a
firewall forgets a connection.

A process started with ``enter`` as its ``preexec_fn`` runs in a network
namespace of its own, where a proxy listens on 127.0.0.1 (``url``) and
forwards to the test database. ``cut`` takes the namespace's loopback
interface down: the kernel drops every packet on it, so TCP sees a dead link
(a proxy in user space that stops forwarding would not do: its kernel still
acknowledges every packet and answers keepalives). ``restore`` brings it back,
and connections that were not given up carry on.

Namespaces and interfaces need root on Linux (``available``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import sys
import threading
from typing import Any

from tests.support import database_url

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def available() -> str | None:
    """Why a silent link cannot be made here, or None."""
    if not sys.platform.startswith("linux") or not hasattr(os, "setns"):
        return "network namespaces need Linux and Python 3.12"
    if os.geteuid() != 0:
        return "making a network namespace needs root"
    return None


class SilentLink:
    """A proxy in a network namespace of its own, to ``upstream`` (the test
    database's connection parameters, as Django's ``get_connection_params``)."""

    def __init__(self, upstream: dict[str, Any]) -> None:
        self.upstream = upstream
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()
        made: dict[str, Any] = {}
        # A thread's network namespace is its own: this one makes the namespace
        # and the sockets that live in it, then ends.
        maker = threading.Thread(target=self._make_namespace, args=(made,))
        maker.start()
        maker.join()
        if "error" in made:
            raise made["error"]
        self._namespace: int = made["namespace"]
        self._control: socket.socket = made["control"]
        self._listener: socket.socket = made["listener"]
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="silent-link-accept", daemon=True).start()

    def _make_namespace(self, made: dict[str, Any]) -> None:
        try:
            os.unshare(os.CLONE_NEWNET)
            made["namespace"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            # Sockets stay in the namespace they were made in: the interface is set through this one.
            made["control"] = control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._set_up(True, control)  # a new namespace's loopback starts down
            made["listener"] = socket.create_server(("127.0.0.1", 0))
        except OSError as exc:
            made["error"] = exc

    @staticmethod
    def _flags(control: socket.socket) -> int:
        answer = fcntl.ioctl(control, _SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
        return int(struct.unpack("16sH22x", answer)[1])

    def _set_up(self, up: bool, control: socket.socket | None = None) -> None:
        """Bring the namespace's loopback interface up or down."""
        control = control or self._control
        flags = self._flags(control)
        flags = flags | _IFF_UP if up else flags & ~_IFF_UP
        fcntl.ioctl(control, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags))

    def url(self) -> str:
        """A ``DATABASE_URL`` to the test database through the link."""
        return database_url(host="127.0.0.1", port=self.port)

    def enter(self) -> None:
        """Move the calling process into the link's namespace (a ``preexec_fn``)."""
        os.setns(self._namespace, os.CLONE_NEWNET)

    def cut(self) -> None:
        """Drop every packet on the link, both ways, from now on."""
        self._set_up(False)

    def restore(self) -> None:
        self._set_up(True)

    def close(self) -> None:
        self._closed.set()
        for sock in [self._listener, self._control, *self._sockets]:
            # shutdown wakes a pump blocked on the socket; close alone would wait for it
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        os.close(self._namespace)

    # -- the proxy ------------------------------------------------------

    def _connect_upstream(self) -> socket.socket:
        host = self.upstream.get("host") or "/var/run/postgresql"
        port = int(self.upstream.get("port") or 5432)
        if host.startswith("/"):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(f"{host}/.s.PGSQL.{port}")
            return upstream
        return socket.create_connection((host, port))

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
                server = self._connect_upstream()
            except OSError:
                if self._closed.is_set():
                    return
                continue
            self._sockets += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), name="silent-link-pump", daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        """Forward until either side ends; then end both."""
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
