"""The tutorial's shop: the module the tutorial's samples are cut from.

``docs/tutorial.md`` includes its sections (the ``--8<--`` markers), and
``tests/integration/test_tutorial.py`` runs them, so every sample on the page
runs as shown.
"""

from __future__ import annotations

# --8<-- [start:steps]
import os
from typing import Any

from orchestration import PermanentError


def reserve_stock(order_id: int, items: list[str]) -> dict[str, Any]:
    # Call your stock service here; return JSON-serialisable data.
    return {"reservation": f"res-{order_id}", "count": len(items)}


def charge_card(order_id: int, cents: int, idempotency_key: str) -> dict[str, Any]:
    if cents <= 0:
        # No retry can fix this one: fail the workflow at once.
        raise PermanentError(f"order {order_id}: nothing to charge ({cents})")
    if os.environ.get("SHOP_PAYMENTS_DOWN"):
        # Stands for your payment provider's outage: retried, and fixed once it is over.
        raise ConnectionError("payment provider unreachable")
    # Give idempotency_key to your payment provider: a step may run twice.
    return {"charge_id": f"ch_{order_id}", "cents": cents}


def send_receipt(email: str, charge_id: str) -> dict[str, Any]:
    return {"sent_to": email, "charge_id": charge_id}


# --8<-- [end:steps]
# --8<-- [start:workflow]
from orchestration import workflow  # noqa: E402


@workflow("checkout", max_retries=3)
def checkout(ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
    order_id = data["order_id"]
    stock = ctx.step("reserve stock", reserve_stock, order_id, data["items"])
    charge = ctx.step(
        "charge card",
        charge_card,
        order_id,
        data["cents"],
        idempotency_key=f"{ctx.workflow_id}:charge",
    )
    ctx.step("send receipt", send_receipt, data["email"], charge["charge_id"])
    return {"charge_id": charge["charge_id"], "reservation": stock["reservation"]}


# --8<-- [end:workflow]
# --8<-- [start:start]
from django.db import transaction  # noqa: E402

from orchestration.models import Workflow  # noqa: E402


def place_order(order_id: int, email: str, items: list[str], cents: int) -> Workflow:
    data = {"order_id": order_id, "email": email, "items": items, "cents": cents}
    with transaction.atomic():
        # ... save the order in your own tables here ...
        # Workers see the run only once this transaction commits. The same key
        # twice (a double click, a retried request) returns the first run.
        return checkout.start(data, idempotency_key=f"order-{order_id}")


# --8<-- [end:start]
# --8<-- [start:status]
def order_status(workflow_id: Any) -> dict[str, Any]:
    run = Workflow.objects.get(pk=workflow_id)
    return {"status": run.status, "output": run.output_data, "error": run.error_message}


# --8<-- [end:status]
