r"""Conformal intervals of a linear-attention model whose training rows stay in parts.

A :class:`~kernattn.LinearAttentionRegressor` fitted on the partitions of a cluster keeps its
feature sums and no keys. Its conformal intervals need the leave-one-out residuals
:math:`R_i = |y_i - \hat\mu_{-i}(x_i)|` of every training row and, at each query, every
row's weight; these stages compute both where the rows are, each a function of plain values
that a scheduler runs on the part that holds them (:mod:`kernattn.distributed` runs them as
tasks, :meth:`~kernattn.distributed._rows.DaskRows.cross` for the pairs of parts):

1. per part, a digest of each kept row's input (:func:`row_digests`): exact duplicates, which
   leave one out together, share it, wherever they are;
2. per pair of parts ``(p, q)``, the exact kernel's centered sums of the rows of ``p`` the
   features cannot serve, against the keys of ``q`` (:func:`exact_pair`), merged over ``q``
   at their shifts (:func:`~kernattn.linear._staged.merge_exact`, the reduction's
   :func:`~kernattn._core.sums.merge_centered`);
3. per pair, the weights of the rows of ``p`` on the keys of ``q`` (:func:`part_weights`:
   the features' implied weights, normalized by the sums of every part; the exact kernel's,
   rescaled to the merged shift and total, where the features cannot serve), and their
   weighted values, own-group weight and own-group values (:func:`residual_pair`), added
   over ``q``;
4. per part, its rows' residuals (:func:`residual_finish`).

At a block of queries, each part gives the queries' weights on its keys (:func:`part_weights`),
and the intervals are then those of the in-memory model
(:func:`~kernattn._engine.distribution.conformal_bounds`).
"""

import copy
import functools
import hashlib

import numpy as np

from kernattn._core.rows import as_part, concatenate_parts, out_of_core_rows
from kernattn._engine.distribution import MixedWeights, rank_residuals
from kernattn.linear._staged import exact_part, merge_exact

__all__ = [
    "add",
    "exact_pair",
    "exact_part_task",
    "join_columns",
    "join_lists",
    "kept_targets",
    "part_weights",
    "query_weights",
    "residual_finish",
    "residual_pair",
    "residuals_on_parts",
    "row_digests",
    "served_rows",
    "weights_on_parts",
]


def _kept(X, y, w):
    """A part's rows of positive weight: inputs, targets (2-D) and weights."""
    X, Y, w = as_part(X, y, w)
    active = w > 0
    return X[active], Y[active], w[active]


def row_digests(X, y, w, part):
    """A 16-byte digest of each kept row's input (``-0.0`` read as ``0.0``): equal for exact
    duplicates, in whichever part they are; in a list (see :func:`join_lists`)."""
    X, _, _ = _kept(X, y, w)
    rows = np.ascontiguousarray(X + 0.0, dtype=np.float64)
    digests = [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]
    return [np.array(digests, dtype="S16")]


def join_lists(*parts):
    """Per-part lists joined in the order of the parts."""
    return [item for part in parts for item in part]


def join_columns(*parts):
    """Per head, the parts' weights side by side, in the order of the parts."""
    return [np.hstack(pieces) for pieces in zip(*parts, strict=True)]


def kept_targets(X, y, w, part):
    """A part's kept targets (2-D) and weights."""
    _, Y, w = _kept(X, y, w)
    return Y, w


