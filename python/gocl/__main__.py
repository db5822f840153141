"""``python -m gocl`` is the ``gocl`` command."""

import sys

from .cli import main

sys.exit(main())
