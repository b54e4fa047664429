"""The files of docs/how-to/running-in-production.md are real, and checked: the
Kubernetes manifests against the Kubernetes schemas, the KEDA trigger's query
against the database (its count and its plan), the systemd unit by
``systemd-analyze verify``, the Compose file and the Dockerfile parsed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.db import connection
from django.utils import timezone

from orchestration import autoscaling
from orchestration.models import WorkflowQueue
from tests.factories import WorkflowFactory

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PAGE = ROOT / "docs" / "how-to" / "running-in-production.md"
KUBERNETES_VERSION = "1.30.0"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str) -> dict[str, Any]:
    found = [doc for path in DEPLOY.glob("kubernetes/*.yaml") for doc in documents(path) if doc["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def worker_container() -> dict[str, Any]:
    (container,) = of_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    return container


# -- Kubernetes ----------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("kubernetes/*.yaml")), ids=lambda path: path.name)
def test_kubernetes_manifest__each_core_resource_passes_the_kubernetes_schemas(path):
    for doc in documents(path):
        if doc["apiVersion"].startswith("keda.sh/"):
            continue  # KEDA's own resources: the schemas are Kubernetes', checked below by structure
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kubernetes_deployment__probes_run_workflows_health_for_this_host():
    container = worker_container()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:5] == ["python", "manage.py", "workflows", "health", "--this-host"], probe
    assert container["livenessProbe"]["exec"]["command"][5:] == ["--skip-migrations"]


def test_kubernetes_deployment__grace_outlasts_shutdown_grace_and_liveness_outlasts_the_grace():
    from orchestration.conf import DEFAULTS

    spec = of_kind("Deployment")["spec"]["template"]["spec"]
    liveness = worker_container()["livenessProbe"]
    assert spec["terminationGracePeriodSeconds"] > DEFAULTS["SHUTDOWN_GRACE"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > spec["terminationGracePeriodSeconds"]


def test_keda_scaled_object__scales_the_worker_deployment_with_the_postgresql_trigger():
    scaled = of_kind("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == of_kind("Deployment")["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    assert trigger["authenticationRef"]["name"] == of_kind("TriggerAuthentication")["metadata"]["name"]
    assert int(trigger["metadata"]["targetQueryValue"]) > 0
    (secret,) = of_kind("TriggerAuthentication")["spec"]["secretTargetRef"]
    assert secret["parameter"] == "connection"


def keda_query() -> str:
    (trigger,) = of_kind("ScaledObject")["spec"]["triggers"]
    return str(trigger["metadata"]["query"])


@pytest.fixture
def queues_of_each_kind(db):
    """Runs of every kind the count must tell apart."""
    past, future = timezone.now() - timezone.timedelta(minutes=1), timezone.now() + timezone.timedelta(hours=1)
    WorkflowFactory.create_batch(3, queue="default")  # due: never run
    WorkflowFactory(queue="default", run_after=past)  # due: a retry whose backoff passed
    WorkflowFactory(queue="default", run_after=future)  # not due: a timer
    WorkflowFactory(queue="default", status="running")
    WorkflowFactory(queue="default", status="completed")
    WorkflowFactory.create_batch(2, queue="emails")
    WorkflowQueue.objects.create(name="reports", paused=True)
    WorkflowFactory(queue="reports")  # a paused queue's: more workers would not start it


def test_due_by_queue__counts_the_runs_a_worker_would_claim_now(queues_of_each_kind):
    assert autoscaling.due_by_queue() == {"default": 4, "emails": 2}


def test_keda_query__counts_the_due_runs_of_the_queues_it_names(queues_of_each_kind):
    with connection.cursor() as cursor:
        cursor.execute(keda_query())
        assert cursor.fetchone() == (4,)


@pytest.fixture
def finished_history(db):
    """20,000 finished runs and 50 pending, analyzed: the planner weighs them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflows (workflow_type, status, queue, input_data) "
            "SELECT 'three_steps', CASE WHEN g % 400 = 0 THEN 'pending' ELSE 'completed' END, "
            "CASE WHEN g % 2 = 0 THEN 'default' ELSE 'emails' END, '{}' FROM generate_series(1, 20000) g"
        )
        cursor.execute("ANALYZE workflows")


