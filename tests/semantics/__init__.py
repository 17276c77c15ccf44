"""The semantics layer: words, embedding backends, the judge."""
