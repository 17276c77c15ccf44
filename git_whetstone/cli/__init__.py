"""The command line door: `git whetstone …` (and `whetstone …`), click commands over the library's API.

`main` holds the group and the entry points; `loop` and `store` add the commands to it; `render`
prints their results.
"""
from . import loop, store  # (their commands join the group)
from .main import main, run, run_whetstone

__all__ = ["loop", "main", "run", "run_whetstone", "store"]
