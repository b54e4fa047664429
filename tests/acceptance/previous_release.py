"""The previous release, taken from git history and installed into a virtualenv
of its own, so that its processes can run beside main's on one database.

Which release that is lives in one place, ``.ci/previous-release`` (its version
and commit; the tag ``v<version>`` may be missing from a fresh clone, the commit
never is). The install is kept in ``.previous-release/`` and reused while the
commit is the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / ".ci" / "previous-release"
INSTALLS = ROOT / ".previous-release"


@dataclass(frozen=True)
class Release:
    """A release's source tree and the Python of its virtualenv."""

    version: str
    commit: str
    root: Path
    python: Path

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` for a process of this release: its tree first on the path."""
        return {**base, "PYTHONPATH": str(self.root)}


def recorded() -> tuple[str, str]:
    """The previous release's version and commit, as ``.ci/previous-release`` records them."""
    lines = [line.split() for line in RECORD.read_text().splitlines() if line.strip() and not line.startswith("#")]
    (version, commit), *_ = lines
    return version, commit


def installed() -> Release:
    """The previous release, installed on first use (a minute; pip's cache helps)."""
    version, commit = recorded()
    home = INSTALLS / commit
    release = Release(version, commit, home / "src", home / "venv" / "bin" / "python")
    stamp = home / ".installed"
    if stamp.exists():
        return release
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    with tempfile.TemporaryFile() as archive:
        subprocess.run(["git", "archive", commit], cwd=ROOT, stdout=archive, check=True)
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(release.root, filter="data")
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(home / "venv")], check=True)
    pip = [str(release.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([*pip, "-r", "requirements.txt", "-e", "."], cwd=release.root, env=environment, check=True)
    stamp.write_text(commit + "\n")
    return release
