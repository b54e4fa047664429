"""The console's shared reports, read by the admin, the ``workflows`` and
``workflow_stats`` commands and the metrics alike: the figures (``stats``), the
list's filters and search (``listing``), its paginator (``pagination``) and the
charts' geometry (``charts``). Each reads unfinished rows through an index, so
none slows down on a table of millions of finished runs."""
