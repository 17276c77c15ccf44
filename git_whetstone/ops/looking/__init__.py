"""Reading a store without changing it: list, show, path, log, doctor, metrics, and the report page."""
