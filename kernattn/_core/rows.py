"""Training rows in parts: what a fit that works part by part reads its data through.

A fit whose statistics are sums over rows (the kernel sums of a bandwidth criterion, the
feature sums of linear attention, the first pass's means and sample) can take them part by
part and merge the parts' results. :class:`Rows` is that view of a training set:
``reduce(task, merge)`` runs ``task`` on every part and merges the results in the order of
the parts (a fixed tree, never the order in which parts finish), so the same rows give the
same fit however the parts are computed.

- :class:`ArrayRows`: arrays in memory, one part (or several, for tests);
- :class:`ChunkRows`: chunks read from an iterable (from disk, say), on threads, a few
  held at once;
- an out-of-core source (a cluster's partitioned arrays, say): the rows live elsewhere, and
  the parts are its partitions. A backend registers its kind of source here
  (:func:`register_source`); this module knows only the registry, so that the estimators
  and the engine never import a backend.
"""

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kernattn._core.blocks import effective_n_jobs, single_threaded_blas

#: Partial results merged per node of a reduction tree.
SPLIT_EVERY = 8

_SOURCES = []


def register_source(handles, rows, predict):
    """Register a backend for a kind of out-of-core row source.

    ``handles(data)`` says whether an argument is such a source; ``rows(X, y,
    sample_weight)`` makes its :class:`Rows`; ``predict(model, X, **kwargs)`` predicts on
    it (or with a model whose training set is one).
    """
    _SOURCES.append((handles, rows, predict))


def _backend(*data):
    for backend in _SOURCES:
        if any(d is not None and backend[0](d) for d in data):
            return backend
    return None


def out_of_core_rows(X, y, sample_weight=None):
    """The :class:`Rows` of an out-of-core source, or ``None`` for data in memory."""
    backend = _backend(X, y, sample_weight)
    return None if backend is None else backend[1](X, y, sample_weight)


def out_of_core_predict(X, *fitted):
    """The prediction backend of ``X`` (or of a fitted model's out-of-core training set
    among ``fitted``), or ``None`` for arrays in memory."""
    backend = _backend(X, *fitted)
    return None if backend is None else backend[2]


def tree_merge(parts, merge):
    """``merge`` applied up a tree of at most ``SPLIT_EVERY`` parts per node, in order."""
    parts = list(parts)
    if not parts:
        return None
    while len(parts) > 1:
        parts = [merge(*parts[i : i + SPLIT_EVERY]) for i in range(0, len(parts), SPLIT_EVERY)]
    return parts[0]


def concatenate_parts(*parts):
    """Per-part tuples of arrays concatenated in the order of the parts (a ``merge`` of
    :meth:`Rows.reduce` for values that are one per row)."""
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))


def as_part(X, y, w):
    """One part as float arrays: ``X`` (n, d), ``Y`` (n, t) and ``w`` (n,) (ones for
    ``None``)."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    return X, Y, w


class Rows:
    """A training set in parts (see the module docstring).

    ``task(X, y, w, part)`` of :meth:`reduce` gets one part's arrays (``w`` may be
    ``None``: every weight 1) and its :class:`Part` (index and first row); the results are
    merged with ``merge(*results)`` up a tree.
    """

    #: Whether the rows stay reachable after the fit (a cluster keeps its partitions): a
    #: model can then keep them as its keys.
    keeps_rows = False
    #: Column names of a dataframe, or ``None``.
    feature_names = None
    #: The number of rows and of parts, the features, the targets' shape per row and the
    #: inputs' dtype (``None`` where not known before a pass).
    n_rows = None
    n_parts = None
    n_features = None
    target_shape = None
    dtype = None

    def reduce(self, task, merge, *shared):
        raise NotImplementedError

    def prepare(self, task, *shared):
        """``task(X, y, w, part, *shared)`` on every part, its results kept where the part
        is (:class:`Prepared`), for the many evaluations of a search."""
        raise NotImplementedError

    def collect(self):
        """The whole training set in memory: ``(X, y, sample_weight)``."""
        raise NotImplementedError

    def persisted(self):
        """The same rows, computed once and kept for several passes (itself in memory)."""
        return self


class Prepared:
    """Per part, a state prepared by :meth:`Rows.prepare` (in memory here; a cluster keeps
    them on its workers): ``reduce(task, merge, *shared)`` runs ``task(state, *shared)``
    on every part and merges up the tree, in the order of the parts."""

    def __init__(self, states):
        self.states = list(states)

    def reduce(self, task, merge, *shared):
        return tree_merge([task(state, *shared) for state in self.states], merge)

    def release(self):
        """Let the parts' states go."""
        self.states = []


