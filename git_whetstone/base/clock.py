"""Today's date, as whetstone sees it: the real one, or the one WHETSTONE_TODAY pins."""
from __future__ import annotations

import datetime as dt
import os

from .errors import WhetstoneError, shown


def today() -> dt.date:
    """Today's date; WHETSTONE_TODAY (YYYY-MM-DD) pins it for tests and benchmarks."""
    pinned = os.environ.get("WHETSTONE_TODAY")
    if pinned:
        try:
            return dt.date.fromisoformat(pinned)
        except ValueError:
            raise WhetstoneError(f"WHETSTONE_TODAY: expected YYYY-MM-DD, got {shown(pinned)}") from None
    return dt.date.today()
