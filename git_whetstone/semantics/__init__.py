"""The semantics layer: what text means, with no store in sight. Words and their normal forms,
the embedding backends, and the judge that says whether two rules are the same, opposed or
unrelated."""
