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
kernel of width :math:`h` the tilt is a shift of the query to :math:`q + h^2\lambda`.

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
:func:`~kernattn._local_linear.key_columns`).
"""

import numpy as np

from kernattn._local_linear import key_columns, solve_covariance, unpack_second

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
FAR_QUERY_RANGE = 1e6


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
    tilted = log_w + lam @ keys.T
    top = tilted.max(axis=1, keepdims=True)
    tilted -= top
    with np.errstate(under="ignore"):
        np.exp(tilted, out=tilted)
    total = tilted.sum(axis=1)
    tilted /= total[:, None]
    return np.log(total) + top[:, 0] - np.einsum("bd,bd->b", lam, Q), tilted


def _moments(weights, columns, d):
    """The key mean and second moment of normalized weights."""
    sums = weights @ columns
    return sums[:, :d], unpack_second(sums[:, d:], d)


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
        :func:`~kernattn._local_linear.key_columns` of ``keys``, if already at hand.
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
        reach = np.max(np.abs(Q - center) / span, axis=1, keepdims=True) / FAR_QUERY_RANGE
    Q = np.where(reach > 1.0, center + (Q - center) / np.maximum(reach, 1.0), Q)
    with np.errstate(divide="ignore"):
        log_w = np.log(weights)
    lam = np.zeros((b, d))
    value, tilted = _log_normalizer(log_w, keys, lam, Q)
    mean, second = _moments(tilted, columns, d)
    # The penalty's metric: the untilted covariance of the keys, C₀, floored by a small
    # share of their covariance over all keys (a query whose weight sits on one key has
    # C₀ ≈ 0: its tilt would be all but unpenalized, and its minimum far out).
    penalty = penalty * (second - mean[:, :, None] * mean[:, None, :] + FLOOR * spread)
    active = np.arange(b)
    for _ in range(MAX_ITER):
        if not len(active):
            break
        mean, second = _moments(tilted[active], columns, d)
        lam_a = lam[active]
        gradient = mean - Q[active] + np.einsum("bde,be->bd", penalty[active], lam_a)
        step, _ = solve_covariance(mean, second + penalty[active], gradient[:, :, None])
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