def plan_of(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


def pending_only_indexes() -> set[str]:
    """The indexes of ``workflows`` that hold pending rows only."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'workflows' AND indexdef LIKE %s",
            ["%WHERE ((status)::text = 'pending'::text)%"],
        )
        return {row[0] for row in cursor.fetchall()}


INDEX_SCAN = r"Index (?:Only )?Scan (?:Backward )?using (\w+) on workflows|Bitmap Index Scan on (\w+)"


def reads_pending_entries_only(plan: str) -> bool:
    """Whether each index scan of ``workflows`` reads pending entries only: a
    partial index of pending rows, or an index searched on ``status = 'pending'``."""
    lines = plan.splitlines()
    partial, scans = pending_only_indexes(), 0
    for n, line in enumerate(lines):
        found = re.search(INDEX_SCAN, line)
        if not found:
            continue
        scans += 1
        following = lines[n + 1] if n + 1 < len(lines) else ""
        on_status = "Index Cond: ((status)::text = 'pending'::text)" in following
        if (found[1] or found[2]) not in partial and not on_status:
            return False
    return scans > 0


@pytest.mark.parametrize("query", ["due_by_queue", "keda"])
def test_autoscaling_query__reads_the_pending_entries_of_an_index__never_the_history(finished_history, query):
    plan = plan_of(autoscaling.DUE_BY_QUEUE_SQL if query == "due_by_queue" else keda_query())
    assert "Seq Scan on workflows" not in plan, plan
    assert reads_pending_entries_only(plan), plan


# -- systemd ---------------------------------------------------------------------------


def test_systemd_unit__passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    unit = (DEPLOY / "systemd" / "orchestration-worker.service").read_text()
    # The unit names the virtualenv it expects; verify checks that ExecStart is executable here.
    assert "ExecStart=/srv/orchestration/venv/bin/python manage.py runworkers" in unit
    path = tmp_path / "orchestration-worker.service"
    path.write_text(unit.replace("/srv/orchestration/venv/bin/python", sys.executable))
    done = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "orchestration-worker.service" not in done.stderr, done.stderr


def test_systemd_unit__is_type_notify_with_a_watchdog_and_a_stop_timeout_past_the_grace():
    from orchestration.conf import DEFAULTS

    unit = (DEPLOY / "systemd" / "orchestration-worker.service").read_text()
    settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.MULTILINE))
    assert settings["Type"] == "notify"
    assert settings["KillSignal"] == "SIGTERM"
    assert int(settings["TimeoutStopSec"]) > DEFAULTS["SHUTDOWN_GRACE"]
    assert int(settings["WatchdogSec"]) >= 3 * DEFAULTS["HEARTBEAT_INTERVAL"]


# -- Docker ----------------------------------------------------------------------------


def test_compose_file__parses_and_probes_its_workers_with_workflows_health():
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    worker = compose["services"]["worker"]
    assert worker["healthcheck"]["test"] == ["CMD", "python", "manage.py", "workflows", "health", "--this-host"]
    assert worker["stop_signal"] == "SIGTERM"
    assert int(worker["stop_grace_period"].rstrip("s")) > 30
    assert worker["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert (DEPLOY / "docker" / worker["build"]["context"]).resolve() == ROOT
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert compose["services"]["db"]["image"].startswith("postgres:")


def test_dockerfile__copies_files_that_exist_and_pins_what_requirements_pin():
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", text, re.MULTILINE):
        *sources, _ = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    pinned = dict(re.findall(r"^([\w-]+)==([\w.]+)$", (ROOT / "requirements.txt").read_text(), re.MULTILINE))
    for name, version in re.findall(r'"([\w-]+)==([\w.]+)"', text):
        assert pinned[name] == version, name
    assert 'CMD ["python", "manage.py", "workflows", "health", "--this-host"]' in text


# -- the page --------------------------------------------------------------------------


def test_page__shows_each_file_as_it_is_in_the_repository():
    page = PAGE.read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            assert f'--8<-- "{path.relative_to(ROOT)}"' in page, path
