"""Keeping a store tidy: compact's structural pass and its advice, and the global layer."""
