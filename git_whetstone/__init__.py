"""whetstone: a git-native memory of one person's taste for AI skills.

The library API is one function per operation, each in the module of its concept:
`store.attach`, `retrieve.recall`, `capture.capture`, `capture.revise`, `metrics.metrics`,
and the read-only views in `browse`. The CLI (`cli`) and the MCP server (`mcp_entry`) are thin
wrappers over them. Nothing heavy is imported here, so `git whetstone -h` starts fast.
"""
__version__ = "0.1.0"
