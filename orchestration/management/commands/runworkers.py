from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestration import flow
from orchestration.conf import conf
from orchestration.errors import UnknownQueue
from orchestration.management.arguments import POSITIVE_SECONDS, Bounded, refused
from orchestration.observability import observe
from orchestration.observability.metrics import INSTALL_HINT
from orchestration.validation import InvalidWorkflowInput, validate_queue
from orchestration.worker import Worker, restart

#: Seconds of database outage after which ``--burst`` gives up (``--give-up-after``).
BURST_GIVE_UP_AFTER = 30.0


class Command(BaseCommand):
    help = "Run workflow workers: claim pending workflows and run them until stopped (SIGTERM/SIGINT)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency", action=Bounded, minimum=1, default=None, help="worker threads (default: CONCURRENCY, 4)"
        )
        parser.add_argument(
            "--async-concurrency",
            action=Bounded,
            default=None,
            help="async runs held at once in the process's shared event loop, apart from the threads; 0: each "
            "async run holds a thread (default: ASYNC_CONCURRENCY, 100)",
        )
        parser.add_argument("--queues", default=None, help="comma-separated queues to serve (default: all)")
        parser.add_argument("--burst", action="store_true", help="exit once nothing is due and nothing is held")
        parser.add_argument(
            "--give-up-after",
            **POSITIVE_SECONDS,
            default=None,
            help="exit with status 3 once the database has been unavailable this many seconds (default: "
            f"{BURST_GIVE_UP_AFTER:g} with --burst; without it, never)",
        )
        parser.add_argument("--poll-interval", **POSITIVE_SECONDS, default=None, help="seconds between polls when idle")
        parser.add_argument(
            "--no-listen", action="store_true", help="do not LISTEN for new work; rely on polling (PgBouncer)"
        )
        parser.add_argument(
            "--claim-ahead",
            action=Bounded,
            default=None,
            help="runs kept claimed ahead of the threads while runs are short; 0: never (default: CLAIM_AHEAD, "
            "else as many as the threads finish in about 50 ms, one to four a thread)",
        )
        parser.add_argument(
            "--metrics-port",
            action=Bounded,
            minimum=1,
            maximum=65535,
            default=None,
            help="serve this process's Prometheus metrics there (on --metrics-address)",
        )
        parser.add_argument(
            "--metrics-address",
            default="127.0.0.1",
            help="the address --metrics-port listens on (default 127.0.0.1: this machine only; "
            "0.0.0.0 or a private interface's address for a Prometheus elsewhere, behind a firewall)",
        )
        parser.add_argument(
            "--log-level",
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
            help="level of the orchestration logger (default: the one LOGGING gives it, else INFO)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues = None
        if options["queues"] is not None:
            queues = [name.strip() for name in options["queues"].split(",")]
            try:
                for name in queues:
                    validate_queue(name)
            except InvalidWorkflowInput as exc:
                raise refused(f"--queues {options['queues']!r}: {exc}") from None
            for name in queues:
                try:
                    flow.check_queue(name)
                except UnknownQueue as exc:
                    raise refused(f"--queues: {exc} Declare extra queues in ORCHESTRATION['QUEUES'].") from None
        self._configure_logging(options["log_level"])
        if options["metrics_port"]:
            self._serve_metrics(options["metrics_port"], options["metrics_address"])
        worker = Worker(
            concurrency=options["concurrency"] or conf.CONCURRENCY,
            queues=queues,
            burst=options["burst"],
            poll_interval=options["poll_interval"],
            listen=not options["no_listen"],
            claim_ahead=options["claim_ahead"],
            async_concurrency=options["async_concurrency"],
            give_up_after=options["give_up_after"] or (BURST_GIVE_UP_AFTER if options["burst"] else None),
        )
        read = options["metrics_port"] or observe.shared_between_processes()
        with contextlib.nullcontext() if read else observe.unread():
            status = worker.run()
        if worker.outage.gave_up is not None:
            raise CommandError(f"runworkers {worker.outage.gave_up}", returncode=status)
        if worker.restart_because is not None and not status:
            try:
                restart.replace_process(wanted=lambda: worker.restart_because is not None)
            except OSError as exc:
                raise CommandError(f"could not restart ({exc}); exiting, for a supervisor to start it") from None
        if status:  # a thread died: a supervisor restarts the process
            raise CommandError(
                f"worker thread(s) {', '.join(worker.dead_threads)} died; see the log", returncode=status
            )

    def _serve_metrics(self, port: int, address: str) -> None:
        try:
            observe.serve(port, address)
        except ImportError:
            raise CommandError(f"--metrics-port: {INSTALL_HINT.strip()}") from None
        except OSError as exc:
            raise CommandError(f"--metrics-address {address} --metrics-port {port}: {exc}") from None

    def _configure_logging(self, level: str | None) -> None:
        """A handler when the project's ``LOGGING`` gives none; the level asked
        for, else the one ``LOGGING`` set on the ``orchestration`` logger, else INFO."""
        package_logger = logging.getLogger("orchestration")
        if not package_logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            package_logger.addHandler(handler)
        if level is not None:
            package_logger.setLevel(level)
        elif package_logger.level == logging.NOTSET:
            package_logger.setLevel(logging.INFO)
