r"""The conditional distribution from Nadaraya–Watson weights: CDF, quantiles, conformal
intervals.

The weights :math:`w_i(x) \ge 0`, :math:`\sum_i w_i(x) = 1` of a Nadaraya–Watson estimate
are a distribution over the training targets, and every functional of it is an estimate of
the same functional of the conditional distribution of :math:`y` given :math:`x`:

- the conditional CDF :math:`\hat F(t \mid x) = \sum_i w_i(x)\, 1\{y_i \le t\}`, the
  Nadaraya–Watson estimate of the indicator targets (Hall, Wolff and Yao 1999);
- its quantiles :math:`\hat Q(\tau \mid x) = \inf\{t : \hat F(t \mid x) \ge \tau\}`, exact
  weighted quantiles of the training targets, non-crossing by construction.

With the targets sorted once, :math:`\hat F` at every training target is the cumulative sum
of the weights in that order (:func:`cumulative_weights`); a threshold reads it at its rank
among the targets, a quantile level is found by a search in it (:func:`weighted_quantiles`,
every row of a block at once).

Weights that can be negative (the equivalent weights of a local line, the implied weights of
a signed feature map) give an :math:`\hat F` that can decrease or leave :math:`[0, 1]`; it
is replaced by its monotone rearrangement (Chernozhukov, Fernández-Val and Galichon 2010):
the sorted values of :math:`\hat F` over the grid of sorted training targets (each target one
point), then clipped to :math:`[0, 1]`.

Prediction intervals for a new observation come from the leave-one-out residuals
:math:`R_i = |y_i - \hat\mu_{-i}(x_i)|` (:math:`\hat\mu_{-i}` the estimate without row
:math:`i` and its exact duplicates):

- jackknife+ (Barber, Candès, Ramdas and Tibshirani 2021, :func:`jackknife_plus`):
  :math:`[\hat q^-_\alpha\{\hat\mu_{-i}(x) - R_i\},\ \hat q^+_\alpha\{\hat\mu_{-i}(x) + R_i\}]`,
  with :math:`\hat q^+_\alpha` the :math:`\lceil (1-\alpha)(n+1) \rceil`-th smallest value and
  :math:`\hat q^-_\alpha` the :math:`\lfloor \alpha (n+1) \rfloor`-th smallest; coverage at
  least :math:`1 - 2\alpha` for any distribution, about :math:`1 - \alpha` in practice;
- locally weighted (:func:`local_residual_quantiles`): :math:`\hat\mu(x) \pm \hat q(x)`,
  :math:`\hat q(x)` the weighted :math:`(1-\alpha)(1 + 1/n_\mathrm{eff}(x))` quantile of the
  :math:`R_i` under the query's own weights :math:`w_i(x)`
  (:math:`n_\mathrm{eff} = 1/\sum_i w_i^2`, Kish's effective sample size, in place of the
  :math:`n` of split conformal's correction): the residuals near the query set the width, so
  it follows a noise level that changes with :math:`x` (localized conformal prediction,
  Guan 2023). Its coverage is that of a weighted split-conformal interval whose calibration
  set is the query's neighbourhood: approximate, conditional on the neighbourhood.

References
----------
.. [1] P. Hall, R. C. L. Wolff, Q. Yao, "Methods for estimating a conditional distribution
   function", J. Amer. Statist. Assoc. 94 (1999).
.. [2] V. Chernozhukov, I. Fernández-Val, A. Galichon, "Quantile and probability curves
   without crossing", Econometrica 78 (2010).
.. [3] R. F. Barber, E. J. Candès, A. Ramdas, R. J. Tibshirani, "Predictive inference with
   the jackknife+", Ann. Statist. 49 (2021).
.. [4] L. Guan, "Localized conformal prediction: a generalized inference framework for
   conformal prediction", Biometrika 110 (2023).
"""

import math
from numbers import Real

import numpy as np

__all__ = [
    "check_alpha",
    "check_quantiles",
    "check_thresholds",
    "cumulative_weights",
    "jackknife_plus",
    "local_residual_quantiles",
    "threshold_ranks",
    "weighted_quantiles",
]


def check_alpha(alpha):
    """``alpha`` as a float in (0, 1), or a ``ValueError`` that says so."""
    if isinstance(alpha, bool | np.bool_) or not isinstance(alpha, Real) or not 0 < alpha < 1:
        raise ValueError(
            f"alpha must be a float strictly between 0 and 1 (0.1 for 90 % intervals); "
            f"got {alpha!r}"
        )
    return float(alpha)


