"""A project of a user's own that tests its workflows with the kit: the
tutorial's shop app and the testing how-to's signup app, with their tests
(docs/examples), in a Django project made in a temporary directory, run by
``manage.py test`` and by pytest in a process of their own, with nothing of
this repository on their path but the installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.support import ROOT

MANAGE = """\
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
"""

SETTINGS = """\
SECRET_KEY = "only-for-this-test"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "orchestration", "shop", "signup"]
DATABASES = {{"default": {database!r}}}
"""


def downstream_project(directory: Path) -> Path:
    """The tutorial's project: its settings, its ``shop`` app and the how-to's ``signup``, each with its tests."""
    (directory / "manage.py").write_text(MANAGE)
    params = connection.get_connection_params()
    name = connection.settings_dict["NAME"]
    test_name = connection.settings_dict.get("TEST", {}).get("NAME") or f"test_{name}"
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": str(params.get("port", "")),
        "TEST": {"NAME": f"{test_name}_downstream"},  # beside this run's own
    }
    (directory / "site_settings.py").write_text(SETTINGS.format(database=database))
    (directory / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = site_settings\n")
    for app in ("shop", "signup"):
        shutil.copytree(ROOT / "docs" / "examples" / app, directory / app, ignore=shutil.ignore_patterns("__pycache__"))
    return directory


def run_in(project: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_downstream_project__runs_the_tutorials_tests_as_the_page_says(tmp_path: Path) -> None:
    project = downstream_project(tmp_path)

    done = run_in(project, sys.executable, "manage.py", "test", "shop", "--noinput", "-v", "2")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 2 tests" in done.stderr
    assert "test_an_order_is_charged_and_receipted (shop.tests.CheckoutTests" in done.stderr


def test_downstream_project__runs_the_how_tos_tests_with_manage_py_test(tmp_path: Path) -> None:
    project = downstream_project(tmp_path)

    done = run_in(project, sys.executable, "manage.py", "test", "signup", "--noinput")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 7 tests" in done.stderr


def test_downstream_project__tests_its_workflows_with_pytest_and_the_fixture(tmp_path: Path) -> None:
    project = downstream_project(tmp_path)

    done = run_in(project, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "signup/test_signup.py")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
