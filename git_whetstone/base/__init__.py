"""The base layer: what every other layer may use. The one error type, the configuration, today's
date, atomic file writes, and the files whetstone ships beside its code."""
