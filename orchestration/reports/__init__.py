"""The console's shared reports, read by the admin, the ``workflows`` and
``workflow_stats`` commands and the metrics alike: the figures (``stats``), the
list's filters and search (``listing``), its paginator (``pagination``), the
charts' geometry (``charts``) and the window of a run's steps a page shows
(``step_window``). Each reads unfinished rows through an index, so none slows
down on a table of millions of finished runs, nor a run's page on a run of
thousands of steps."""
