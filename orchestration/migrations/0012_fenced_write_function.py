"""The worker's fenced write as a function: ``orchestration_fenced_write``.

A step's start (with the previous step's deferred checkpoint) and the fence
before a run's other writes were one CTE statement each, sent in a pipeline
after ``sql.INDEX_PLANS_ONLY``'s ``set_config`` calls, so that their plans
never depend on fresh statistics. As a function the same writes carry those
planner settings in their ``SET`` clauses: one statement, no pipeline, about
a quarter less of the worker's CPU a step start (docs/performance.md), and
PL/pgSQL keeps each statement's plan for the connection's life.

Writes nothing unless lease ``p_lease`` still holds workflow ``p_id``
(running); then, in order: locks the row and, with a deferred checkpoint
(``p_checkpoint_step`` not NULL), moves ``current_step`` to it and resets the
deaths counted at one step (progress ends a crash loop), writes that step's
checkpoint (``completed_at`` is when its body returned, ``p_checkpoint_age``
seconds ago), and records step ``p_step`` running (none when NULL). The
claim's unnamed row for step 1 is this attempt's own start, not another.
Returns 1 if the lease held, else 0.
"""

from __future__ import annotations

from django.db import migrations

FENCED_WRITE = """
CREATE FUNCTION orchestration_fenced_write(
    p_id uuid, p_lease uuid, p_checkpoint_step integer, p_checkpoint_name text, p_checkpoint_output jsonb,
    p_checkpoint_age float8, p_step integer, p_name text
) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET enable_hashjoin = off
SET enable_mergejoin = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    -- IS NOT DISTINCT FROM keeps stale statistics from picking idx_workflows_running.
    UPDATE workflows
    SET current_step = COALESCE(p_checkpoint_step, current_step),
        worker_deaths = CASE WHEN p_checkpoint_step IS NULL THEN worker_deaths ELSE 0 END,
        lost_at_step = CASE WHEN p_checkpoint_step IS NULL THEN lost_at_step END
    WHERE id = p_id AND lease_token = p_lease AND status IS NOT DISTINCT FROM 'running';
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF p_checkpoint_step IS NOT NULL THEN
        UPDATE workflow_steps
        SET status = 'completed', output_data = p_checkpoint_output, error_message = NULL,
            step_name = p_checkpoint_name,
            completed_at = statement_timestamp() - make_interval(secs => p_checkpoint_age)
        WHERE workflow_id = p_id AND step_number = p_checkpoint_step;
    END IF;
    IF p_step IS NOT NULL THEN
        INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, started_at, attempts)
        VALUES (p_id, p_step, p_name, 'running', statement_timestamp(), 1)
        ON CONFLICT (workflow_id, step_number) DO UPDATE
        SET step_name = excluded.step_name, status = 'running', started_at = excluded.started_at,
            completed_at = NULL, error_message = NULL,
            attempts = workflow_steps.attempts
                + (workflow_steps.step_name IS NOT NULL OR workflow_steps.status <> 'running')::int;
    END IF;
    RETURN 1;
END
$$;
"""

DROP_FENCED_WRITE = """
DROP FUNCTION orchestration_fenced_write(uuid, uuid, integer, text, jsonb, float8, integer, text);
"""


class Migration(migrations.Migration):
    dependencies = [("orchestration", "0011_console_error_history")]

    operations = [migrations.RunSQL(FENCED_WRITE, DROP_FENCED_WRITE)]
