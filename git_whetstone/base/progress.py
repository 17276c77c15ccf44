"""How a long piece of work tells its caller how far it got: `progress(done, total)` (a door draws
a bar with it on a terminal)."""
from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int], None]
