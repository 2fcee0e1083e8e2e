"""`python -m hlofuse`: the `hlofuse` command where its console script is not installed."""
import sys

from .cli import main

sys.exit(main())
