r"""Linear attention predicted in stages, for a model whose training keys stay elsewhere.

A :class:`~kernattn.LinearAttentionRegressor` fitted on the partitions of a cluster keeps no
keys in memory: its feature sums serve most queries, and what needs the keys — the near
field's exact part, the rows the features cannot serve, the spreads that cancel — is computed
where the keys are. The stages, each a function of plain values that a scheduler can run
anywhere (:mod:`kernattn.distributed` runs them as tasks):

1. per training part, its keys sorted by cell once (:func:`sorted_part`); per query block,
   its near sums over every part (:func:`near_part`), added up (no shift: the near logits are
   at most 0, so the parts' sums add);
2. per query block, the prediction from the features and the near sums, the rows that need
   the exact kernel recorded instead of computed (:func:`first_pass`, with a
   :class:`Recorder`);
3. per training part, the exact kernel's centered moments of those rows (:func:`exact_part`,
   the one reduction's :func:`~kernattn._core.sums.centered_sums`), merged at their shifts
   (:func:`merge_exact`);
4. per query block, those rows predicted again with the merged moments
   (:func:`second_pass`, with :class:`GivenStates`).

The distributed model then predicts what the in-memory model fitted on the same data predicts,
spreads included.
"""

import copy
import functools
import warnings

import numpy as np

from kernattn._core.blocks import single_threaded_blas
from kernattn._core.rows import as_part
from kernattn._core.sums import merge_centered


def _row_keys(X):
    """One hashable key per row (its bytes)."""
    return [row.tobytes() for row in np.ascontiguousarray(X, dtype=float)]


class Recorder:
    """An exact-kernel provider that computes nothing: it records the rows asked for and
    answers with the weighted training mean (a placeholder, replaced in the second pass)."""

    def __init__(self, kernel):
        self.mean, second = kernel.training_moments()
        self.variance = second - self.mean**2
        self.rows = []

    def centered(self, X, h, values):
        self.rows.append(np.array(X, dtype=float))
        n = len(X)
        return np.ones(n), np.tile(self.mean, (n, 1)), np.tile(self.variance, (n, 1))

    def moments(self, X, h, columns):
        _, mean, variance = self.centered(X, h, None)
        return mean, mean**2 + variance

    def asked(self, n_features):
        if not self.rows:
            return np.zeros((0, n_features))
        return np.unique(np.vstack(self.rows), axis=0)


class GivenStates:
    """An exact-kernel provider whose answers were computed elsewhere: the merged centered
    moments ``(c, W, m, M₂)`` of the rows ``queries``, per head. A row not among them (its
    status differed between the passes by rounding: a ratio within an ulp of its threshold)
    keeps the training-mean placeholder."""

    def __init__(self, queries, states, kernel):
        self.index = {key: i for i, key in enumerate(_row_keys(queries))}
        self.states = states
        self.fallback = Recorder(kernel)

    def moments(self, X, h, columns):
        total, mean, m2 = self.centered(X, h, None)
        return mean, mean**2 + m2 / total[:, None]

    def centered(self, X, h, values):
        found = np.array([self.index.get(key, -1) for key in _row_keys(X)], dtype=int)
        _, total, mean, m2 = (a[found] for a in self.states[h])
        missing = found < 0
        if np.any(missing):
            _, mean[missing], m2[missing] = self.fallback.centered(X[missing], h, values)
            total[missing] = 1.0
        return total, mean, m2


def _columns(prediction, return_std):
    if not return_std:
        return prediction.reshape(len(prediction), -1)
    mean, std = prediction
    return np.hstack([mean.reshape(len(mean), -1), std.reshape(len(std), -1)])


class StagedPredictionMixin:
    """The entry point of the stages on a linear-attention estimator."""

    def predict_given(self, X, return_std=False, *, exact, near=None):
        """The prediction at ``X`` with what needs the training keys given: ``exact``, a
        provider of the exact kernel's moments (:class:`Recorder`, :class:`GivenStates`),
        and ``near``, the queries' near sums taken where the keys are (see
        :mod:`kernattn.linear._staged`; :mod:`kernattn.distributed` runs the stages).

        Returns ``predict(X, return_std)`` as one array of columns: the mean's, then the
        spread's."""
        mean, variance = self._predict_centered(X, return_std, exact=exact, near=near)
        return _columns(self._finish_prediction(mean, variance), return_std)

    def centered_values(self, Y, scaled=False):
        """Training targets ``Y`` of shape (n, n_outputs) as the kernel sums them: less the
        target offset, and with ``scaled`` in the values' unit (a power of two)."""
        values = Y - self._y_offset
        return values / self._value_scale if scaled else values


