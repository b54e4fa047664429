"""``ctx``: what a workflow function receives, and what runs inside a run.

``context`` numbers, replays and runs the steps, and makes a run's sleeps,
events and children; ``async_context`` is the ``ctx`` of an ``async def``
workflow, whose engine calls are the sync context's; ``patches`` decides
``ctx.patched`` from the run's history; ``timeouts`` runs a step body under
its time limit. The package's public names are ``orchestration``'s."""
