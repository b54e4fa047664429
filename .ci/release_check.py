"""``make release-check``: build the sdist and the wheel as a release would,
check them, and install the wheel (not editable) into fresh virtualenvs, each
running ``manage.py check`` and ``migrate`` in a throwaway project.

Run by the release tooling's virtualenv (requirements-release.txt). Each target
is ``PYTHON:DJANGO`` (a Python executable and the Django series to install,
pinned by requirements.txt). The database is the machine's PostgreSQL when
DATABASE_URL is set (a scratch database created and dropped there), else an
embedded one (pgserver) in a temporary directory, as .ci/run does.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What the wheel must ship beside the Python modules: every file of these folders.
SHIPPED = ("orchestration/templates", "orchestration/static", "orchestration/migrations")

SETTINGS = """
import os

import django

SECRET_KEY = "release-check"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles", "orchestration",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ROOT_URLCONF = "urls"
STATIC_URL = "static/"
USE_TZ = True
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    **{key: os.environ[f"RELEASE_CHECK_DB_{key}"] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT")},
}}
if django.VERSION >= (6, 0):  # the Tasks backend, checked too where Django has the framework
    TASKS = {"default": {"BACKEND": "orchestration.tasks.WorkflowBackend"}}
"""

URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

MANAGE = """
import os
import sys

from django.core.management import execute_from_command_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
execute_from_command_line(sys.argv)
"""

#: Run by a target's Python: start an embedded server in a directory with the
#: example project's embedded_db (pgserver's binaries, private to the caller),
#: print where it listens and its password, hold it until stdin closes.
EMBEDDED = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("embedded_db", sys.argv[2])
embedded_db = importlib.util.module_from_spec(spec)
spec.loader.exec_module(embedded_db)
settings = embedded_db.embedded_database(Path(sys.argv[1]))
print(settings["HOST"], settings["PORT"], settings["PASSWORD"], flush=True)
sys.stdin.read()
"""
EMBEDDED_DB = ROOT / "project" / "embedded_db.py"

SCRATCH = """
import sys, psycopg
from psycopg.sql import SQL, Identifier
statement = {"CREATE": "CREATE DATABASE {}", "DROP": "DROP DATABASE IF EXISTS {}"}[sys.argv[2]]
with psycopg.connect(sys.argv[1], autocommit=True) as connection:
    connection.execute(SQL(statement).format(Identifier(sys.argv[3])))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", metavar="PYTHON:DJANGO", help="e.g. python3.12:6 python3.11:5.2")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="release-check-") as scratch:
        work = Path(scratch)
        work.chmod(0o711)  # under root the embedded server's own OS account passes through to its folder
        sdist, wheel = build(work / "dist")
        step(f"twine check {sdist.name} {wheel.name}")
        run(sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel))
        check_contents(sdist, wheel)
        constraints = work / "constraints.txt"
        constraints.write_text(pins())
        for n, target in enumerate(options.targets):
            python, _, series = target.rpartition(":")
            install_and_migrate(work / f"venv-{n}", python, series, wheel, constraints)
    step("release check passed")
    return 0


def build(out: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it (as pip would build from a plain source tree)."""
    step("python -m build (sdist, then the wheel from the sdist)")
    run(sys.executable, "-m", "build", "--outdir", str(out), str(ROOT), quiet=True)
    [sdist], [wheel] = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return sdist, wheel


def check_contents(sdist: Path, wheel: Path) -> None:
    """The version is the package's ``__version__``; every template, static file
    and migration of the source tree is in the wheel, and nothing else but the package."""
    version = package_version()
    for artefact in (sdist, wheel):
        if f"-{version}" not in artefact.name:
            sys.exit(f"{artefact.name} is not version {version} (orchestration.__version__)")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        path.relative_to(ROOT).as_posix()
        for folder in SHIPPED
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    wanted.add("orchestration/py.typed")
    missing = sorted(wanted - names)
    if missing:
        sys.exit(f"the wheel lacks {len(missing)} file(s) of the package: {', '.join(missing[:10])}")
    step(f"version {version}; the wheel holds its {len(wanted)} templates, static files and migrations")
    # The benchmark harness and its commands are the repository's (project/), never a user's.
    ours = ("orchestration", f"django_orchestration-{version}.dist-info")
    strays = sorted(name for name in names if name.split("/", 1)[0] not in ours or "bench" in name)
    if strays:
        sys.exit(f"the wheel holds {len(strays)} file(s) that are not the package's: {', '.join(strays[:10])}")
    step("the wheel holds the orchestration package only: no benchmark harness, no example project")