def check_quantiles(quantiles):
    """The quantile levels as a 1-D float array in [0, 1] (a scalar gives one level)."""
    levels = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    if levels.ndim != 1 or len(levels) == 0:
        raise ValueError(f"quantiles must be one level or a 1-D list of them; got {quantiles!r}")
    if not np.all((levels >= 0) & (levels <= 1)):
        raise ValueError(f"quantiles must lie in [0, 1] (NaN is not allowed); got {quantiles!r}")
    return levels


def check_thresholds(thresholds, n_outputs):
    """The thresholds as an array of shape (n_outputs, n_thresholds): one 1-D sorted list
    shared by every output, or one row per output; no NaN."""
    t = np.asarray(thresholds, dtype=np.float64)
    if t.ndim == 0:
        t = t[None]
    if t.ndim == 1:
        t = np.broadcast_to(t, (n_outputs, len(t)))
    if t.ndim != 2 or t.shape[0] != n_outputs or t.shape[1] == 0:
        raise ValueError(
            "thresholds must be a non-empty 1-D array (shared by every output) or one row "
            f"per output, shape ({n_outputs}, n_thresholds); got shape {np.shape(thresholds)}"
        )
    if np.any(np.isnan(t)):
        raise ValueError("thresholds must not contain NaN")
    if np.any(np.diff(t, axis=1) < 0):
        raise ValueError("thresholds must be sorted in increasing order (np.sort them first)")
    return t


def threshold_ranks(sorted_targets, thresholds):
    """For each threshold :math:`t`, the number of training targets :math:`\\le t` (the
    column of :func:`cumulative_weights` that holds :math:`\\hat F(t)`, plus one)."""
    return np.searchsorted(sorted_targets, thresholds, side="right")


def cumulative_weights(weights, order, signed):
    r""":math:`\hat F(y_{(k)} \mid x)` at every sorted training target, per query.

    Parameters
    ----------
    weights : ndarray of shape (b, n)
        The block's weights against the training rows (rows sum to 1).
    order : ndarray of shape (n,)
        The rows in increasing order of their target.
    signed : bool
        Whether the weights may be negative: rows whose cumulative sums decrease or leave
        :math:`[0, 1]` are then rearranged (sorted) and clipped.

    Returns
    -------
    cdf : ndarray of shape (b, n)
        Non-decreasing rows in :math:`[0, 1]` that end at exactly 1.
    rearranged : ndarray of bool, shape (b,)
        The rows that needed the rearrangement.
    """
    cdf = np.take(weights, order, axis=1)
    np.cumsum(cdf, axis=1, out=cdf)
    # Divided by the row's own total: the last entry is exactly 1 (x / x), whatever the
    # rounding of the sum.
    total = cdf[:, -1:].copy()
    np.divide(cdf, total, out=cdf, where=total != 0)
    bad = np.zeros(len(cdf), dtype=bool)
    if signed:
        bad = np.any(np.diff(cdf, axis=1) < 0, axis=1) | np.any((cdf < 0) | (cdf > 1), axis=1)
        if np.any(bad):
            # Chernozhukov et al.'s rearrangement on the grid of sorted targets: the sorted
            # values of the function.
            cdf[bad] = np.clip(np.sort(cdf[bad], axis=1), 0.0, 1.0)
    return cdf, bad


def first_reaching(cdf, levels):
    r"""Per row of ``cdf`` (non-decreasing, ending at 1) and level :math:`\tau`, the first
    index :math:`k` with ``cdf[k] ≥ τ`` (for :math:`\tau = 0` the first with ``cdf[k] > 0``):
    every row searched at once, no loop over rows.

    The rows are laid end to end as complex numbers ``row + 1j·cdf``, which numpy orders
    lexicographically: one sorted array, searched for ``row + 1j·τ``. (Adding the row index
    to the floats instead would round away their low bits and move ties.)
    """
    b, n = cdf.shape
    keyed = np.empty((b, n), dtype=np.complex128)
    keyed.real = np.arange(b)[:, None]
    keyed.imag = cdf
    keyed = keyed.ravel()
    index = np.empty((b, len(levels)), dtype=np.intp)
    rows = np.arange(b)
    for j, tau in enumerate(levels):
        # A loop over the levels only: each search serves every row.
        side = "right" if tau == 0 else "left"
        found = np.searchsorted(keyed, rows + 1j * tau, side=side) - rows * n
        index[:, j] = found
    return np.minimum(index, n - 1)


