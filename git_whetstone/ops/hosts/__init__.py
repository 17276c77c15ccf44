"""What agent hosts run on their own: the context a prompt hook adds, and the hook entries in a host's settings."""
