"""Screenshots of the operator's console for docs/console.md, taken at 1280 px
by a headless Chromium over the demo's database, so they can be refreshed
after a change to the console:

    python manage.py migrate && python manage.py console_screenshots

It runs ``run_demo`` first when the database holds no failed run, and starts
an expense that waits for its approval when none does,
serves the admin with ``runserver`` on a free port for as long as it takes,
and logs in as the demo's user. It needs Playwright for Python (in
requirements.txt) and a Chromium (Debian's ``chromium``; ``--chromium`` for
another path); Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStatus

WIDTH = 1280
DOCS = Path(settings.BASE_DIR) / "docs" / "console"


class Command(BaseCommand):
    help = "Take the console's screenshots for docs/console.md (headless Chromium, 1280 px)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", type=Path, default=DOCS, help="directory for the PNG files")
        parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium to drive")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise CommandError("Playwright is missing: pip install playwright (see requirements.txt).") from None
        if not Path(options["chromium"]).exists():
            raise CommandError(f"No Chromium at {options['chromium']}: apt-get install chromium, or pass --chromium.")
        if not self._failed():
            self.stdout.write("No failed run yet: running the demo first")
            call_command("run_demo")
        if not self._waiting():
            self.stdout.write("No run waits for an approval: starting one")
            start_workflow("expense_approval", {"employee": "grace@example.com", "amount_cents": 12_900})
            subprocess.run([sys.executable, "manage.py", "runworkers", "--burst"], cwd=settings.BASE_DIR, check=True)
        pages = self._pages()  # read before Playwright's loop starts: Django refuses queries beside it
        out: Path = options["out"]
        out.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=settings.BASE_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "DEBUG": "on"},  # runserver serves the admin's stylesheets only in DEBUG
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_for(base)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=options["chromium"], headless=True, args=["--no-sandbox", "--disable-gpu"]
                )
                page = browser.new_page(base_url=base, viewport={"width": WIDTH, "height": 900})
                self._log_in(page)
                for name, url in pages:
                    page.goto(url)
                    page.uncheck("#orch-live")  # a still page
                    path = out / f"{name}.png"
                    page.screenshot(path=str(path), full_page=True)
                    self.stdout.write(f"wrote {path}")
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)

    def _failed(self) -> Workflow | None:
        return Workflow.objects.filter(status=WorkflowStatus.FAILED).order_by("-created_at").first()

    def _waiting(self) -> Workflow | None:
        return (
            Workflow.objects.filter(status=WorkflowStatus.PENDING, waiting_for__startswith="event")
            .order_by("-created_at")
            .first()
        )

    def _pages(self) -> list[tuple[str, str]]:
        failed, waiting = self._failed(), self._waiting()
        assert failed is not None and waiting is not None
        return [
            ("list", reverse("admin:orchestration_workflow_changelist")),
            ("failed-run", reverse("admin:orchestration_workflow_change", args=[failed.pk])),
            ("waiting-run", reverse("admin:orchestration_workflow_change", args=[waiting.pk])),
            ("overview", reverse("admin:orchestration_workflow_overview")),
            ("workers", reverse("admin:orchestration_workflowworker_changelist")),
            ("queues", reverse("admin:orchestration_workflowqueue_changelist")),
        ]

    def _log_in(self, page: Any) -> None:
        page.goto(reverse("admin:login"))
        page.fill("#id_username", "demo")
        page.fill("#id_password", "demo")
        page.click("input[type=submit]")
        page.wait_for_selector("#user-tools")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(base: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"{base}/admin/login/", timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise CommandError(f"runserver did not answer at {base} within {seconds:g} s") from None
            time.sleep(0.3)