def package_version() -> str:
    """``orchestration.__version__``, read without importing the package (which needs Django)."""
    tree = ast.parse((ROOT / "orchestration" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    sys.exit("orchestration/__init__.py has no __version__")


def pins() -> str:
    """requirements.txt's pins as pip constraints (which take no extras)."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return "\n".join(re.sub(r"\[[^]]*\]", "", line) for line in lines if "==" in line and not line.startswith("#"))


def install_and_migrate(venv: Path, python: str, series: str, wheel: Path, constraints: Path) -> None:
    """A fresh virtualenv of ``python`` with the wheel and Django ``series``;
    ``manage.py check`` and ``migrate`` of a throwaway project in it."""
    step(f"{python}: a fresh virtualenv with the wheel and Django {series}.x")
    run(python, "-m", "venv", "--without-pip", str(venv))  # this process's pip installs into it
    bin_python = str(venv / "bin" / "python")
    embedded = not os.environ.get("DATABASE_URL")
    extra = ["pgserver"] if embedded else []
    run(
        sys.executable, "-m", "pip", "--python", bin_python, "install", "--quiet", "--no-compile",
        f"{wheel}[binary]", f"Django=={series}.*", *extra, "-c", str(constraints), quiet=True,
    )  # fmt: skip
    project = venv / "project"
    project.mkdir()
    for name, text in (("settings.py", SETTINGS), ("urls.py", URLS), ("manage.py", MANAGE)):
        (project / name).write_text(text)
    with database(bin_python, venv, embedded) as settings:
        env = {**os.environ, **{f"RELEASE_CHECK_DB_{key}": value for key, value in settings.items()}}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        version = subprocess.check_output([bin_python, "-c", "import django; print(django.get_version())"], text=True)
        where = "an embedded PostgreSQL" if embedded else "a scratch database on DATABASE_URL's server"
        step(f"Django {version.strip()}: manage.py check and migrate, on {where}")
        run(bin_python, "manage.py", "check", "--fail-level", "WARNING", cwd=project, env=env)
        run(bin_python, "manage.py", "migrate", "--verbosity", "1", cwd=project, env=env, quiet=True)
        run(bin_python, "manage.py", "migrate", "--check", cwd=project, env=env)


class database:
    """The database a target migrates: a scratch database on DATABASE_URL's
    server (dropped after), or an embedded server in the virtualenv (deleted after)."""

    def __init__(self, python: str, venv: Path, embedded: bool) -> None:
        self.python, self.venv, self.embedded = python, venv, embedded

    def __enter__(self) -> dict[str, str]:
        if self.embedded:
            self.server = subprocess.Popen(
                [self.python, "-c", EMBEDDED, str(self.venv / "pgdata"), str(EMBEDDED_DB)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            host, port, password = (self.server.stdout.readline() if self.server.stdout else "").split()
            return {"NAME": "postgres", "USER": "postgres", "PASSWORD": password, "HOST": host, "PORT": port}
        url = urllib.parse.urlsplit(os.environ["DATABASE_URL"])
        self.name = f"release_check_{os.getpid()}"
        self.url = os.environ["DATABASE_URL"]
        run(self.python, "-c", SCRATCH, self.url, "CREATE", self.name)
        return {
            "NAME": self.name,
            "USER": urllib.parse.unquote(url.username or ""),
            "PASSWORD": urllib.parse.unquote(url.password or ""),
            "HOST": urllib.parse.unquote(url.hostname or ""),
            "PORT": str(url.port or ""),
        }

    def __exit__(self, *exc: object) -> None:
        if self.embedded:
            self.server.communicate("", timeout=60)
        else:
            run(self.python, "-c", SCRATCH, self.url, "DROP", self.name)


STARTED = time.monotonic()


def step(text: str) -> None:
    print(f"-- {time.monotonic() - STARTED:4.0f} s  {text}", flush=True)


def run(*command: str, quiet: bool = False, **options: object) -> None:
    """Run ``command``; on failure show its output and stop."""
    result = subprocess.run(command, capture_output=quiet, text=True, **options)  # type: ignore[call-overload]
    if result.returncode:
        if quiet:
            print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
        sys.exit(f"failed ({result.returncode}): {' '.join(command)}")


if __name__ == "__main__":
    sys.exit(main())
