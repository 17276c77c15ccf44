"""The operations layer: one library function per thing a person or an agent does (SPEC §4).
recall, capture and revise; attach and the hooks; compact and the global layer; packs and rule
files; remotes and sync; edit, validate, doctor, metrics and the read-only views. The CLI, the
hook shims and the MCP server are thin doors over these."""
