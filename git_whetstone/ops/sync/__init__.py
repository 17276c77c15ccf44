"""A store among git's other users: remotes, sync, the merge drivers, ids settled after a merge,
and the hooks a store carries."""
