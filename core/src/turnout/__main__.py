"""`python -m turnout`: the command line."""

from turnout.tools.cli import main

raise SystemExit(main())
