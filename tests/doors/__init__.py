"""The doors: the command line, the MCP server, git itself."""
