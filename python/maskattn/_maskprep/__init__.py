"""maskprep, the host compiler (Cython over C++: ``plan`` compiles masks into block plans, ``rcm`` orders graph
nodes), and how many threads its workers take by default."""

import functools
import os


@functools.lru_cache(maxsize=None)
def default_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))
