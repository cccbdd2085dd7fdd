"""Allow ``python -m snowsource``."""

from snowsource.cli.main import main

raise SystemExit(main())
