"""What the engine tells operators about the runs: Prometheus ``metrics`` (its
page, ``metrics_view``, at the public path ``orchestration.metrics``), OpenTelemetry
``tracing``, ``observe`` (the two decorators that put both around each attempt and
step) and the log lines about runs (``logs``). Each is optional or costs one
look-up without its library."""
