"""Worker processes: the one process pool (``pool``: per-worker pipes, death detection; ``handle``: one worker as
the pool sees it; ``supervision``: restarts, or a stop under start and task deadlines), the inside of a worker
(``worker``), the ending of closed pools' workers in the background (``reaper``) and the shared-memory transport of
large tensors (``transport``). The loader's ``OrderedMapper`` and the cache's writer processes run on it."""
