"""Allow ``python -m snowsource``."""

from snowsource.cli import main

raise SystemExit(main())
