"""The git layer: the one runner of the `git` binary, reading files as git holds them, the one
scanner of the history for ids, and the locks that keep writers (and git itself) apart."""
