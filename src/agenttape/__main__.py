"""``python -m agenttape``: the same command line as ``agenttape``."""

from __future__ import annotations

import sys

from ._tools.cli import main

sys.exit(main())
