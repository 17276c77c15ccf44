"""The format layer: the markdown that is the store's truth, as pure text. Blocks and their
validation, the names of files on disk, next_ids.json, and merging a scope file three ways.
Nothing here touches a disk or runs git."""
