"""The partitions of dask collections as training rows in parts
(:class:`kernattn._core.rows.Rows`).

Every part's task runs on the worker that holds the partition; the results are merged up a
tree in the order of the partitions, so a rerun, or a run in which a worker was lost and its
tasks recomputed elsewhere, gives the same numbers to the last bit.
"""

import dask
import dask.array as da
import numpy as np

from kernattn._core.rows import Part, Rows
from kernattn.distributed._collections import (
    as_dask_array,
    feature_names,
    is_dataframe,
    rows_like,
)
from kernattn.distributed._graph import blocks, shared, task, tree


class DaskRows(Rows):
    """Training rows that are dask arrays with the same row chunks (``sample_weight`` may be
    ``None``); ``frame``, a dask dataframe the inputs came from (for its column names)."""

    keeps_rows = True

    def __init__(self, X, y, sample_weight=None, frame=None):
        self.X, self.y, self.sample_weight = X, y, sample_weight
        self.frame = frame
        self.n_rows, self.n_features = X.shape
        self.n_parts = X.numblocks[0]
        self.target_shape = y.shape[1:]
        self.dtype = X.dtype
        self.feature_names = None if frame is None else feature_names(frame)

    @classmethod
    def from_collections(cls, X, y, sample_weight=None):
        """Dask arrays, dataframes or series (``y`` and ``sample_weight`` may also be numpy
        arrays), checked: two-dimensional inputs, one or two-dimensional targets, one target
        and weight per row."""
        frame = X if is_dataframe(X) else None
        X = as_dask_array(X, "X", ndim=(2,)).rechunk({1: -1})
        y = rows_like(y, X, "y")
        if y is None or y.ndim not in (1, 2):
            raise ValueError(f"y must have 1 or 2 dimensions; got {None if y is None else y.ndim}")
        w = rows_like(sample_weight, X, "sample_weight")
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"X must have at least one row and one feature; got shape {X.shape}")
        return cls(X, y, w, frame)

    def _parts(self):
        starts = np.concatenate([[0], np.cumsum(self.X.chunks[0])[:-1]])
        for i, ((Xb, yb, wb), start) in enumerate(
            zip(blocks(self.X, self.y, self.sample_weight), starts, strict=True)
        ):
            yield Xb, yb, wb, Part(i, int(start))

    def reduce(self, task_function, merge, *values):
        values = [_shared(v) for v in values]
        parts = [task(task_function)(*part, *values) for part in self._parts()]
        return tree(parts, merge).compute()

    def cross(self, pair_function, merge, finish, *values):
        """For every part ``p``, ``pair_function(*p, *q, *values)`` with every part ``q``
        (each part as ``X, y, w, Part``), merged up a tree in the order of the ``q``, then
        ``finish(*p, merged, *values)`` where ``p`` is (``None``: the merged value); the
        list of results in the order of the ``p``, computed. Each pair's task reads the two
        partitions where they are: no part is collected."""
        values = [_shared(v) for v in values]
        parts = list(self._parts())
        results = []
        for p in parts:
            merged = tree([task(pair_function)(*p, *q, *values) for q in parts], merge)
            results.append(merged if finish is None else task(finish)(*p, merged, *values))
        return list(dask.compute(*results))

    def prepare(self, task_function, *values):
        values = [_shared(v) for v in values]
        parts = [task(task_function)(*part, *values) for part in self._parts()]
        return Prepared(dask.persist(*parts))

    def collect(self):
        X, y, w = dask.compute(self.X, self.y, self.sample_weight)
        if self.frame is not None and self.feature_names is not None:
            import pandas as pd

            X = pd.DataFrame(X, columns=list(self.feature_names))
        return X, y, w

    def persisted(self):
        X, y, w = dask.persist(self.X, self.y, self.sample_weight)
        return DaskRows(X, y, w, self.frame)

    def arrays(self):
        """The training set as dask arrays ``(X, y, sample_weight)``, weights of 1 where none
        were given: a model keeps them as its keys."""
        w = self.sample_weight
        if w is None:
            w = da.ones(self.n_rows, chunks=self.X.chunks[0])
        return self.X, self.y, w


class Prepared:
    """Per partition, a state kept on its worker for the many evaluations of a search."""

    def __init__(self, parts):
        self.parts = list(parts)

    def reduce(self, task_function, merge, *values):
        values = [_shared(v) for v in values]
        return tree([task(task_function)(p, *values) for p in self.parts], merge).compute()

    def release(self):
        """Let the workers drop the states."""
        self.parts = []


def _shared(value):
    """Arrays and objects go to the workers once, as nodes of the graph; numbers and short
    tuples travel with each task."""
    if value is None or isinstance(value, int | float | str | bool | np.number):
        return value
    if isinstance(value, tuple) and all(isinstance(v, int | float) for v in value):
        return value
    return shared(value)
