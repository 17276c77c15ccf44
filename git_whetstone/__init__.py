"""whetstone: a git-native memory of one person's taste for AI skills.

The library's API is `api`: one function per operation (`api.attach`, `api.recall`,
`api.capture`, `api.revise`, `api.metrics`, …), over the layers below it (ARCHITECTURE.md). The CLI
(`cli`), the hook shims and the MCP server (`mcp_entry`) are thin doors onto it. Nothing heavy is imported here, so `git whetstone -h` starts fast.
"""
import os as _os

__version__ = "0.1.0"

# One BLAS thread unless the user chose otherwise (read when numpy loads, so it is set here). A
# recall makes a handful of small matrix products; with a second OpenBLAS thread each one waits
# for another core, and on a 2-core machine shared with the agent host and its builds that wait
# is a scheduler slice (4-8 ms a product, measured by bench/run.py), more than the product itself.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
