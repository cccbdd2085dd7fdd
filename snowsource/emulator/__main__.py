"""Allow ``python -m snowsource.emulator`` (same arguments as ``snowsource emulator``)."""

import sys

from snowsource.emulator.cli import main

raise SystemExit(main(sys.argv[1:]))
