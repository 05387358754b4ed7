r"""Tilted kernel weights: non-negative weights whose centroid is the query.

A kernel average's leading bias has two parts: the curvature of the regression function,
and a slope term wherever the keys around a query are not balanced about it (a denser side,
the edge of the data). A local line removes the second with signed weights. Tilting the
kernel weights removes it with non-negative ones: at a query :math:`q` with normalized
weights :math:`w_j` on keys :math:`k_j`,

.. math::

    \tilde w_j = \frac{w_j\, e^{\lambda^\top k_j}}{\sum_i w_i\, e^{\lambda^\top k_i}},
    \qquad \lambda = \arg\min_\lambda\; \log \sum_j w_j\, e^{\lambda^\top (k_j - q)},

whose gradient in :math:`\lambda` is :math:`\sum_j \tilde w_j k_j - q`: at the minimum the
tilted weights' centroid is the query, :math:`\sum_j \tilde w_j k_j = q`. Of all the
weights with that centroid, :math:`\tilde w` is the one closest to :math:`w` in
Kullback–Leibler divergence (exponential tilting, as in the weighted Nadaraya–Watson
estimators of Hall, Wolff and Yao 1999 and Cai 2001, which reach the same balance with
empirical-likelihood weights). The weights stay a softmax (of the logits plus
:math:`\lambda^\top k_j`), sum to 1 and are never negative: the estimate
:math:`\sum_j \tilde w_j y_j` is a Nadaraya–Watson estimate, stays inside the targets'
range, and reproduces a linear function wherever the balance is reached (up to the
penalty below). For a Gaussian
kernel of width :math:`h` the tilt moves the query to :math:`q + h^2\lambda`.

A query outside the hull of the keys it sees (beyond the data's edge) has no balanced
weights: the minimum runs off to infinity while the weight piles onto the outermost keys.
The tilt is therefore penalized: :math:`\lambda` minimizes

.. math::

    \log \sum_j w_j\, e^{\lambda^\top (k_j - q)} + \tfrac{\varepsilon}{2}\,
    \lambda^\top C_0 \lambda,

with :math:`C_0` the keys' covariance under the kernel weights (plus a floor, a small share
of their covariance over all keys) and :math:`\varepsilon` = ``PENALTY`` by default
(``AttentionRegressor`` picks it among ``PENALTIES`` by the leave-one-out error).
:math:`\lambda^\top C_0 \lambda` is the variance of the tilt's log-factors
:math:`\lambda^\top k_j` under :math:`w` (unit-free). At the minimum the centroid misses
the query by :math:`-\varepsilon C_0 \lambda`: a small fraction of the keys' spread where a
moderate tilt balances them (small :math:`\varepsilon`), and a bounded tilt beyond the
edges.

The problem is strictly convex (a log-sum-exp of linear functions plus a quadratic); it is
solved by Newton's method with backtracking, from the sums
:math:`\sum_j \tilde w_j [k_j, k_j k_j^\top]` (one matrix product per iteration,
:func:`~kernattn._local.linear_fit.key_columns`).

The balance can also be asked along one direction :math:`g` only (:func:`directional_tilt`):
:math:`\tilde w_j \propto w_j e^{\lambda g^\top k_j}` with a scalar :math:`\lambda`. Along
the query's local slope of the targets, :math:`g = \beta(q)` (:func:`slope_directions`), the
tilted estimate is to first order the local line's, :math:`\bar y + \beta^\top (q - m)`,
with weights that stay non-negative; along the targets' trend over all keys
(:func:`trend_direction`) the direction is the same for every query. Either needs two keys
about the query where the balance in every direction needs :math:`d + 1`.
"""

import numpy as np

from kernattn._core.sums import log_normalized
from kernattn._local.linear_fit import (
    SUPPORT,
    key_columns,
    key_moments,
    solve_covariance,
    unpack_second,
    value_key_columns,
)

