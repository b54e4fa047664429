"""The pytest tests of "Testing workflows" (docs/how-to/testing-workflows.md),
with pytest-django and the kit's ``run_workflows`` fixture."""

# --8<-- [start:pytest]
import pytest
from django.contrib.auth.models import User

from orchestration import send_event, start_workflow


def test_an_approval_arrives(run_workflows):  # the fixture brings pytest-django's `db`
    run = start_workflow("approval")

    assert run_workflows() == []
    send_event(run, "decision", {"approved": True})
    assert run_workflows() == [run]


@pytest.mark.django_db(transaction=True)  # committed rows, as in production
def test_a_new_user_is_welcomed(run_workflows):
    User.objects.create(username="ada", email="ada@example.com")
    run = start_workflow("welcome", {"email": "ada@example.com"})

    assert run_workflows(skip_waits=True) == [run]


# --8<-- [end:pytest]
