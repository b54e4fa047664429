"""The demo's workflows, tested with the kit (``orchestration.testing``) in the
test's own transaction: ``python manage.py test project.demo``, or the suite's
pytest run, which collects this module too."""

from __future__ import annotations

from datetime import timedelta

from django.test import TestCase

from orchestration import send_event, start_workflow
from orchestration.testing import advance, history, run_workflows, steps

ORDER = {
    "order_id": 1001,
    "email": "customer1@example.com",
    "items": [{"sku": "SKU-10", "quantity": 2, "unit_price_cents": 1250}],
}
INVOICE = {"number": "INV-7", "lines": [{"amount_cents": 12000}, {"amount_cents": 3000}], "total_cents": 15000}


class DemoWorkflowTests(TestCase):
    def test_order_fulfilment__ships_and_confirms_an_order(self) -> None:
        run = start_workflow("order_fulfilment", ORDER)

        self.assertEqual(run_workflows(), [run])

        run.refresh_from_db()
        self.assertEqual(run.output_data["tracking_number"], "TRK001001")
        self.assertEqual(
            [step.name for step in steps(run)],
            ["reserve inventory", "charge card", "create shipment", "send confirmation"],
        )

    def test_crm_sync__succeeds_once_the_partner_answers(self) -> None:
        run = start_workflow("crm_sync", {"contact_id": 42, "fail_attempts": 2})

        run_workflows(skip_waits=True)

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("completed", 3))
        self.assertEqual(len(history(run)), 2)
        self.assertEqual(steps(run)[0].output, {"contact_id": 42, "email": "contact42@example.com"})

    def test_supplier_payout__an_invoice_that_does_not_add_up_fails_at_once(self) -> None:
        run = start_workflow("supplier_payout", {"supplier": "Acme Paper", "invoice": {**INVOICE, "total_cents": 1}})

        run_workflows(skip_waits=True)

        run.refresh_from_db()
        self.assertEqual((run.status, run.attempts), ("failed", 1))
        self.assertIn("does not match its lines", steps(run)[0].error)

    def test_expense_approval__reimburses_once_the_manager_approves(self) -> None:
        run = start_workflow("expense_approval", {"employee": "ada", "amount_cents": 4200})
        self.assertEqual(run_workflows(), [])

        send_event(run, "manager approval", {"approved": True, "by": "grace"})
        self.assertEqual(run_workflows(), [run])

        run.refresh_from_db()
        self.assertEqual((run.output_data["reimbursed"], run.output_data["approved_by"]), (True, "grace"))

    def test_expense_approval__fails_after_three_days_without_an_answer(self) -> None:
        run = start_workflow("expense_approval", {"employee": "ada", "amount_cents": 4200})
        run_workflows()

        advance(timedelta(days=3, seconds=1))
        run_workflows()

        run.refresh_from_db()
        self.assertEqual(run.status, "failed")
        self.assertIn("EventTimeout", run.error_message)