#: The default penalty on the tilt, ``PENALTY/2 · λᵀC₀λ``: half the variance of the tilt's
#: log-factors under the kernel weights, times 1/16.
PENALTY = 1.0 / 16.0
#: The penalties ``AttentionRegressor`` chooses among by the leave-one-out error: a small
#: one balances closely (best on dense one-dimensional data), a large one holds the tilt
#: back where the balance is out of reach, as for most queries with several features.
PENALTIES = (1.0 / 16.0, 1.0, 16.0)
#: The floor of the penalty's metric, as a share of the keys' covariance over all keys (it
#: matters only where the kernel weights sit on one key).
FLOOR = 1e-4
#: Newton iterations at most (convergence is quadratic: a few suffice).
MAX_ITER = 50
#: Converged when the Newton decrement (the squared centroid gap in units of the tilted
#: keys' covariance) is below this.
TOLERANCE = 1e-22
#: Below this Newton decrement the full step is taken without a line search.
NEWTON_REGION = 1e-6
#: Halvings of a Newton step at most (backtracking line search).
MAX_HALVINGS = 40
#: Directions of the keys' covariance with a variance below this share of the largest (or
#: of the keys' squared size: rounding noise) are left untilted (the keys do not vary in
#: them).
RANK_TOLERANCE = 1e-10
#: A query farther from the keys' center than this many times their range (in some
#: coordinate) is moved back along its direction to that distance: out there the tilted
#: weights already sit on the outermost keys, and the tilt would overflow on the way.
DISTANT_QUERY_RANGE = 1e6


def key_spread(keys, sample_weight=None):
    """The covariance of the keys over the training set, weighted by the sample weights
    (a weight of 2 counts as a repeated row)."""
    keys = np.asarray(keys, dtype=np.float64)
    if sample_weight is not None:
        # Only the weights' ratios count: scaled so that their sum cannot overflow.
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
        sample_weight = sample_weight / sample_weight.max(initial=0.0, where=True)
    return np.atleast_2d(np.cov(keys, rowvar=False, aweights=sample_weight, bias=True))


def _log_normalizer(log_w, keys, lam, Q):
    """``log Σ_j w_j exp(λᵀ(k_j − q))`` per row, and the tilted weights (each row of
    ``w_j exp(λᵀk_j)`` scaled to sum to 1)."""
    log_total, tilted = log_normalized(log_w + lam @ keys.T)
    return log_total - np.einsum("bd,bd->b", lam, Q), tilted


