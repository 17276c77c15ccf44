"""Taste carried between stores: preference packs, and rule files (AGENTS.md, CLAUDE.md, Cursor rules)."""
