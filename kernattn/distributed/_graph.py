"""Tasks of a Dask graph as kernattn runs them: scikit-learn's ``working_memory`` carried to
the workers, one thread per task, results merged up a tree in the order of the parts."""

import functools
import uuid

import dask
from joblib import parallel_config
from sklearn import config_context, get_config

from kernattn._core.rows import tree_merge


def _configured(function, config, *args):
    # One task, one thread: the cluster's workers are the parallelism (an estimator's own
    # n_jobs=None would start a thread per core in every worker).
    with config_context(**config), parallel_config(n_jobs=1):
        return function(*args)


def task(function):
    """``function`` as a task of the graph, run on the worker under this thread's
    ``working_memory`` (scikit-learn's configuration is not sent to the workers by itself,
    and the blocks of a computation are sized from it) and on one thread. Tasks are pure:
    the same arguments name the same result, which the scheduler recomputes from the graph
    where a worker that held it is lost."""
    config = {"working_memory": get_config()["working_memory"]}
    return dask.delayed(functools.partial(_configured, function, config), pure=True)


def shared(value):
    """A value many tasks read (a fitted kernel, a model) as one node of the graph: each
    worker fetches it once, and the graph holds it, so a lost copy is rebuilt."""
    return dask.delayed(value, name=f"kernattn-shared-{uuid.uuid4().hex}", pure=False)


def tree(parts, merge):
    """``merge`` as a task applied up a tree of at most ``SPLIT_EVERY`` parts per node, in
    the order of the parts (never in the order in which they finish):
    :func:`kernattn._core.rows.tree_merge` on the graph."""
    return tree_merge(parts, task(merge))


def blocks(*arrays):
    """Per row block, the delayed blocks of each array (``None`` stays ``None``)."""
    columns = []
    for a in arrays:
        if a is None:
            columns.append(None)
            continue
        delayed = a.to_delayed()
        columns.append(delayed.reshape(delayed.shape[0], -1)[:, 0])
    n = len(next(c for c in columns if c is not None))
    return [tuple(None if c is None else c[i] for c in columns) for i in range(n)]