def _predict(model, X, return_std, exact, near):
    return model.predict_given(X, return_std, exact=exact, near=near)


def sorted_part(model, X, y, w):
    """One training part's keys as the near field reads them (sorted by cell, with their
    values and log-weights, the table's two parts contiguous); ``None`` when it has no row
    of positive weight."""
    X, Y, w = as_part(X, y, w)
    active = w > 0
    if not active.any():
        return None
    keys = model.kernel_.sorted_keys(X[active], model.centered_values(Y[active]), w[active])
    p = keys["keys"].shape[1] + 2
    keys["head"] = np.ascontiguousarray(keys["table"][:, :p])
    keys["tail"] = np.ascontiguousarray(keys["table"][:, p:])
    return keys


def query_cells(model, X):
    """A query block's projected queries sorted by cell, the cells, the order and the
    bounds of each cell's run."""
    Q, cells = model.kernel_.query_cells(np.asarray(X, dtype=float))
    order = np.argsort(cells, kind="stable")
    bounds = np.flatnonzero(np.r_[True, cells[order][1:] != cells[order][:-1], True])
    return Q[order], cells[order], order, bounds


def near_part(model, cells_of_queries, keys):
    r"""A query block's near sums over one training part's keys: per query, the exact
    :math:`\sum_i s_i \kappa(q, k_i) [v_i, v_i^2, 1]` over the keys here that lie in the
    query's near cells (in the block's order)."""
    Q, cells, order, bounds = cells_of_queries
    kernel = model.kernel_
    sums = np.zeros((len(Q), kernel.far.key_sums.shape[2]))
    if keys is None:
        return sums
    # Buffers for the near keys of every cell: a worker's allocator may map and unmap (and
    # fault in) every large array anew.
    counts = np.diff(keys["start"])
    widest = counts[kernel.near_cells[cells[bounds[:-1]]]].sum(axis=1).max(initial=0)
    buffers = (np.empty((widest, keys["head"].shape[1])), np.empty((widest, sums.shape[1])))
    with single_threaded_blas():
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            sums[order[start:stop]] = kernel.near_sums(
                Q[start:stop], cells[start], buffers, keys=keys
            )
    return sums


def add(*parts):
    """Near sums of several parts: they add up."""
    return functools.reduce(np.add, parts)


def first_pass(model, X, return_std, near=None):
    """A query block predicted from the features and its near sums; the rows that need the
    exact kernel get a placeholder and are returned for the exact pass."""
    X = np.asarray(X, dtype=float)
    recorder = Recorder(model.kernel_)
    with warnings.catch_warnings():
        # The features' fallback warning speaks of the in-memory keys; here they are remote.
        warnings.simplefilter("ignore", UserWarning)
        columns = _predict(model, X, return_std, recorder, near)
    return columns, recorder.asked(X.shape[1])


def union(*rows):
    """The rows asked for by several query blocks, once each."""
    return np.unique(np.vstack(rows), axis=0)


def exact_part(model, queries, X, y, w):
    """Per head, the exact kernel's centered moments ``(c, W, m, M₂)`` of the rows
    ``queries`` against one training part's keys (:meth:`SoftmaxHeads.centered_state
    <kernattn._engine.heads.SoftmaxHeads.centered_state>`)."""
    X, Y, w = as_part(X, y, w)
    active = w > 0
    X, Y, w = X[active], Y[active], w[active]
    kernel = model.kernel_
    t = kernel.n_outputs
    if not len(queries) or not len(X):
        empty = (np.full(len(queries), -np.inf), np.zeros(len(queries)))
        return [empty + (np.zeros((len(queries), t)),) * 2 for _ in range(kernel.n_heads)]
    values = model.centered_values(Y, scaled=True)
    exact = copy.copy(kernel).without_keys().bind(X, w).exact_heads
    with single_threaded_blas():
        return [exact.centered_state(queries, h, values) for h in range(kernel.n_heads)]


def merge_exact(*parts):
    """Per head, the parts' centered moments merged at their shifts."""
    merged = []
    for pieces in zip(*parts, strict=True):
        state = pieces[0]
        for other in pieces[1:]:
            state = merge_centered(state, other)
        merged.append(state)
    return merged


def second_pass(model, X, first, queries, states, return_std, near=None):
    """A query block with its exact rows predicted again from the merged moments."""
    columns, asked = first
    if not len(asked):
        return columns
    X = np.asarray(X, dtype=float)
    wanted = set(_row_keys(asked))
    rows = np.array([key in wanted for key in _row_keys(X)])
    given = GivenStates(queries, states, model.kernel_)
    columns = columns.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        columns[rows] = _predict(
            model, X[rows], return_std, given, None if near is None else near[rows]
        )
    return columns
