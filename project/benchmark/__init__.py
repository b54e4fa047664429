"""The harness of ``manage.py benchmark``, ``benchmark_admin`` and
``benchmark_upgrade``: a development tool of the repository, run from its
example project (``project/demo``'s commands, ``make bench``), and no part of
the package a user installs.

Importing it registers nothing: the benchmark's workflow type exists only in
the command's process and in the worker processes it starts
(``workflows.register``), so a project that installs orchestration never sees
it in its admin.
"""
