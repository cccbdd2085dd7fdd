"""``make demo``: snowsource streaming the bundled ServiceNow emulator into the local Kafka, live.

    python -m snowsource.demo                      # until Ctrl-C (headless: DEMO_SECONDS=N)
    python -m snowsource.demo peek TOPIC [--count N] [--bootstrap HOST:PORT]

What it does:

1. checks that Kafka answers (``make demo`` has started the local broker already);
2. starts ``snowsource emulator`` as a process on a free port, seeded with incident,
   change_request and cmdb_ci rows plus ongoing activity;
3. writes a configuration derived from ``config.example.yaml`` into a fresh temporary directory
   (a unique connector name per run, so every run backfills from scratch);
4. runs ``snowsource run`` as a process with JSON logs and shows, per table, rows delivered to
   Kafka, a progress bar with an ETA while it backfills, lag once it streams, and the last
   warning the daemon logged for it. Rows come from reading the output topics back (what really
   reached Kafka); phase, lag, warnings and failures from the daemon's log lines;
5. on Ctrl-C (or after ``DEMO_SECONDS``) stops the daemon with SIGTERM (a clean shutdown commits
   what Kafka acknowledged), then the emulator, and prints a summary and commands to look at the
   topics and offsets. The configuration and logs stay in the temporary directory.

Modules: ``options`` (environment), ``processes`` (child processes), ``config`` (the derived
configuration), ``progress`` (what a table's line says: pure), ``screen`` (drawing it),
``tracker`` (reading the topics back, ``peek``), ``run`` (the whole run).

Exit code: 0 when the daemon shut down cleanly and every table delivered rows (Ctrl-C is a clean
stop); 1 otherwise.
"""