def served_rows(model, X):
    """The rows of ``X`` that some head's features cannot serve (they take the exact
    kernel)."""
    kernel = model.kernel_
    rows = np.zeros(len(X), dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for h in range(kernel.n_heads):
            rows |= kernel.moments(X, h)[2]
    return rows


def _bound(model, X, w):
    """The model's kernel bound to one part's kept keys (its sums, of every part, kept)."""
    return copy.copy(model.kernel_).without_keys().bind(X, w)


def exact_pair(X, y, w, part, Xq, yq, wq, part_q, model):
    """Per head, the exact kernel's centered sums ``(c, W, m, M₂)`` of the rows of part
    ``p`` (``X, y, w``) that the features cannot serve, against the keys of part ``q``."""
    X, _, _ = _kept(X, y, w)
    return exact_part(model, X[served_rows(model, X)], Xq, yq, wq)


def exact_part_task(X, y, w, part, model, queries):
    """:func:`~kernattn.linear._staged.exact_part` of ``queries`` against one part."""
    return exact_part(model, queries, X, y, w)


def query_weights(X, y, w, part, model, queries, states):
    """Per head, the weights of ``queries`` on one part's kept keys (:func:`part_weights`)."""
    K, _, w = _kept(X, y, w)
    return part_weights(model, queries, states, K, w)


def part_weights(model, queries, states, X, w):
    """Per head, the weights (queries × kept keys) of ``queries`` on one part's kept keys
    ``X`` (weights ``w``): the features' implied weights, normalized by the sums of every
    part; where the features cannot serve a query (``states`` holds its exact centered
    sums over every part, merged, in the order of those queries), the exact kernel's
    weights on this part rescaled to the merged shift and total."""
    if not len(X):
        return [np.zeros((len(queries), 0)) for _ in range(model.kernel_.n_heads)]
    kernel = _bound(model, X, w)
    exact = kernel.exact_heads
    unserved = served_rows(model, queries)
    out = []
    for h in range(kernel.n_heads):
        with np.errstate(over="ignore", invalid="ignore"):
            weights, _ = kernel.weights(queries, h)
        if np.any(unserved):
            rows = queries[unserved]
            local = exact.weights(rows, h)
            shift, total = exact.centered_state(rows, h, np.zeros((len(X), 1)))[:2]
            merged_shift, merged_total = states[h][0], states[h][1]
            with np.errstate(over="ignore", invalid="ignore"):
                local *= (total * np.exp(shift - merged_shift) / merged_total)[:, None]
            weights[unserved] = local
        out.append(weights)
    return out


def residual_pair(X, y, w, part, Xq, yq, wq, part_q, model, states, ids):
    """Per head, for the kept rows of part ``p``: their weights on the kept keys of part
    ``q`` times those keys' centered values, the weight on their own group of exact
    duplicates there and its values times the weights, side by side (they add over
    ``q``)."""
    X, _, _ = _kept(X, y, w)
    Kq, Yq, wq = _kept(Xq, yq, wq)
    values = model.centered_values(Yq)
    same = ids[part.index][:, None] == ids[part_q.index][None, :]
    pieces = []
    for weights in part_weights(model, X, states[part.index], Kq, wq):
        own = np.where(same, weights, 0.0)
        pieces.append(np.hstack([weights @ values, own.sum(axis=1)[:, None], own @ values]))
    return np.stack(pieces)


def residual_finish(X, y, w, part, sums, model, states, ids):
    r"""The kept rows' :math:`y_i - \hat\mu_{-i}(x_i)` of one part (centered units,
    :math:`\pm\infty` for a row with no other input) from their :func:`residual_pair`
    sums over every part."""
    _, Y, _ = _kept(X, y, w)
    kernel = model.kernel_
    t = Y.shape[1]
    estimate = np.zeros(Y.shape) + kernel.head_bias
    alone = np.zeros(len(Y), dtype=bool)
    for h, a in enumerate(kernel.head_weights):
        mean, own, own_values = sums[h][:, :t], sums[h][:, t], sums[h][:, t + 1 :]
        rest = 1.0 - own
        alone |= ~(rest > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            estimate += a * (mean - own_values) / rest[:, None]
    residuals = model.centered_values(Y) - estimate
    residuals[alone] = np.inf
    return residuals


def add(*parts):
    """Sums of several parts: they add up."""
    return functools.reduce(np.add, parts)


def _without_training_set(model):
    """The model as it goes to the parts: without its training set, which stays where it
    is (a copy: the caller's model keeps it)."""
    model = copy.copy(model)
    for name in ("X_fit_", "y_fit_", "sample_weight_"):
        model.__dict__.pop(name)
    return model


def _training_rows(model):
    return out_of_core_rows(model.X_fit_, model.y_fit_, model.sample_weight_)


def residuals_on_parts(model):
    """The kept rows' ranked leave-one-out residuals
    (:func:`~kernattn._engine.distribution.rank_residuals`), sample weights and centered
    values of a model whose training rows stay in parts, computed where they are."""
    rows = _training_rows(model)
    model = _without_training_set(model)
    digests = rows.reduce(row_digests, join_lists)
    ids = np.unique(np.concatenate(digests), return_inverse=True)[1].reshape(-1)
    ids_by_part = np.split(ids, np.cumsum([len(d) for d in digests])[:-1])
    Y, sample_weight = rows.reduce(kept_targets, concatenate_parts)
    states = rows.cross(exact_pair, merge_exact, None, model)
    residuals = rows.cross(residual_pair, add, residual_finish, model, states, ids_by_part)
    ranked = rank_residuals(np.concatenate(residuals), ids)
    return ranked, sample_weight, model.centered_values(Y)


def weights_on_parts(model, X):
    """The weights of queries ``X`` (:class:`~kernattn._engine.distribution.MixedWeights`)
    on the kept keys of every part of a model whose training rows stay in parts."""
    rows = _training_rows(model)
    model = _without_training_set(model)
    unserved = X[served_rows(model, X)]
    query_states = rows.reduce(exact_part_task, merge_exact, model, unserved)
    dense = rows.reduce(query_weights, join_columns, model, X, query_states)
    index = {row.tobytes(): i for i, row in enumerate(np.ascontiguousarray(X, dtype=float))}

    def head_weights(queries, h):
        found = [index[row.tobytes()] for row in np.ascontiguousarray(queries, dtype=float)]
        return dense[h][found]

    return MixedWeights(model.kernel_, None, head_weights)
