"""`python -m taskmanager`: a TaskManager process (taskmanager/server.py).

Arrow's default allocator, mimalloc, keeps the pages a finished batch or a finished task's
snapshot tables freed resident until it purges them, and a TaskManager that goes idle makes no
further call that would purge them: a 1 M-key job left ~150 MiB of freed Arrow memory resident
after it ended. MIMALLOC_PURGE_DELAY=0 purges pages as they become free (docs/monitoring.md,
"Memory"). It must be set before pyarrow loads; a value already in the environment wins.
"""

import os

os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")

from taskmanager.server import main

main()
