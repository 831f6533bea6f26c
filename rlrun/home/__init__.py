"""The runs home as folders: removal, garbage collection, rebuilding the registry from the run
folders, importing runs copied from elsewhere (`maintenance`), and reading a run folder in place
(`folders`, the one reader of a run folder's manifest outside the registry)."""
