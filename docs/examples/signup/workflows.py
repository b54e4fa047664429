"""The workflows of "Testing workflows" (docs/how-to/testing-workflows.md): the
page includes this module and ``tests.py``, and
``tests/integration/test_downstream_project.py`` runs those tests in a project
of its own, with ``manage.py test`` and with pytest."""

from __future__ import annotations

# --8<-- [start:workflows]
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User

from orchestration import EventTimeout, workflow


def create_account(email: str) -> dict[str, Any]:
    user = User.objects.get(email=email)  # saved by the view that started the run
    return {"user_id": user.pk}


def fetch_contacts(email: str) -> list[str]:
    # An address book service, over the network: it may fail, and the step is retried.
    return []


def send_welcome(email: str, contacts: list[str]) -> dict[str, Any]:
    return {"sent_to": email, "contacts": len(contacts)}


@workflow("welcome", max_retries=3)
def welcome(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    account = ctx.step("create account", create_account, data["email"])
    contacts = ctx.step("fetch contacts", fetch_contacts, data["email"])
    ctx.sleep("let them settle in", timedelta(days=1))
    ctx.step("send welcome", send_welcome, data["email"], contacts)
    return account


@workflow("approval", max_retries=0)
def approval(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    try:
        decision = ctx.wait_for_event("decision", timeout=timedelta(hours=48))
    except EventTimeout:
        return {"approved": False, "why": "no answer within 48 hours"}
    return {"approved": decision["approved"]}


@workflow("welcome_team", max_retries=0)
def welcome_team(ctx: Any, data: dict[str, Any]) -> list[Any]:
    children = [ctx.start_child("welcome", {"email": email}) for email in data["emails"]]
    return ctx.wait_for(children)


# --8<-- [end:workflows]
