"""logsleuth: why did the distributed training job hang or die?"""

from __future__ import annotations

__version__ = "0.1.0"
