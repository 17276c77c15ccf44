"""The command line door: `git whetstone …` (and `whetstone …`), click commands over the library's API.

`main` holds the group and the entry points; `loop`, `store` and `host` add the commands to it;
`render` prints their results.
"""
from . import host, loop, store  # (their commands join the group)
from .main import main, run, run_whetstone

__all__ = ["host", "loop", "main", "run", "run_whetstone", "store"]
