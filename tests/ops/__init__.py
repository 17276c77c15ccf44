"""The operations, through the library."""
