"""The harness of ``manage.py benchmark``.

Importing it registers nothing: the benchmark's workflow type exists only in
the command's process and in the worker processes it starts
(``workflows.register``), so a project that installs orchestration never sees
it in its admin.
"""
