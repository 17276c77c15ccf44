"""The format layer: blocks, their validation, three-way merges."""
