"""Query blocking: how many query rows to process at once.

Every exact computation in kernattn compares a block of queries with all keys. The block holds
a few (block × n_keys) float64 arrays, so its size is bounded by scikit-learn's global
``working_memory`` setting (MiB, ``sklearn.get_config()["working_memory"]``), and further by a
cache-sized target: blocks that stay in the CPU cache between the passes over them (logits,
``exp``, the weighted sum) are faster than blocks that stream through main memory.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn import get_config
from threadpoolctl import ThreadpoolController

# A block of about this many float64 entries (2 MiB) stays in cache between the passes over it
# (matmul output, exp, matmul input); larger blocks stream through main memory and are slower.
_CACHE_ENTRIES = 2**18
# Fewer rows than this turn the block's matrix products into slow matrix-vector products.
_MIN_ROWS = 8


def query_block_size(n_queries, n_keys, *, n_arrays=2, cache=True, n_workers=1):
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
    n_workers : int
        Blocks processed at the same time; they share the ``working_memory`` budget.
    """
    row_bytes = max(n_keys, 1) * 8 * n_arrays * n_workers
    budget = get_config()["working_memory"] * 2**20
    rows = int(budget // row_bytes)
    if cache:
        rows = min(rows, max(_CACHE_ENTRIES // max(n_keys, 1), _MIN_ROWS))
    return int(np.clip(rows, 1, max(n_queries, 1)))


def iter_query_blocks(n_queries, n_keys, **kwargs):
    """Yield slices covering ``range(n_queries)`` in blocks of :func:`query_block_size`."""
    step = query_block_size(n_queries, n_keys, **kwargs)
    for start in range(0, n_queries, step):
        yield slice(start, min(start + step, n_queries))


# Below this many query-key pairs a computation runs in one thread: starting threads costs
# more than it saves.
_PARALLEL_WORK = 2**20
_controller = None


def single_threaded_blas():
    """Context manager: BLAS uses one thread inside it.

    The blocked products here have a small inner dimension (features, head dimension), where
    BLAS threads gain little, and they spin-wait badly when the cores are busy (another
    process, or kernattn's own threads over blocks). Parallelism comes from the blocks instead.
    """
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")


def _n_workers(n_queries, n_keys):
    if n_queries * n_keys < _PARALLEL_WORK:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, n_queries // _MIN_ROWS))


def map_query_blocks(function, n_queries, n_keys, key_tile=None, **kwargs):
    """Call ``function(rows)`` for every query block, on all cores for large problems.

    numpy's ufuncs and matrix products release the GIL, so threads over disjoint blocks run
    in parallel. The blocks in flight share the ``working_memory`` budget. ``function``
    must write only to its own rows of any output. With ``key_tile``, ``function`` goes
    through the keys in tiles of that many, and the blocks are sized for one tile.
    """
    n_workers = _n_workers(n_queries, n_keys)
    width = n_keys if key_tile is None else min(n_keys, key_tile)
    blocks = list(iter_query_blocks(n_queries, width, n_workers=n_workers, **kwargs))
    with single_threaded_blas():
        if n_workers == 1 or len(blocks) == 1:
            for rows in blocks:
                function(rows)
            return
        with ThreadPoolExecutor(n_workers) as pool:
            # list() re-raises the first exception raised in any block.
            list(pool.map(function, blocks))
