"""The operations of SPEC §4, grouped by job (`writing`, `recall`, `upkeep`, `sharing`, `sync`,
`looking`); the doors reach them through the API (`git_whetstone.api`)."""
