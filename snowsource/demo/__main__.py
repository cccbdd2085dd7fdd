"""``python -m snowsource.demo``."""

from snowsource.demo.run import main

raise SystemExit(main())