def tilted_weights(weights, keys, Q, columns=None, spread=None, penalty=PENALTY):
    r"""The tilted weights :math:`\tilde w` of a block of queries (see the module).

    Parameters
    ----------
    weights : ndarray of shape (b, n)
        Normalized kernel weights (non-negative, rows summing to 1); zeros stay zero (keys
        left out or of zero sample weight).
    keys : ndarray of shape (n, d)
        The keys :math:`k_j`.
    Q : ndarray of shape (b, d)
        The queries, in the keys' space.
    columns : ndarray of shape (n, d + d(d+1)/2), optional
        :func:`~kernattn._local.linear_fit.key_columns` of ``keys``, if already at hand.
    spread : ndarray of shape (d, d), optional
        The keys' covariance over the training set (:func:`key_spread`, with the sample
        weights), which floors the penalty's metric; default: unweighted.
    penalty : float, default=PENALTY
        :math:`\varepsilon`, the weight of the penalty on the tilt.

    Returns
    -------
    tilted : ndarray of shape (b, n)
        Non-negative, rows summing to 1, each row's centroid at its query up to the
        penalty's gap (see the module).
    """
    weights = np.asarray(weights, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    b, d = Q.shape
    if b == 0 or d == 0 or not np.all(np.isfinite(keys)):
        # Keys beyond the float range (or no key space): the kernel weights as they are.
        return weights.copy()
    reachable = np.all(np.isfinite(Q), axis=1)
    if not np.all(reachable):
        # A query beyond the float range keeps its kernel weights (already on the keys
        # nearest it); the others are tilted.
        tilted = weights.copy()
        if np.any(reachable):
            tilted[reachable] = tilted_weights(
                weights[reachable], keys, Q[reachable], columns, spread, penalty
            )
        return tilted
    if spread is None:
        spread = key_spread(keys)
    # Directions in which the keys do not vary over the training set cannot be balanced
    # (and rounding noise there would steer an unbounded tilt): the tilt acts in the span
    # of the keys' covariance only.
    variances, directions = np.linalg.eigh(spread)
    largest = max(variances.max(initial=0.0), 0.0) + np.max(keys**2, initial=0.0)
    spanned = variances > RANK_TOLERANCE * largest
    if not np.any(spanned):
        return weights.copy()
    if not np.all(spanned):
        directions = directions[:, spanned]
        keys, Q = keys @ directions, Q @ directions
        spread, columns, d = np.diag(variances[spanned]), None, int(spanned.sum())
    columns = key_columns(keys) if columns is None else columns
    low, high = keys.min(axis=0), keys.max(axis=0)
    center, span = (low + high) / 2, np.where(high > low, high - low, 1.0)
    with np.errstate(over="ignore"):
        reach = np.max(np.abs(Q - center) / span, axis=1, keepdims=True) / DISTANT_QUERY_RANGE
    Q = np.where(reach > 1.0, center + (Q - center) / np.maximum(reach, 1.0), Q)
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    lam = np.zeros((b, d))
    value, tilted = _log_normalizer(log_w, keys, lam, Q)
    mean, second = key_moments(tilted, columns, d)
    # The penalty's metric: the untilted covariance of the keys, C₀, floored by a small
    # share of their covariance over all keys (a query whose weight sits on one key has
    # C₀ ≈ 0: its tilt would be all but unpenalized, and its minimum far out).
    penalty = penalty * (second - mean[:, :, None] * mean[:, None, :] + FLOOR * spread)
    active = np.arange(b)
    for _ in range(MAX_ITER):
        if not len(active):
            break
        mean, second = key_moments(tilted[active], columns, d)
        lam_a = lam[active]
        gradient = mean - Q[active] + np.einsum("bde,be->bd", penalty[active], lam_a)
        step = solve_covariance(mean, second + penalty[active], gradient[:, :, None])
        step = step[:, :, 0]
        decrement = np.einsum("bd,bd->b", gradient, step)
        going = decrement > TOLERANCE
        active, value = active[going], value[going]
        step, decrement, lam_a = step[going], decrement[going], lam_a[going]
        if not len(active):
            break
        t = np.ones(len(active))
        trying = np.arange(len(active))
        for _ in range(MAX_HALVINGS):
            candidate = lam_a[trying] - t[trying, None] * step[trying]
            rows = active[trying]
            f, e = _log_normalizer(log_w[rows], keys, candidate, Q[rows])
            f += 0.5 * np.einsum("bd,bde,be->b", candidate, penalty[rows], candidate)
            ok = f <= value[trying] - 1e-4 * t[trying] * decrement[trying]
            # Within the region of quadratic convergence the full step is taken: the decrease
            # it brings can be below the rounding of the objective.
            ok |= (t[trying] == 1.0) & (decrement[trying] < NEWTON_REGION)
            done = trying[ok]
            lam[active[done]], value[done], tilted[active[done]] = candidate[ok], f[ok], e[ok]
            trying = trying[~ok]
            if not len(trying):
                break
            t[trying] *= 0.5
        # A row whose step could not lower the objective is at its minimum up to rounding.
        keep = np.ones(len(active), dtype=bool)
        keep[trying] = False
        active, value = active[keep], value[keep]
    return tilted


# ----------------------------------------------------------- tilts along one direction

#: The tilts: ``"balance"`` balances the keys about the query in every direction of the
#: key space (:func:`tilted_weights`); ``"slope"`` along each query's local slope of the
#: targets, ``"trend"`` along the targets' linear trend over all keys
#: (:func:`directional_tilt`).
KINDS = ("balance", "slope", "trend")
#: Newton steps at most of a tilt along one direction (safeguarded by bisection: each
#: step at least halves the bracket of the tilt, so this many reach any precision).
DIRECTION_MAX_ITER = 60
#: Converged when the centroid's gap (with the penalty's pull) is below this share of the
#: scores' local spread.
DIRECTION_TOLERANCE = 1e-10


def _unit_rows(G):
    """``G`` with each row scaled to unit length (zero rows stay zero)."""
    norm = np.linalg.norm(G, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, G / np.where(norm > 0, norm, 1.0), 0.0)


#: A linear predictor whose spread over the keys is below this share of the values' size
#: is rounding noise (constant values, say): it gives no direction.
ROUNDING = 1e-12


def _leading_direction(B, C, size):
    r"""The direction :math:`B v` of the linear predictors :math:`B` (…, d, t) that varies
    most under the covariance :math:`C` (…, d, d): :math:`v` the leading eigenvector of
    :math:`B^\top C B` (one output: :math:`B` itself); zero where the predictor's spread,
    :math:`\sqrt{v^\top B^\top C B v}`, is below ``ROUNDING`` times ``size``."""
    M = np.swapaxes(B, -1, -2) @ C @ B
    if B.shape[-1] == 1:
        G, spread = B[..., 0], M[..., 0, 0]
    else:
        values, vectors = np.linalg.eigh(M)
        G, spread = np.einsum("...dt,...t->...d", B, vectors[..., -1]), values[..., -1]
    with np.errstate(invalid="ignore"):
        noise = ~(np.sqrt(np.maximum(spread, 0.0)) > ROUNDING * size)
    return np.where(noise[..., None], 0.0, G)


def trend_direction(keys, values, sample_weight=None):
    r"""The unit direction :math:`g` of the targets' linear trend over the keys: the
    weighted least-squares slope of the values on the keys (for several outputs, the
    direction of the slopes that varies most over the keys); zeros where the values do not
    depend linearly on the keys."""
    keys = np.asarray(keys, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64).reshape(len(keys), -1)
    w = np.ones(len(keys)) if sample_weight is None else np.asarray(sample_weight, float)
    w = w / w.sum()
    centered = keys - w @ keys
    root = np.sqrt(w)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        B = np.linalg.lstsq(centered * root, (values - w @ values) * root, rcond=None)[0]
    if not np.all(np.isfinite(B)):
        return np.zeros(keys.shape[1])
    size = np.max(np.abs(values), initial=0.0)
    return _unit_rows(_leading_direction(B, key_spread(keys, sample_weight), size))


def slope_design(keys, values):
    """What the kernel weights are summed against for :func:`slope_directions`: the keys,
    their products, the values and the values times the keys, shape (n, d + d(d+1)/2 + t +
    t d). The same for every query: formed once per set of keys."""
    values = np.asarray(values, dtype=np.float64).reshape(len(keys), -1)
    return np.hstack([key_columns(keys), values, value_key_columns(values, keys)])


def slope_directions(weights, keys, Q, values, design=None):
    r"""Each query's unit direction of the local slope: the weighted least-squares slope
    of the values on the keys under the query's kernel weights (solved as a local line's,
    :func:`~kernattn._local.linear_fit.solve_covariance`), shape (b, d); zeros where the
    weights see no slope. ``design``: :func:`slope_design` of the keys and values, when at
    hand."""
    d = keys.shape[1]
    values = np.asarray(values, dtype=np.float64).reshape(len(keys), -1)
    t = values.shape[1]
    design = slope_design(keys, values) if design is None else design
    width = d + d * (d + 1) // 2  # the keys and their products
    with np.errstate(over="ignore", invalid="ignore"):
        sums = weights @ design
    mean = sums[:, :d]
    second = unpack_second(sums[:, d:width], d)
    ybar = sums[:, width : width + t]
    cross = sums[:, width + t :].reshape(len(Q), t, d)
    cross = (cross - ybar[:, :, None] * mean[:, None, :]).transpose(0, 2, 1)
    cross[~np.isfinite(cross)] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        B = solve_covariance(mean, second, cross)
        C = second - mean[:, :, None] * mean[:, None, :]
    B[~np.isfinite(B)] = 0.0
    C[~np.isfinite(C)] = 0.0
    return _unit_rows(_leading_direction(B, C, np.max(np.abs(values), initial=0.0)))


def directional_tilt(weights, scores, query_scores, spread, penalty=PENALTY):
    r"""Weights tilted along one direction: :math:`\tilde w_j \propto w_j e^{\lambda s_j}`
    with the scalar :math:`\lambda` that balances the scores about the query's,
    :math:`\sum_j \tilde w_j s_j = s(q)`, up to the penalty :math:`\tfrac{\varepsilon}{2}
    \lambda^2 v` (:math:`v` the scores' variance under :math:`w`, floored by ``FLOOR``
    times ``spread``, as for :func:`tilted_weights`).

    The scores are the keys' coordinates along the direction, :math:`s_j = g^\top k_j`. Along
    the targets' slope :math:`g = \beta`, the tilt reproduces the local line's correction to
    first order — :math:`\tilde w_j \approx w_j (1 + \lambda (s_j - \bar s))` with
    :math:`\lambda = (s(q) - \bar s) / \mathrm{Var}_w(s)`, so
    :math:`\sum_j \tilde w_j y_j \approx \bar y + \beta^\top (k(q) - m)` — with weights that
    stay non-negative and sum to 1.

    The minimum of the convex :math:`\log \sum_j w_j e^{\lambda (s_j - s(q))} +
    \tfrac{\varepsilon}{2} \lambda^2 v` is found by Newton's method safeguarded by
    bisection: its second derivative is at least :math:`\varepsilon v`, so the minimum lies
    between 0 and :math:`-f'(0) / (\varepsilon v)`, a bracket that every step narrows.

    Parameters
    ----------
    weights : ndarray of shape (b, n)
        Normalized kernel weights; zeros stay zero.
    scores : ndarray of shape (b, n) or (n,)
        Each key's score, per query or shared.
    query_scores : ndarray of shape (b,)
    spread : ndarray of shape (b,) or float
        The scores' variance over all keys (the penalty's floor).
    penalty : float

    Returns
    -------
    tilted : ndarray of shape (b, n)
        Non-negative, rows summing to 1. Rows without spread in the scores, or with a
        score that is not finite, keep their kernel weights.
    """
    weights = np.asarray(weights, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    shared = scores.ndim == 1
    b = len(weights)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = weights @ scores if shared else np.einsum("bn,bn->b", weights, scores)
        local = np.einsum("bn,bn->b", weights, (scores - mean[:, None]) ** 2)
        variance = local + FLOOR * np.broadcast_to(spread, (b,))
        gap = mean - query_scores
        finite = np.all(np.isfinite(scores), axis=-1)
    tilted = weights.copy()
    active = np.flatnonzero(
        np.isfinite(gap) & np.isfinite(variance) & (variance > 0) & (local > 0) & finite
    )
    if not len(active):
        return tilted
    pull = penalty * variance[active]
    target = query_scores[active]
    # f'(0) = gap: the minimum lies between 0 and -gap / pull.
    end = -gap[active] / pull
    low, high = np.minimum(0.0, end), np.maximum(0.0, end)
    # The first Newton step, from λ = 0, where the tilted weights are the kernel's: their
    # centroid and spread are the mean and local variance already at hand.
    slope = gap[active]
    done = np.abs(slope) <= DIRECTION_TOLERANCE * np.sqrt(variance[active])
    step = -slope / (local[active] + pull)
    lam = np.where((step > low) & (step < high), step, 0.5 * (low + high))
    with np.errstate(divide="ignore"):
        log_weights = np.log(weights[active])
    # Each row's scores less its kernel mean: the tilted weights are the same (a shift
    # within a row cancels in the normalization), and the tilted spread, their second
    # moment less the centroid's square, loses little to cancellation.
    centered = (scores if shared else scores[active]) - mean[active, None]
    target = target - mean[active]
    squared = centered**2
    rows = np.flatnonzero(~done)
    lam[done] = 0.0
    buffer = np.empty_like(log_weights)
    for _ in range(DIRECTION_MAX_ITER - 1):
        if not len(rows):
            break
        every = len(rows) == len(active)
        s = centered if every else centered[rows]
        logits = np.multiply(lam[rows, None], s, out=buffer[: len(rows)])
        logits += log_weights if every else log_weights[rows]
        _, current = log_normalized(logits)
        centroid = np.einsum("bn,bn->b", current, s)
        second = np.einsum("bn,bn->b", current, squared if every else squared[rows])
        curvature = second - centroid**2 + pull[rows]
        slope = centroid - target[rows] + pull[rows] * lam[rows]
        tilted[active[rows]] = current
        done = np.abs(slope) <= DIRECTION_TOLERANCE * np.sqrt(variance[active[rows]])
        done |= high[rows] - low[rows] <= 1e-15 * np.maximum(np.abs(low[rows]), np.abs(high[rows]))
        high[rows] = np.where(slope > 0, lam[rows], high[rows])
        low[rows] = np.where(slope < 0, lam[rows], low[rows])
        step = lam[rows] - slope / curvature
        inside = (step > low[rows]) & (step < high[rows])
        lam[rows] = np.where(inside, step, 0.5 * (low[rows] + high[rows]))
        rows = rows[~done]
    return tilted


def _out_of_reach(weights, scores, query_scores):
    """Rows whose query score lies outside the range of the scores of the keys the kernel
    weights reach (those above ``SUPPORT`` times the row's largest weight): no tilt of
    those weights can balance them. ``scores`` (b, n) or (n,), ``query_scores`` (b,)."""
    reached = weights > SUPPORT * weights.max(axis=1, keepdims=True)
    scores = np.broadcast_to(scores, weights.shape)
    low = np.where(reached, scores, np.inf).min(axis=1)
    high = np.where(reached, scores, -np.inf).max(axis=1)
    return ~((low <= query_scores) & (query_scores <= high) & (low < high))


def tilt_weights(
    kind, weights, keys, Q, *, spread, penalty, values=None, direction=None, design=None
):
    """The tilted weights of ``kind`` (:data:`KINDS`) of a block of queries, and the mask of
    the queries whose balance is out of reach: the query lies outside the range of the keys
    its kernel weights reach, along the direction (or, for ``"balance"``, in some coordinate
    of the key space), or those keys do not vary there.

    ``"balance"``: :func:`tilted_weights`; along each query's local slope of ``values``
    (``"slope"``) or along the fixed unit ``direction`` (``"trend"``,
    :func:`trend_direction`): :func:`directional_tilt`. ``spread`` is the keys' covariance
    over the training set (:func:`key_spread`); ``design``, for the slope, the keys' and
    values' :func:`slope_design` when at hand."""
    keys = np.asarray(keys, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "balance":
            tilted = tilted_weights(weights, keys, Q, spread=spread, penalty=penalty)
            out = np.zeros(len(Q), dtype=bool)
            for j in range(keys.shape[1]):
                out |= _out_of_reach(weights, keys[:, j], Q[:, j])
            return tilted, out
        if kind == "slope":
            G = slope_directions(weights, keys, Q, values, design)
            scores = G @ keys.T
            floor = np.einsum("bd,de,be->b", G, spread, G)
        else:
            G = np.broadcast_to(direction, Q.shape)
            scores = keys @ direction  # shared by the queries
            floor = float(direction @ spread @ direction)
        query_scores = np.einsum("bd,bd->b", G, Q)
        tilted = directional_tilt(weights, scores, query_scores, floor, penalty)
        # A query without a direction (no slope, no trend) has nothing to balance.
        aimless = ~np.any(G != 0, axis=1)
        out = _out_of_reach(weights, scores, query_scores) & ~aimless
    return tilted, out
