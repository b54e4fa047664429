"""The claim: how a worker takes due runs, and completes the runs it finished
in the same statement.

One statement, one round trip, and in autocommit mode one transaction: the
runs finished since the last claim are completed (each fenced by its lease,
with its last step's checkpoint), then up to ``limit`` due runs are locked
``FOR NO KEY UPDATE SKIP LOCKED``, set running with a fresh lease and their
attempt counted, and a fresh run's step 1 recorded running. Which variant a
worker runs depends on the queues it serves (``rules.RulesCache``, read once
a poll interval) and on what this claim completes:

========= ================================== ================================== ====================================
variant   used when                          locks, besides the rows it takes   counts
========= ================================== ================================== ====================================
plain     no queue served is paused or       nothing                            nothing
          limited (and ``Lease.complete``, a
          claim of none)
counted   a served queue is paused or has a  the turn of each limited queue     each limited queue's running runs,
          ``concurrency`` limit, none a      served and its lanes               once, those completed here given
          per-key or rate limit, and the     (``LOCK_QUEUES``), waiting for     back
          claim may take more of its runs    them
          than it completes
hand-over as counted, but the claim takes no nothing: it hands over slots       the running runs, only to stop a
          more of each limited queue's runs  rather than wait                   hand-over while the queue runs over
          than it completes there, or                                           a lowered limit
          completes runs and finds the turn
          taken (``TRY_LOCK_QUEUES``)
in a lane as counted, one restricted queue   one of the queue's ``QUEUE_LANES`` the running runs twice: before the
          served, a concurrency limit alone, lanes (``TAKE_LANE``), never       lane (keeps claims near the limit
          ``LANE_MARGIN`` slots free, a      waiting; a claim in its turn holds out), and once it is held
          claim of at most ``LANE_CLAIM``    them all                           (``FREE_IN_LANE``, the count the
          runs                                                                  limit needs); then it claims as
                                                                                plain
limited   a served queue has a per-key or a  as counted                         per queue and per key: the running
          rate limit                                                            runs, and the claims of the rate's
                                                                                period (``workflow_queue_starts``)
========= ================================== ================================== ====================================

Plain is ``statements.COMPLETE_AND_CLAIM`` in the function
``orchestration_complete_and_claim``; counted, hand-over and in a lane are
the function ``orchestration_complete_and_claim_counted``, which picks one;
limited is ``orchestration_complete_and_claim_limited``. A claim keeps
nothing on its server connection past its transaction (behind PgBouncer in
transaction mode the next client gets that connection): its advisory locks
are the transaction's, its planner settings the function's ``SET`` clauses.

The package, by responsibility: ``statements`` (the SQL of every variant,
and of the fenced write each step's start makes), ``functions`` (the same as
PL/pgSQL functions, the DDL the migrations create them with, its
``fingerprint``), ``wire`` (``run``: how a hot statement reaches the server,
beneath the cursor), ``rules`` (what a worker knows of its queues, and its
share of a concurrency limit when claiming ahead), ``claims`` (the claim in
Python: parameters in, ``Lease``s out), ``lease`` (what a claim grants: a
claimed run, and every fenced write its worker makes with it, through
``wire``). This module imports none of them.

The operator's side of flow control (``set_queue_limits``, ``pause_queue``,
``resume_queue``, the settings' defaults, ``queue_states``) stays in
``orchestration.flow``: flow control is what users look for, the admin and
the ``workflow_queues`` command call it, and none of it runs in a claim; it
writes the rows a claim reads.
"""
