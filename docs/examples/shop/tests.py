"""The tutorial's tests of its shop (``docs/tutorial.md``, "Test it"): the page
includes this module, and ``tests/integration/test_downstream_project.py``
runs it with ``manage.py test`` in a project of its own, as the page says."""

# --8<-- [start:tests]
from django.test import TestCase

from orchestration.testing import run_workflows, steps

from .workflows import order_status, place_order


class CheckoutTests(TestCase):
    def test_an_order_is_charged_and_receipted(self):
        run = place_order(7, "ada@example.com", ["book", "lamp"], 1299)

        finished = run_workflows()  # runs it here, in this test's transaction

        self.assertEqual(finished, [run])
        self.assertEqual(
            order_status(run.id),
            {"status": "completed", "output": {"charge_id": "ch_7", "reservation": "res-7"}, "error": None},
        )
        self.assertEqual([step.name for step in steps(run)], ["reserve stock", "charge card", "send receipt"])

    def test_an_order_with_nothing_to_charge_fails_without_retries(self):
        run = place_order(9, "ada@example.com", ["voucher"], 0)

        run_workflows()

        self.assertEqual(order_status(run.id)["status"], "failed")
        charge = steps(run)[1]
        self.assertEqual((charge.name, charge.status), ("charge card", "failed"))
        self.assertIn("nothing to charge", charge.error)


# --8<-- [end:tests]
