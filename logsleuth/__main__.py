"""Run ``python -m logsleuth``."""

from __future__ import annotations

import sys

from logsleuth.cli import main

sys.exit(main())
