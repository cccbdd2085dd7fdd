"""Command-line entry points: ``run``, ``check``, ``offsets``, ``emulator``."""
