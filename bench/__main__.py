"""``python -m bench``: see :mod:`bench.suite`."""

from bench.suite import main

main()
