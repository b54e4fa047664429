"""The worker's hot statements as PL/pgSQL functions, and their DDL.

Each hot statement was sent in a pipeline after ``statements.INDEX_PLANS_ONLY``'s
``set_config`` calls, so that its plan never depends on fresh statistics. As
a function it carries those planner settings in its ``SET`` clauses: one
statement, no pipeline, about a third less of the worker's CPU a round trip
(docs/performance.md), and PL/pgSQL keeps each of its statements' generic
plans for the connection's life.

The limit-aware claims take their queues' advisory locks in their function
too, so that a limited queue's claim is one statement as well.

The migrations create them from this module (``CREATE OR REPLACE``), each
with the ``fingerprint`` of the text it creates: a change here (or to a
statement a function is made of, in ``statements``) needs a new migration that runs
``create_functions`` again, or databases migrated before keep the old body; a
test fails until the last such migration carries the current fingerprint.
"""

from __future__ import annotations

import hashlib
import re

from . import statements

#: Planner settings of the functions: ``statements.INDEX_PLANS_ONLY``'s, as
#: ``SET`` clauses (why each is there: beside ``INDEX_PLANS_ONLY``).
_SETTINGS = """SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET enable_sort = off SET plan_cache_mode = force_generic_plan SET jit = off"""

#: ``orchestration_fenced_write``: writes nothing unless lease ``p_lease`` still
#: holds workflow ``p_id`` (running); then locks the row and, with a deferred
#: checkpoint (``p_checkpoint_step`` not NULL), moves ``current_step`` to it and
#: resets the deaths counted at one step (progress ends a crash loop), writes
#: that step's checkpoint (``completed_at`` is when its body returned,
#: ``p_checkpoint_age`` seconds ago), and records step ``p_step`` running (none
#: when NULL). The claim's unnamed row for step 1 is this attempt's own start,
#: not another. Returns 1 if the lease held, else 0.
FENCED_WRITE_BODY = """
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
"""

FENCED_WRITE = (
    """
CREATE OR REPLACE FUNCTION orchestration_fenced_write(
    p_id uuid, p_lease uuid, p_checkpoint_step integer, p_checkpoint_name text, p_checkpoint_output jsonb,
    p_checkpoint_age float8, p_step integer, p_name text
) RETURNS integer LANGUAGE plpgsql VOLATILE
"""
    + _SETTINGS
    + "\nAS $$"
    + FENCED_WRITE_BODY
    + "$$;"
)


def _in_function(statement: str) -> str:
    """``statement`` with its parameters as a function's (``p_``) and its limit bound (``p_limit``)."""
    return re.sub(r"%\((\w+)\)s", r"p_\1", statement.replace("{limit}", "p_limit")).rstrip()


#: The first statement of the limit-aware claims' functions: ``statements.MAKE_DUE``, unless it claims none.
MAKE_DUE = f"    IF p_limit > 0 THEN{_in_function(statements.MAKE_DUE)};\n    END IF;\n"


#: ``orchestration_complete_and_claim``'s body: ``statements.COMPLETE_AND_CLAIM`` with
#: its parameters as the function's (``p_``) and its limit bound. The columns it
#: returns share their names with the function's: ``use_column`` makes them the tables'.
CLAIM_BODY = (
    f"\n#variable_conflict use_column\nBEGIN\n    RETURN QUERY{_in_function(statements.COMPLETE_AND_CLAIM)};\nEND\n"
)


def _lock_query(statement: str) -> str:
    """``statements.LOCK_QUEUES`` or ``statements.TRY_LOCK_QUEUES`` in a function, its lock
    space written in and without its ``SELECT`` (for ``PERFORM`` or a subquery)."""
    return _in_function(statement.replace("%(space)s", str(statements.QUEUE_LOCK_SPACE)).strip().removeprefix("SELECT"))


def _locked_claim_body(statement: str) -> str:
    """A limit-aware claim's body: the advisory lock of each limited queue
    served (``statements.LOCK_QUEUES``), then ``statement``. Each statement of a
    VOLATILE function reads a snapshot of its own, so the claim, taken after
    the lock, sees every run the lock's previous holder claimed. Its
    ``statement_timestamp()`` is the call's, from before any wait for the
    lock; the rate limits' clock is ``clock_timestamp()``, read after it."""
    return (
        f"\n#variable_conflict use_column\nBEGIN\n{MAKE_DUE}    PERFORM{_lock_query(statements.LOCK_QUEUES)};\n"
        f"    RETURN QUERY{_in_function(statement)};\nEND\n"
    )


