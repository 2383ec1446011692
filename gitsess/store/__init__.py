"""SQLite (apsw) storage: the per-repository session registry and the per-user repository index."""
