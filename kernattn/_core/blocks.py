"""Query blocks and the threads that process them.

Every exact computation in kernattn compares a block of queries with the keys. A block holds a
few (rows × keys) arrays, so its size is bounded by scikit-learn's global ``working_memory``
setting (MiB, ``sklearn.get_config()["working_memory"]``), and, for single passes, by a
cache-sized target: blocks that stay in the CPU cache between the passes over them (logits,
``exp``, the weighted sum) are faster than blocks that stream through main memory.

Blocks are independent, and numpy's ufuncs and matrix products release the GIL, so
:func:`map_query_blocks` runs them on threads. BLAS is held to one thread meanwhile: the
products have a small inner dimension (features, head dimension), where BLAS threads gain
little, and they spin-wait badly when the cores are already busy. The number of threads
follows ``n_jobs`` (``None`` means all cores) and never exceeds a thread limit set around the
call with ``threadpoolctl.threadpool_limits`` or ``joblib.parallel_config``, nor the limit a
joblib worker process runs under, so nested parallelism does not oversubscribe the cores.
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from joblib.parallel import get_active_backend
from sklearn import get_config
from threadpoolctl import ThreadpoolController

#: Keys per tile of the kernel sums (:mod:`kernattn._core.sums`): a block of queries meets the keys
#: a tile at a time, and a (block × tile) array of logits stays in cache.
KEY_TILE = 512
# A block of about this many float64 entries (1 MiB) stays in cache between the passes over it
# (matmul output, exp, matmul input); larger blocks stream through main memory and are slower.
_CACHE_ENTRIES = 2**17
# Fewer rows than this turn the block's matrix products into slow matrix-vector products.
_MIN_ROWS = 8
# Below this many query-key pairs a computation runs in one thread: starting threads costs
# more than it saves.
_PARALLEL_WORK = 2**20

_controller = None


def _threadpool_controller():
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller


def query_block_size(n_queries, n_keys, *, n_arrays=2, cache=True, n_workers=1, itemsize=8):
    """Number of query rows per block.

    Parameters
    ----------
    n_queries, n_keys : int
        Sizes of the full problem.
    n_arrays : int
        How many (block × n_keys) arrays live at once.
    cache : bool or int
        Also cap the block at a cache-sized number of entries per array (faster for a single
        pass; an int gives that number, for computations that make several passes over a
        block); only ``working_memory`` bounds it with ``False``.
    n_workers : int
        Blocks processed at the same time; they share the ``working_memory`` budget.
    itemsize : int
        Bytes per entry (8 for float64, 4 for float32).
    """
    row_bytes = max(n_keys, 1) * itemsize * n_arrays * n_workers
    budget = get_config()["working_memory"] * 2**20
    rows = int(budget // row_bytes)
    if cache:
        entries = _CACHE_ENTRIES if cache is True else int(cache)
        rows = min(rows, max(entries * 8 // itemsize // max(n_keys, 1), _MIN_ROWS))
    # Plain integers: this runs once per cell of a split kernel's prediction, where numpy's
    # scalar clip cost more than the block it sized.
    return int(min(max(rows, 1), max(n_queries, 1)))


def iter_query_blocks(n_queries, n_keys, **kwargs):
    """Yield slices covering ``range(n_queries)`` in blocks of :func:`query_block_size`."""
    step = query_block_size(n_queries, n_keys, **kwargs)
    for start in range(0, n_queries, step):
        yield slice(start, min(start + step, n_queries))


# Thread limits read when kernattn's own single-threaded BLAS sections were entered: inside
# one, the limit in force is kernattn's, and the caller's is the one recorded here. Per thread:
# a worker thread sees kernattn's limit of 1, so blocks never start threads of their own.
_local = threading.local()


def _outer_limits():
    if not hasattr(_local, "limits"):
        _local.limits = []
    return _local.limits


@contextmanager
def single_threaded_blas():
    """Context manager: BLAS uses one thread inside it (and threads over blocks honor the
    thread limit that was in force outside it)."""
    limits = _outer_limits()
    limits.append(_thread_limit())
    try:
        with _threadpool_controller().limit(limits=1, user_api="blas"):
            yield
    finally:
        limits.pop()


def available_cores():
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _thread_limit():
    """The smallest BLAS/OpenMP thread limit in force around the call (all cores if none)."""
    limits = _outer_limits()
    if limits:
        return limits[-1]
    limits = [info["num_threads"] for info in _threadpool_controller().info()]
    return max(1, min(limits) if limits else available_cores())


def effective_n_jobs(n_jobs=None):
    """Threads for ``n_jobs``.

    ``None`` means all cores, or the ``n_jobs`` of an enclosing
    ``joblib.parallel_config``; −1 all cores, −2 all but one, …; a positive value as
    given. Never more than the thread limit in force around the call.
    """
    cores = available_cores()
    if n_jobs is None:
        _, configured = get_active_backend()
        n_jobs = configured if configured is not None else -1
    n = n_jobs if n_jobs > 0 else max(cores + 1 + n_jobs, 1)
    return max(1, min(n, _thread_limit()))


def n_workers(n_queries, n_keys, n_jobs=None, cost=1):
    """Threads worth starting for ``n_queries × n_keys`` work under ``n_jobs``, each pair
    ``cost`` times a kernel sum's work."""
    if n_queries * n_keys * cost < _PARALLEL_WORK or n_jobs == 1:
        return 1
    return max(1, min(effective_n_jobs(n_jobs), n_queries // _MIN_ROWS))


def map_query_blocks(function, n_queries, n_keys, *, n_jobs=None, key_tile=None, cost=1, **kwargs):
    """Call ``function(rows)`` for every query block, on threads for large problems.

    ``function`` must write only to its own rows of any output; what it returns is
    collected in block order (for reductions such as a gradient, summed by the caller in
    that order so that the result does not depend on the number of threads). The blocks
    in flight share the ``working_memory`` budget. With ``key_tile``, ``function`` goes
    through the keys in tiles of that many, and the blocks are sized for one tile.
    ``cost``: the work per query-key pair in units of a kernel sum's, where it is larger
    (Newton steps over each block): threads start at fewer pairs.

    Returns
    -------
    results : list
        ``function``'s return values, one per block, in order.
    """
    workers = n_workers(n_queries, n_keys, n_jobs, cost)
    width = n_keys if key_tile is None else min(n_keys, key_tile)
    blocks = list(iter_query_blocks(n_queries, width, n_workers=workers, **kwargs))
    with single_threaded_blas():
        if workers == 1 or len(blocks) == 1:
            return [function(rows) for rows in blocks]
        with ThreadPoolExecutor(min(workers, len(blocks))) as pool:
            # list() re-raises the first exception raised in any block.
            return list(pool.map(function, blocks))