def _counted_claim_body() -> str:
    """``orchestration_complete_and_claim_counted``'s body. A claim that takes
    no more runs of a limited queue than it completes there cannot raise its
    running count: ``statements.HAND_OVER_COUNTED`` holds it to that and
    takes no turn on the queues' locks. One that may take more
    (``p_limited_room``) takes its turn, ``statements.COMPLETE_AND_CLAIM_COUNTED``
    after the lock; but if it completes runs and another claim holds the turn,
    it only hands over, rather than wait.

    Far from the limit it takes no turn at all: a claim of at most
    ``statements.LANE_CLAIM`` runs, when the only restricted queue served has
    a concurrency limit alone and ``statements.QUEUE_LANES`` times that many slots
    free, takes a free lane of the queue (``statements.TAKE_LANE``), counts
    the slots free again once the lane is held (``statements.FREE_IN_LANE``),
    and claims as an unlimited queue's (``statements.COMPLETE_AND_CLAIM``). A claim
    in its turn holds every lane, so none runs beside it; at most
    ``QUEUE_LANES`` claims in lanes are uncommitted at once, each of at most
    ``LANE_CLAIM`` runs, so the count each makes once its lane is held keeps
    all of them within the limit. Should that count find the queue no longer
    far from it, the claim only completes its runs (the next, counting
    first, takes its turn).

    ``p_lane_queue`` is a variable, named as ``FREE_IN_LANE``'s parameter."""
    lock, try_lock = _lock_query(statements.LOCK_QUEUES), _lock_query(statements.TRY_LOCK_QUEUES)

    def lane(statement: str) -> str:
        return _in_function(statement.replace("%(space)s", str(statements.QUEUE_LOCK_SPACE))).strip()

    claim = _in_function(statements.COMPLETE_AND_CLAIM)
    return f"""
#variable_conflict use_column
DECLARE
    v_in_turn boolean := p_limited_room > cardinality(p_ids::uuid[]);
    v_free bigint;
    p_lane_queue text;
BEGIN
{MAKE_DUE}    IF p_limit <= {statements.LANE_CLAIM} AND p_limited_room >= p_limit THEN
        p_lane_queue := ({lane(statements.TAKE_LANE)});
        IF p_lane_queue IS NOT NULL THEN
            v_free := ({_in_function(statements.FREE_IN_LANE).strip()});
            IF NOT COALESCE(v_free >= {statements.LANE_MARGIN}, false) THEN
                p_limit := 0;
            END IF;
            RETURN QUERY{claim};
            RETURN;
        END IF;
    END IF;
    IF v_in_turn AND cardinality(p_ids::uuid[]) > 0 THEN
        v_in_turn := COALESCE((SELECT{try_lock}), true);
    END IF;
    IF v_in_turn THEN
        PERFORM{lock};
        RETURN QUERY{_in_function(statements.COMPLETE_AND_CLAIM_COUNTED)};
    ELSE
        RETURN QUERY{_in_function(statements.HAND_OVER_COUNTED)};
    END IF;
END
"""


COUNTED_CLAIM_BODY = _counted_claim_body()
#: ``orchestration_complete_and_claim_limited``'s body: ``statements.COMPLETE_AND_CLAIM_LIMITED`` after its lock.
LIMITED_CLAIM_BODY = _locked_claim_body(statements.COMPLETE_AND_CLAIM_LIMITED)


#: The parameters and rows of both claims' functions.
_CLAIM_SIGNATURE = """(
    p_ids text, p_leases text, p_outputs text, p_steps text, p_step_names text, p_step_outputs text, p_ages text,
    p_worker text, p_queues text, p_limit integer
) RETURNS TABLE (
    id uuid, workflow_type varchar, input_data jsonb, lease_token uuid, attempts integer, max_retries integer,
    queue varchar, parent_id uuid, deadline timestamptz, fresh boolean, ids uuid[]
) LANGUAGE plpgsql VOLATILE
"""

COMPLETE_AND_CLAIM = (
    "\nCREATE OR REPLACE FUNCTION orchestration_complete_and_claim"
    + _CLAIM_SIGNATURE
    + _SETTINGS
    + "\nAS $$"
    + CLAIM_BODY
    + "$$;"
)


#: The limit-aware claims' parameters: the claim's, and the runs of concurrency-limited queues it may take.
_LIMIT_AWARE_SIGNATURE = _CLAIM_SIGNATURE.replace("p_limit integer", "p_limit integer, p_limited_room integer")


def _limit_aware(name: str, body: str) -> str:
    """A limit-aware claim's DDL, with ``INDEX_PLANS_ONLY``'s settings."""
    return f"\nCREATE OR REPLACE FUNCTION {name}{_LIMIT_AWARE_SIGNATURE}{_SETTINGS}\nAS $${body}$$;"


COMPLETE_AND_CLAIM_COUNTED = _limit_aware("orchestration_complete_and_claim_counted", COUNTED_CLAIM_BODY)
COMPLETE_AND_CLAIM_LIMITED = _limit_aware("orchestration_complete_and_claim_limited", LIMITED_CLAIM_BODY)

#: Each function's name, its DDL, and its body as ``pg_proc.prosrc`` holds it.
FUNCTIONS = {
    "orchestration_fenced_write": (FENCED_WRITE, FENCED_WRITE_BODY),
    "orchestration_complete_and_claim": (COMPLETE_AND_CLAIM, CLAIM_BODY),
    "orchestration_complete_and_claim_counted": (COMPLETE_AND_CLAIM_COUNTED, COUNTED_CLAIM_BODY),
    "orchestration_complete_and_claim_limited": (COMPLETE_AND_CLAIM_LIMITED, LIMITED_CLAIM_BODY),
}

#: Each function's DROP (a migration's reverse).
DROP = {
    "orchestration_fenced_write": "DROP FUNCTION orchestration_fenced_write(uuid, uuid, integer, text, jsonb, float8, "
    "integer, text);",
    "orchestration_complete_and_claim": "DROP FUNCTION orchestration_complete_and_claim("
    "text, text, text, text, text, text, text, text, text, integer);",
    **{
        name: f"DROP FUNCTION {name}(text, text, text, text, text, text, text, text, text, integer, integer);"
        for name in ("orchestration_complete_and_claim_counted", "orchestration_complete_and_claim_limited")
    },
}


def create_functions(*names: str) -> str:
    """The DDL that creates (or replaces) the functions ``names`` (all when none) as this module has them."""
    return "\n".join(FUNCTIONS[name][0] for name in names or FUNCTIONS)


def drop_functions(*names: str) -> str:
    return "\n".join(DROP[name] for name in names)


def fingerprint() -> str:
    """A digest of ``create_functions()``, which the last migration that creates them records."""
    return hashlib.sha256(create_functions().encode()).hexdigest()[:16]
