"""Three demo workflows: a happy path, a flaky step that succeeds on retry,
and a step that fails for good (until an operator retries it later)."""

from __future__ import annotations

import datetime
import hashlib
import random
import time
from typing import Any

from django.utils import timezone

from orchestration import PermanentError, workflow

# -- order_fulfilment: the multi-step happy path ------------------------------


def reserve_inventory(order_id: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    time.sleep(0.02)
    return {"reservation": f"res-{order_id}", "units": sum(item["quantity"] for item in items)}


def charge_card(order_id: int, amount_cents: int) -> dict[str, Any]:
    time.sleep(0.03)
    digest = hashlib.sha1(f"{order_id}:{amount_cents}".encode()).hexdigest()[:10]
    return {"charge_id": f"ch_{digest}", "amount_cents": amount_cents}


def create_shipment(order_id: int, units: int) -> dict[str, Any]:
    time.sleep(0.02)
    return {"tracking_number": f"TRK{order_id:06d}", "parcels": max(1, units // 3)}


def send_confirmation(email: str, tracking_number: str) -> dict[str, Any]:
    return {"sent_to": email, "tracking_number": tracking_number}


@workflow("order_fulfilment", max_retries=3)
def order_fulfilment(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    reservation = ctx.step("reserve inventory", reserve_inventory, data["order_id"], data["items"])
    amount = sum(item["quantity"] * item["unit_price_cents"] for item in data["items"])
    charge = ctx.step("charge card", charge_card, data["order_id"], amount)
    shipment = ctx.step("create shipment", create_shipment, data["order_id"], reservation["units"])
    ctx.step("send confirmation", send_confirmation, data["email"], shipment["tracking_number"])
    return {"charge_id": charge["charge_id"], "tracking_number": shipment["tracking_number"]}


# -- crm_sync: a flaky partner API that answers on a later attempt -----------


class PartnerUnavailable(ConnectionError):
    pass


def fetch_contact(contact_id: int) -> dict[str, Any]:
    return {"contact_id": contact_id, "email": f"contact{contact_id}@example.com"}


def push_to_crm(contact: dict[str, Any], attempt: int, fail_attempts: int) -> dict[str, Any]:
    if attempt <= fail_attempts:
        raise PartnerUnavailable(f"CRM answered 503 Service Unavailable (attempt {attempt})")
    return {"crm_id": f"crm-{contact['contact_id']}", "synced_at_attempt": attempt}


@workflow("crm_sync", max_retries=4)
def crm_sync(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    contact = ctx.step("fetch contact", fetch_contact, data["contact_id"])
    # The first step is checkpointed: retries resume here without fetching again.
    return ctx.step("push to CRM", push_to_crm, contact, ctx.attempt, data.get("fail_attempts", 1))


# -- supplier_payout: fails for good while the bank's API is down ------------


def validate_invoice(invoice: dict[str, Any]) -> dict[str, Any]:
    total = sum(line["amount_cents"] for line in invoice["lines"])
    if total != invoice["total_cents"]:
        raise PermanentError(f"invoice total {invoice['total_cents']} does not match its lines ({total})")
    return {"total_cents": total}


def send_payout(supplier: str, amount_cents: int, bank_down_until: str | None) -> dict[str, Any]:
    if bank_down_until and timezone.now() < datetime.datetime.fromisoformat(bank_down_until):
        raise ConnectionRefusedError(f"bank API unreachable (maintenance until {bank_down_until})")
    return {"payout_id": f"po_{random.randrange(10**8):08d}", "supplier": supplier, "amount_cents": amount_cents}


@workflow("supplier_payout", max_retries=2)
def supplier_payout(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    invoice = ctx.step("validate invoice", validate_invoice, data["invoice"])
    return ctx.step("send payout", send_payout, data["supplier"], invoice["total_cents"], data.get("bank_down_until"))


# -- expense_approval: waits for a manager's decision (an event) -------------


def file_expense(employee: str, amount_cents: int) -> dict[str, Any]:
    return {"expense_id": f"exp-{abs(hash((employee, amount_cents))) % 10**6:06d}", "amount_cents": amount_cents}


def reimburse(expense: dict[str, Any], decision: dict[str, Any]) -> dict[str, Any]:
    if not decision.get("approved"):
        return {"reimbursed": False, "reason": decision.get("comment", "rejected")}
    return {"reimbursed": True, "expense_id": expense["expense_id"], "approved_by": decision.get("by")}


@workflow("expense_approval", max_retries=3, timeout=7 * 24 * 3600)
def expense_approval(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    expense = ctx.step("file expense", file_expense, data["employee"], data["amount_cents"])
    # Holds no worker while it waits: send_event(workflow_id, "manager approval", {...})
    # from a view, the shell, or the admin's "Send event" form wakes it.
    decision = ctx.wait_for_event("manager approval", timeout=3 * 24 * 3600)
    return ctx.step("reimburse", reimburse, expense, decision)
