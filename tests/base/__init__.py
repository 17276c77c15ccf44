"""The base layer: configuration."""
