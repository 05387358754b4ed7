"""``python -m kernattn``: the command line (see :mod:`kernattn.cli`)."""

import sys

from kernattn.cli import main

sys.exit(main())