def weighted_quantiles(cdf, sorted_values, levels):
    r"""The weighted quantiles :math:`\inf\{v : \hat F(v) \ge \tau\}` of ``sorted_values``
    whose cumulative weights are the rows of ``cdf``: shape (b, n_levels), non-decreasing
    in the level."""
    return sorted_values[first_reaching(cdf, levels)]


def upper_rank_quantile(values, alpha, sample_weight=None):
    r"""Per row, :math:`\hat q^+_\alpha`: the :math:`\lceil (1-\alpha)(n+1) \rceil`-th smallest
    of the row's ``n`` values (:math:`+\infty` when that exceeds ``n``).

    With sample weights :math:`s_i` (a row of weight 2 counts as two), the smallest value
    :math:`v` with :math:`\sum_{v_i \le v} s_i \ge (1-\alpha)(\sum_i s_i + \bar s)`, the new
    observation weighing the mean :math:`\bar s`; the same for equal weights.
    """
    b, n = values.shape
    if sample_weight is None or np.all(sample_weight == sample_weight[0]):
        # (1 − α)(n + 1) is often an integer that rounds up a hair: ceil(9.000000000000002).
        k = math.ceil((1.0 - alpha) * (n + 1) * (1 - 1e-12))
        if k > n:
            return np.full(b, np.inf)
        return np.partition(values, k - 1, axis=1)[:, k - 1]
    order = np.argsort(values, axis=1)
    weight = sample_weight / sample_weight.mean()
    cumulative = np.cumsum(weight[order], axis=1)
    level = (1.0 - alpha) * (n + 1) * (1 - 1e-12)
    if cumulative[0, -1] < level:
        return np.full(b, np.inf)
    first = np.argmax(cumulative >= level, axis=1)
    return np.take_along_axis(values, np.take_along_axis(order, first[:, None], 1), 1)[:, 0]


def jackknife_plus(loo_at_query, residuals, alpha, sample_weight=None):
    r"""Jackknife+ intervals (Barber et al. 2021) of a block of queries.

    .. math::

        \bigl[\hat q^-_\alpha\{\hat\mu_{-i}(x) - R_i\},\
              \hat q^+_\alpha\{\hat\mu_{-i}(x) + R_i\}\bigr]

    Parameters
    ----------
    loo_at_query : ndarray of shape (b, n)
        :math:`\hat\mu_{-i}(x)`: each query's estimate without training row :math:`i`
        (:math:`+\infty` where it cannot be formed: the interval is then unbounded).
    residuals : ndarray of shape (n,)
        :math:`R_i = |y_i - \hat\mu_{-i}(x_i)|`.
    alpha : float
    sample_weight : ndarray of shape (n,), optional

    Returns
    -------
    lower, upper : ndarray of shape (b,)
    """
    unknown = ~np.isfinite(loo_at_query)
    upper_values = loo_at_query + residuals
    upper_values[unknown] = np.inf
    # q⁻ of a − R is −q⁺ of R − a.
    lower_values = residuals - loo_at_query
    lower_values[unknown] = np.inf
    upper = upper_rank_quantile(upper_values, alpha, sample_weight)
    lower = -upper_rank_quantile(lower_values, alpha, sample_weight)
    return lower, upper


def local_residual_quantiles(weights, order, sorted_residuals, alpha):
    r"""The half-widths :math:`\hat q(x)` of the locally weighted intervals of a block:
    the weighted :math:`(1-\alpha)(1 + 1/n_\mathrm{eff})` quantile of the residuals under
    each query's weights (:math:`n_\mathrm{eff} = 1/\sum_i w_i^2`; negative weights count
    as 0); :math:`+\infty` where that level exceeds 1.

    Parameters
    ----------
    weights : ndarray of shape (b, n)
    order : ndarray of shape (n,)
        The rows in increasing order of their residual.
    sorted_residuals : ndarray of shape (n,)
    alpha : float
    """
    weights = np.maximum(weights, 0.0)
    weights /= weights.sum(axis=1, keepdims=True)
    n_eff = 1.0 / np.einsum("ij,ij->i", weights, weights)
    level = (1.0 - alpha) * (1.0 + 1.0 / n_eff)
    cdf, _ = cumulative_weights(weights, order, signed=False)
    # One search per row of the block: its own level (first_reaching takes shared levels,
    # so the levels are laid on the rows' cdf instead: cdf / level ≥ 1).
    reachable = level <= 1.0
    half = np.full(len(weights), np.inf)
    if np.any(reachable):
        scaled = cdf[reachable] / level[reachable, None]
        half[reachable] = sorted_residuals[first_reaching(scaled, np.array([1.0]))[:, 0]]
    return half
