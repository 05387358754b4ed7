"""Query blocking: how many query rows to process at once.

Every exact computation in kernattn compares a block of queries with all keys. The block holds
a few (block × n_keys) float64 arrays, so its size is bounded by scikit-learn's global
``working_memory`` setting (MiB, ``sklearn.get_config()["working_memory"]``), and further by a
cache-sized target: blocks that stay in the CPU cache between the passes over them (logits,
``exp``, the weighted sum) are faster than blocks that stream through main memory.
"""

import numpy as np
from sklearn import get_config

# A block of about this many float64 entries stays in a typical L2 cache, so the passes over it
# (matmul output, exp, matmul input) do not go back to main memory.
_CACHE_ENTRIES = 2**15


def query_block_size(n_queries, n_keys, *, n_arrays=2, cache=True):
    """Number of query rows per block.

    Parameters
    ----------
    n_queries, n_keys : int
        Sizes of the full problem.
    n_arrays : int
        How many (block × n_keys) float64 arrays live at once.
    cache : bool
        Also cap the block at a cache-sized number of entries (faster for a single pass);
        only ``working_memory`` bounds it otherwise.
    """
    row_bytes = max(n_keys, 1) * 8 * n_arrays
    budget = get_config()["working_memory"] * 2**20
    rows = int(budget // row_bytes)
    if cache:
        rows = min(rows, _CACHE_ENTRIES // max(n_keys, 1))
    return int(np.clip(rows, 1, max(n_queries, 1)))


def iter_query_blocks(n_queries, n_keys, **kwargs):
    """Yield slices covering ``range(n_queries)`` in blocks of :func:`query_block_size`."""
    step = query_block_size(n_queries, n_keys, **kwargs)
    for start in range(0, n_queries, step):
        yield slice(start, min(start + step, n_queries))
