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

**With a near field** (:class:`~kernattn.linear._near_field.NearFieldKernel`) a row's weight
on a key is exact where the key lies in one of the query's near cells and the features'
estimate elsewhere, both over one denominator: the near cells' exact mass, from every part,
plus the far field's, from the per-cell sums the model holds
(:meth:`~kernattn.linear._near_field.NearFieldKernel.far_sums`). So one stage comes first,
per part (per pair of parts for the training rows): the largest near logit and the near mass
of each query over the part's keys (:func:`near_reach`), added over the parts. The queries
they leave without a near key in reach are the ones the exact kernel serves, as in memory
(:func:`near_queries`); the others get :func:`near_part_weights`, the in-memory split weights
(:meth:`~kernattn.linear._near_field.NearFieldKernel.weights`) of the keys here.
"""

import copy
import functools
import hashlib

import numpy as np

from kernattn._core.rows import as_part, concatenate_parts, out_of_core_rows
from kernattn._core.sums import augment_queries, exp_shifted, kernel_sums, merge, rescaling
from kernattn._engine.distribution import MixedWeights, rank_residuals
from kernattn.linear._near_field import NEAR_MASS, NearFieldKernel
from kernattn.linear._staged import exact_part, merge_exact

__all__ = [
    "add",
    "exact_pair",
    "exact_part_task",
    "join_columns",
    "join_lists",
    "kept_targets",
    "merge_reach",
    "near_pair",
    "near_part_weights",
    "near_queries",
    "near_reach",
    "near_reach_task",
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


def _exact_rows(model, X, reach=None):
    """The rows of ``X`` the exact kernel serves: for a near field those its
    :func:`near_reach` over every part (``reach``) leaves unserved, else
    :func:`served_rows`."""
    if reach is None:
        return served_rows(model, X)
    return near_queries(model, X, reach)[-1]


def _bound(model, X, w):
    """The model's kernel bound to one part's kept keys (its sums, of every part, kept)."""
    return copy.copy(model.kernel_).without_keys().bind(X, w)


def exact_pair(X, y, w, part, Xq, yq, wq, part_q, model, reach=None):
    """Per head, the exact kernel's centered sums ``(c, W, m, M₂)`` of the rows of part
    ``p`` (``X, y, w``) that the features cannot serve, against the keys of part ``q``
    (``reach``: per part, its rows' :func:`near_reach` over every part, for a near field)."""
    X, _, _ = _kept(X, y, w)
    rows = _exact_rows(model, X, None if reach is None else reach[part.index])
    return exact_part(model, X[rows], Xq, yq, wq)


def exact_part_task(X, y, w, part, model, queries):
    """:func:`~kernattn.linear._staged.exact_part` of ``queries`` against one part."""
    return exact_part(model, queries, X, y, w)


def query_weights(X, y, w, part, model, queries, states, reach=None):
    """Per head, the weights of ``queries`` on one part's kept keys (:func:`part_weights`)."""
    K, _, w = _kept(X, y, w)
    return part_weights(model, queries, states, K, w, reach)


def part_weights(model, queries, states, X, w, reach=None):
    """Per head, the weights (queries × kept keys) of ``queries`` on one part's kept keys
    ``X`` (weights ``w``): the features' implied weights, normalized by the sums of every
    part (with a near field, :func:`near_part_weights`, from the queries' ``reach``); where
    the features cannot serve a query (``states`` holds its exact centered sums over every
    part, merged, in the order of those queries), the exact kernel's weights on this part
    rescaled to the merged shift and total."""
    if not len(X):
        return [np.zeros((len(queries), 0)) for _ in range(model.kernel_.n_heads)]
    kernel = _bound(model, X, w)
    exact = kernel.exact_heads
    if reach is None:
        unserved = served_rows(model, queries)
    else:
        split = near_queries(model, queries, reach)
        unserved = split[-1]
    out = []
    for h in range(kernel.n_heads):
        if reach is None:
            with np.errstate(over="ignore", invalid="ignore"):
                weights, _ = kernel.weights(queries, h)
        else:
            weights = near_part_weights(model, split, X, w)
        if np.any(unserved):
            rows = queries[unserved]
            local = exact.weights(rows, h)
            shift, total = exact.centered_state(rows, h, np.zeros((len(X), 1)))[:2]
            merged_shift, merged_total = states[h][0], states[h][1]
            with np.errstate(over="ignore", invalid="ignore"):
                local *= (total * rescaling(shift, merged_shift) / merged_total)[:, None]
            weights[unserved] = local
        out.append(weights)
    return out


# ---------------------------------------------------------------- the near field


def _sorted_keys(kernel, X, w):
    """A part's kept keys sorted by cell as the near field reads them (no values)."""
    return kernel.sorted_keys(X, np.zeros((len(X), kernel.n_outputs)), w)


def _by_cell(cells):
    """The queries' rows grouped by cell: ``(cell, rows)`` pairs."""
    order = np.argsort(cells, kind="stable")
    bounds = np.flatnonzero(np.diff(cells[order])) + 1
    return [(cells[rows[0]], rows) for rows in np.split(order, bounds) if len(rows)]


def _near_logits(kernel, Q, c, keys):
    r"""The positions (cell order) of the keys of ``keys`` in cell ``c``'s near cells, and
    the logits :math:`-\tfrac12\|q - k\|^2 + \log s` of the projected queries ``Q`` of that
    cell against them (one product of the augmented queries and keys)."""
    near = kernel.near_rows(c, keys["start"])
    head = keys["table"][near, : Q.shape[1] + 2]
    return near, augment_queries(Q) @ head.T


def near_reach(model, queries, X, w):
    """Per query: its near mass over the keys ``X`` (weights ``w``) of one part that lie in
    the query's near cells, as the reduction gives it (the largest logit, ``-inf`` where no
    key is near, and the kernel sum shifted by it). Over several parts they merge at their
    shifts (:func:`merge_reach`)."""
    kernel = model.kernel_
    top = np.full(len(queries), -np.inf)
    mass = np.zeros(len(queries))
    if not len(X) or not len(queries):
        return top, mass
    keys = _sorted_keys(kernel, X, w)
    Q, cells = kernel.query_cells(queries)
    for c, rows in _by_cell(cells):
        near, logits = _near_logits(kernel, Q[rows], c, keys)
        if len(near):
            top[rows], sums = kernel_sums(
                lambda keys, out, logits=logits: logits[:, keys],
                len(near),
                np.ones((len(near), 1)),
            )
            mass[rows] = sums[:, 0]
    return top, mass


def merge_reach(*parts):
    """:func:`near_reach` of several parts, merged at their shifts by the reduction."""
    top, mass = parts[0]
    for other_top, other_mass in parts[1:]:
        top, mass = merge(top, mass, other_top, other_mass)
    return top, mass


def near_reach_task(X, y, w, part, model, queries):
    """:func:`near_reach` of ``queries`` over one part's kept keys."""
    K, _, w = _kept(X, y, w)
    return near_reach(model, queries, K, w)


def near_pair(X, y, w, part, Xq, yq, wq, part_q, model):
    """:func:`near_reach` of the kept rows of part ``p`` over the kept keys of part ``q``."""
    X, _, _ = _kept(X, y, w)
    Kq, _, wq = _kept(Xq, yq, wq)
    return near_reach(model, X, Kq, wq)


def near_queries(model, queries, reach):
    r"""What the split weights of ``queries`` share over every part, from their
    :func:`near_reach` over every part, at each query's shift (its largest near logit, or
    without a near key its far field's largest log-feature, as in memory): the projected
    queries and their cells, the shifts, the far field's query features :math:`a(q)`, the
    denominators (the near mass plus the far field's where its mass is positive and
    finite), whether the far field is kept, and the rows the features cannot serve (a
    shift no larger than :math:`\log` ``NEAR_MASS``, or a denominator that is not
    positive), as :meth:`NearFieldKernel._split_weights
    <kernattn.linear._near_field.NearFieldKernel._split_weights>` decides in memory."""
    kernel = model.kernel_
    top, mass = reach
    Q, cells = kernel.query_cells(queries)
    far_mass = np.zeros(len(Q))
    keep = np.zeros(len(Q), dtype=bool)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        far = kernel.feature_map.log_transform(Q)
        far += kernel.far.key_log_scale[0]
        top = np.where(np.isfinite(top), top, far.max(axis=1, initial=-np.inf))
        far -= np.where(np.isfinite(top), top, 0.0)[:, None]
        exp_shifted(far)
        for c, rows in _by_cell(cells):
            sums = far[rows] @ kernel.far_sums(c)
            far_mass[rows] = sums[:, -1]
            keep[rows] = (sums[:, -1] > 0) & np.all(np.isfinite(sums), axis=1)
    denominator = mass + np.where(keep, far_mass, 0.0)
    unserved = ~(denominator > 0) | ~(top > np.log(NEAR_MASS))
    return Q, cells, top, far, denominator, keep, unserved


def near_part_weights(model, split, X, w):
    """The split weights (queries × kept keys, in the order of the keys ``X``, weights
    ``w``) on one part's keys of the queries ``split`` describes (:func:`near_queries`):
    exact on the keys of each query's near cells, the far field's features elsewhere (0
    where it is not kept), over the denominators of every part; 0 on the rows the
    features cannot serve."""
    kernel = model.kernel_
    Q, cells, top, far, denominator, keep, unserved = split
    keys = _sorted_keys(kernel, X, w)
    features, key_top = kernel.far.key_features(0, keys["keys"], keys["log_weight"])
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        features *= rescaling(key_top, kernel.far.key_log_scale[0])
        inner = kernel.feature_map.inner(features.T)
        weights = np.zeros((len(Q), len(X)))
        for c, rows in _by_cell(cells):
            block = far[rows] @ inner
            block[~keep[rows]] = 0.0
            near, logits = _near_logits(kernel, Q[rows], c, keys)
            logits -= np.where(np.isfinite(top[rows]), top[rows], 0.0)[:, None]
            block[:, near] = exp_shifted(logits)
            weights[rows] = block / np.where(unserved[rows], 1.0, denominator[rows])[:, None]
    weights[unserved] = 0.0
    # From the keys' cell order back to the order they were given in.
    ordered = np.empty_like(weights)
    ordered[:, keys["order"]] = weights
    return ordered


def residual_pair(X, y, w, part, Xq, yq, wq, part_q, model, states, ids, reach=None):
    """Per head, for the kept rows of part ``p``: their weights on the kept keys of part
    ``q`` times those keys' centered values, the weight on their own group of exact
    duplicates there and its values times the weights, side by side (they add over
    ``q``)."""
    X, _, _ = _kept(X, y, w)
    Kq, Yq, wq = _kept(Xq, yq, wq)
    values = model.centered_values(Yq)
    same = ids[part.index][:, None] == ids[part_q.index][None, :]
    pieces = []
    own_reach = None if reach is None else reach[part.index]
    for weights in part_weights(model, X, states[part.index], Kq, wq, own_reach):
        own = np.where(same, weights, 0.0)
        pieces.append(np.hstack([weights @ values, own.sum(axis=1)[:, None], own @ values]))
    return np.stack(pieces)


def residual_finish(X, y, w, part, sums, model, states, ids, reach=None):
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
    reach = None
    if isinstance(model.kernel_, NearFieldKernel):
        reach = rows.cross(near_pair, merge_reach, None, model)
    states = rows.cross(exact_pair, merge_exact, None, model, reach)
    residuals = rows.cross(residual_pair, add, residual_finish, model, states, ids_by_part, reach)
    ranked = rank_residuals(np.concatenate(residuals), ids)
    return ranked, sample_weight, model.centered_values(Y)


def weights_on_parts(model, X):
    """The weights of queries ``X`` (:class:`~kernattn._engine.distribution.MixedWeights`)
    on the kept keys of every part of a model whose training rows stay in parts."""
    rows = _training_rows(model)
    model = _without_training_set(model)
    reach = None
    if isinstance(model.kernel_, NearFieldKernel):
        reach = rows.reduce(near_reach_task, merge_reach, model, X)
    unserved = X[_exact_rows(model, X, reach)]
    query_states = rows.reduce(exact_part_task, merge_exact, model, unserved)
    dense = rows.reduce(query_weights, join_columns, model, X, query_states, reach)
    index = {row.tobytes(): i for i, row in enumerate(np.ascontiguousarray(X, dtype=float))}

    def head_weights(queries, h):
        found = [index[row.tobytes()] for row in np.ascontiguousarray(queries, dtype=float)]
        return dense[h][found]

    return MixedWeights(model.kernel_, None, head_weights)
