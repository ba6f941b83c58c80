"""`python -m turnout`: the command line."""

from .cli import main

raise SystemExit(main())
