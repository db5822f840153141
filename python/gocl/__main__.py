"""``python -m gocl`` is the ``gocl`` command."""

import sys

from .tools.cli import main

sys.exit(main())
