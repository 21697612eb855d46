"""Worker processes: the process pool (``pool``: per-worker pipes, death detection, restarts), the inside of a
worker (``worker``) and the shared-memory transport of large tensors (``transport``)."""