class Part:
    """Where a part sits in the training set: its ``index`` among the parts and the
    number of its first row."""

    __slots__ = ("index", "start")

    def __init__(self, index, start):
        self.index = index
        self.start = start


class ArrayRows(Rows):
    """Arrays in memory, cut into ``n_parts`` parts of consecutive rows."""

    def __init__(self, X, y, sample_weight=None, n_parts=1):
        self.X, self.y, self.sample_weight = X, y, sample_weight
        self.n_parts = n_parts
        self.n_rows = len(X)
        self.n_features = np.shape(X)[1]
        self.target_shape = np.shape(y)[1:]
        self.dtype = np.asarray(X).dtype

    def reduce(self, task, merge, *shared):
        return tree_merge([task(*part, *shared) for part in self._parts()], merge)

    def _parts(self):
        bounds = np.linspace(0, len(self.X), self.n_parts + 1).astype(int)
        w = self.sample_weight
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            yield self.X[a:b], self.y[a:b], None if w is None else w[a:b], Part(i, int(a))

    def prepare(self, task, *shared):
        return Prepared(task(*part, *shared) for part in self._parts())

    def collect(self):
        return self.X, self.y, self.sample_weight


class ChunkRows(Rows):
    """Chunks ``(X, y)`` or ``(X, y, sample_weight)`` of an iterable, read anew for every
    :meth:`reduce` (the same chunks each time), on ``n_jobs`` threads.

    ``check(chunk, i, n_features)`` validates a chunk (in order, in this thread; chunk 0
    sets the number of features, the targets' shape per row and the inputs' dtype, which
    every later chunk must share) and returns its ``(X, y, w)``. At most ``threads + 1``
    chunks are held at once, and the results are merged in chunk order: the result does
    not depend on the number of threads.
    """

    def __init__(self, make_iterator, check, n_jobs=None):
        self.make_iterator = make_iterator
        self.check = check
        self.n_jobs = n_jobs
        self.n_features = self.target_shape = self.dtype = None

    def _checked(self, i, chunk):
        X, y, w = self.check(chunk, i, self.n_features)
        if self.n_features is None:
            self.n_features, self.target_shape, self.dtype = X.shape[1], y.shape[1:], X.dtype
        elif y.shape[1:] != self.target_shape:
            raise ValueError(
                f"y of chunk {i} has shape {y.shape[1:]} per sample; chunk 0 had "
                f"{self.target_shape}"
            )
        return X, y, w

    def reduce(self, task, merge, *shared):
        result, start, n_chunks = None, 0, 0
        pending = deque()
        threads = effective_n_jobs(self.n_jobs)

        def add(part):
            nonlocal result
            result = part if result is None else merge(result, part)

        with single_threaded_blas(), ThreadPoolExecutor(threads) as pool:
            for i, chunk in enumerate(self.make_iterator()):
                X, y, w = self._checked(i, chunk)
                pending.append(pool.submit(task, X, y, w, Part(i, start), *shared))
                start, n_chunks = start + len(X), n_chunks + 1
                del chunk, X, y, w
                while len(pending) > threads:
                    add(pending.popleft().result())
            while pending:
                add(pending.popleft().result())
        if not n_chunks:
            raise ValueError("chunks gave no chunk: there is nothing to fit")
        if self.n_rows is not None and start != self.n_rows:
            raise ValueError(
                f"the chunks gave {self.n_rows} rows in the first pass and {start} in the "
                "second; they must be the same both times"
            )
        self.n_rows, self.n_parts = start, n_chunks
        return result

    def collect(self):
        raise TypeError("chunks are read one at a time; they are never collected in memory")
