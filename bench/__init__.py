"""The benchmark suite: ``python -m bench`` (or ``make bench``); see ``docs/performance.md``.

Every process measures only itself: the emulator runs in its own process, the bare pager and
the bare producer in theirs, the daemon is ``snowsource run`` as a subprocess whose CPU and RSS
come from ``/proc/<pid>``. Speed is measured here, never in tests.
"""
