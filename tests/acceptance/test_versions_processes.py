"""Versions with real processes: a deploy between a run's start and its end
(``ctx.patched``), forks run by a worker, and starts of one key from many processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from orchestration import fork_workflow, start_workflow
from orchestration.models import Workflow
from tests.support import ROOT, run_burst, worker_env
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def burst_on(version: int) -> None:
    result = run_burst("--concurrency", "2", env=worker_env(TESTAPP_CODE_VERSION=str(version)))
    assert result.returncode == 0, result.stdout + result.stderr


def bodies_run(workflow: Workflow) -> list[str]:
    return list(StepRun.objects.filter(workflow_id=workflow.pk).order_by("id").values_list("label", flat=True))


def test_patched__a_run_suspended_on_the_old_code_resumes_through_the_old_branch_and_a_new_run_takes_the_new():
    old = start_workflow("versioned", {"settle": 1})
    burst_on(1)  # charges, then sleeps: the burst leaves it pending
    assert Workflow.objects.get(pk=old.pk).waiting_for is not None
    new = start_workflow("versioned", {})
    time.sleep(max(0.0, (Workflow.objects.get(pk=old.pk).run_after.timestamp() - time.time())))
    burst_on(2)
    old, new = Workflow.objects.get(pk=old.pk), Workflow.objects.get(pk=new.pk)
    assert (old.status, old.output_data, old.patches, bodies_run(old)) == (
        "completed",
        "charge",
        None,
        ["charge", "ship"],
    )
    assert (new.status, new.output_data, new.patches) == ("completed", "charge v2", {"charge-v2": 1})


def test_rolling_deploy__a_worker_of_the_old_code_gives_runs_of_a_new_type_back_and_one_of_the_new_runs_them():
    runs = [start_workflow("added_in_a_deploy") for _ in range(3)]
    old_code = run_burst("--concurrency", "2", env=worker_env(TESTAPP_OLD_CODE="1"))
    assert old_code.returncode == 0, old_code.stderr
    assert old_code.stderr.count("does not register workflow type 'added_in_a_deploy'") == 1
    for run in Workflow.objects.filter(pk__in=[run.pk for run in runs]):
        assert (run.status, run.attempts, run.error_message, bodies_run(run)) == ("pending", 0, None, [])
    time.sleep(max(0.0, max(run.run_after.timestamp() for run in Workflow.objects.all()) - time.time()))
    burst_on(1)  # the new code
    assert sorted(Workflow.objects.values_list("status", "attempts", "output_data")) == [("completed", 1, "new")] * 3


def test_fork__a_forked_run_completes_without_running_the_copied_steps_again():
    original = start_workflow("three_steps", {"order": 7})
    burst_on(1)
    fork = fork_workflow(original, from_step=3)
    burst_on(1)
    original, fork = Workflow.objects.get(pk=original.pk), Workflow.objects.get(pk=fork.pk)
    assert (fork.status, fork.output_data) == ("completed", original.output_data)
    assert bodies_run(fork) == ["third"] and bodies_run(original) == ["first", "second", "third"]


def test_starts_of_one_key_from_4_processes__20_unique_make_one_run_and_50_debounced_one_with_a_last_input():
    at = time.time() + 2  # past every process's start-up
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.acceptance.start_burst", str(p), str(at), "5", str(13 if p < 2 else 12)],
            cwd=ROOT,
            env=worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(4)
    ]
    started: dict[str, set[str]] = {"unique": set(), "debounce": set()}
    last_inputs = []
    for p, process in enumerate(processes):
        output, errors = process.communicate(timeout=60)
        assert process.returncode == 0, errors
        lines = [json.loads(line) for line in output.splitlines()]
        for option, _, run_id in lines:
            started[option].add(run_id)
        last_inputs.append({"process": p, "n": lines[-1][1]})
    assert len(started["unique"]) == 1 and len(started["debounce"]) == 1
    unique, debounced = Workflow.objects.get(key_scope="active"), Workflow.objects.get(key_scope="debounce")
    assert Workflow.objects.count() == 2
    assert started == {"unique": {str(unique.pk)}, "debounce": {str(debounced.pk)}}
    assert debounced.input_data in last_inputs  # the latest start is the last of one of the processes
