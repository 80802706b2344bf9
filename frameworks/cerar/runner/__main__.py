"""`python -m cerar.runner ...`: cerarrun."""
import sys

from cerar.runner.cli import main

sys.exit(main())
