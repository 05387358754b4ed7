r"""The local-linear fit at a query from the kernel moments of the keys.

At a query :math:`q` with normalized kernel weights :math:`w_j` (summing to 1) on keys
:math:`k_j` (inputs centered and divided by the bandwidth), the weighted least-squares line
evaluated at :math:`q` is, with the weighted mean :math:`m = \sum_j w_j k_j` and covariance
:math:`C = \sum_j w_j (k_j - m)(k_j - m)^\top`,

.. math::

    \hat y(q) = \bar y + C_{xy}^\top C^{-1} (q - m), \qquad
    l_j(q) = w_j \left(1 + (k_j - m)^\top g\right), \quad g = C^{-1}(q - m),

where :math:`\bar y = \sum_j w_j y_j` and :math:`C_{xy} = \sum_j w_j (k_j - m) y_j^\top`:
the equivalent weights :math:`l_j` are the kernel weights times a linear correction.
Everything needs only the sums :math:`\sum_j w_j [1, k_j, k_j k_j^\top, y_j, y_j k_j^\top]`,
one matrix product per block of queries (no per-query pass over the keys).

The solve is scale-invariant and regularized: :math:`C` is standardized by its diagonal,
and a ridge of ``RIDGE`` times each feature's second moment about the training mean (the
size of the rounding error of :math:`C` computed from moments) is added first. As the
bandwidth grows the weights become uniform and the fit is the weighted least-squares line
of all the data; as it shrinks to 0 at a training point the weight of every other key
vanishes, :math:`C` falls below the ridge and the estimate is that point's target.
A feature without resolvable local spread gets slope 0 there (the ridge), never a NaN.

A line's estimate and equivalent weights, for every kernel, are the local polynomial of
degree 1 (:mod:`kernattn._local.polynomial`), held back where its local design cannot
support it. This closed form serves the tilt (:mod:`kernattn._local.tilt`): the direction of
each query's local slope, and the Newton steps of the balance, whose system is the keys'
tilted covariance plus the penalty.
"""

import numpy as np

from kernattn._local.cholesky import batch_entries, cholesky_factor, cholesky_solve
from kernattn._local.polynomial import correlation_form

#: The ridge, relative to each feature's weighted second moment about the training mean:
#: well above the rounding error of a covariance computed from moments (about 1e-16 of
#: that second moment per term), far below any covariance that carries information.
RIDGE = 1e-12
#: A key counts towards a neighborhood when its weight is above this fraction of the
#: largest weight (smaller weights do not change a float64 sum with the largest).
SUPPORT = 1e-12


def symmetric_pairs(d):
    """Index pairs ``(a, b)``, ``a ≤ b``, of the upper triangle of a d×d matrix."""
    return np.triu_indices(d)


def key_columns(keys):
    """``[k_j, k_ja k_jb (a ≤ b)]`` for each key: what the kernel weights are summed against
    (after the engine's value columns) for the local-linear fit."""
    a, b = symmetric_pairs(keys.shape[1])
    return np.hstack([keys, keys[:, a] * keys[:, b]])


def value_key_columns(values, keys):
    """``y_jo k_jf`` for every output ``o`` and feature ``f`` (output-major)."""
    return (values[:, :, None] * keys[:, None, :]).reshape(len(keys), -1)


def unpack_second(upper, d):
    """The symmetric (b, d, d) matrices from their upper triangles (b, d(d+1)/2)."""
    a, b = symmetric_pairs(d)
    out = np.empty((len(upper), d, d))
    out[:, a, b] = upper
    out[:, b, a] = upper
    return out


def solve_covariance(mean, second, rhs):
    r"""``(C + Λ)⁻¹ rhs`` per query, with ``C = second − m mᵀ`` and the ridge ``Λ``, solved in
    correlation form by the local fits' one solve (:mod:`kernattn._local.cholesky`).

    Parameters
    ----------
    mean : ndarray of shape (b, d)
        Weighted mean of the keys :math:`m`.
    second : ndarray of shape (b, d, d)
        Weighted second moment of the keys about the training mean, :math:`\sum_j w_j
        k_j k_j^\top`.
    rhs : ndarray of shape (b, d, r)

    Returns
    -------
    solution : ndarray of shape (b, d, r)
        0 in the features without local spread and on rows whose moments are not finite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        C = second - mean[:, :, None] * mean[:, None, :]
        moment = np.diagonal(second, axis1=1, axis2=2)
        ridge = RIDGE * moment
        variance = np.diagonal(C, axis1=1, axis2=2) + ridge
        finite = np.all(np.isfinite(C), axis=(1, 2)) & np.all(np.isfinite(rhs), axis=(1, 2))
        active = (variance > 0) & finite[:, None]
        scale = np.where(active, np.sqrt(np.where(active, variance, 1.0)), 1.0)
        # Features without spread (or rows that overflowed) drop out: an identity block.
        R = correlation_form(C, scale, active, ridge / scale**2)
        scaled_rhs = np.where(active[:, :, None], rhs / scale[:, :, None], 0.0)
        L = cholesky_factor(*batch_entries(R))
        solution = np.moveaxis(cholesky_solve(L, np.moveaxis(scaled_rhs, 0, -1)), -1, 0)
    solution /= scale[:, :, None]
    solution[~finite] = 0.0
    return solution


def sparse_neighborhoods(weights, n_params, groups=None):
    """Rows whose weights rest on fewer distinct training inputs than ``n_params``.

    A key is in a query's neighborhood when its weight is above ``SUPPORT`` times the
    row's largest. ``groups`` (ids of identical inputs, or ``None`` when all differ) makes
    exact duplicates count once.
    """
    support = weights > SUPPORT * weights.max(axis=1, keepdims=True)
    counts = support.sum(axis=1)
    sparse = counts < n_params
    if groups is not None:
        multiplicity = np.bincount(groups).max(initial=1)
        if multiplicity > 1:
            for i in np.flatnonzero(~sparse & (counts < n_params * multiplicity)):
                sparse[i] = len(np.unique(groups[support[i]])) < n_params
    return sparse


def n_line_parameters(X):
    """Parameters of a line in the features that vary: 1 + their number."""
    return 1 + int(np.sum(np.ptp(X, axis=0) > 0)) if len(X) else 1


def key_moments(weights, columns, d):
    """The mean (b, d) and second moment (b, d, d) of the keys under normalized weights,
    from :func:`key_columns` (``columns``)."""
    sums = weights @ columns
    return sums[:, :d], unpack_second(sums[:, d:], d)
