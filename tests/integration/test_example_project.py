"""The example project's settings and demo: safe unless asked otherwise."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import override_settings

from tests.support import ROOT

READ_SETTINGS = "from django.conf import settings; print(settings.DEBUG); print(settings.SECRET_KEY)"


def example_settings(**env: str) -> list[str]:
    """DEBUG and SECRET_KEY as the example project reads them from ``env`` (a database named, not started)."""
    clean = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "SECRET_KEY")}
    clean.update(DJANGO_SETTINGS_MODULE="project.settings", DATABASE_URL="postgres://nobody@127.0.0.1:1/none", **env)
    code = f"import django; django.setup(); {READ_SETTINGS}"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_example_settings__debug_is_off_unless_asked_for():
    assert example_settings()[0] == "False"
    assert example_settings(DEBUG="on")[0] == "True"


def test_example_settings__without_secret_key__use_one_made_for_this_checkout():
    key = example_settings()[1]
    assert key == (ROOT / ".pgdata" / "secret_key").read_text().strip()
    assert len(key) >= 50 and "insecure" not in key
    assert example_settings(SECRET_KEY="from-the-environment")[1] == "from-the-environment"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("embedded", "made"), [(True, True), (False, False)])
def test_run_demo__makes_the_demo_user_only_in_the_embedded_database(embedded, made):
    with override_settings(EMBEDDED_DATABASE=embedded):
        call_command("run_demo", "--orders", "1", "--timeout", "0.1", stdout=io.StringIO(), stderr=io.StringIO())
    assert User.objects.filter(username="demo").exists() is made
