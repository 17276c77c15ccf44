"""The store layer: one skill's repository, its writes, and what survives a killed writer."""
