r"""The conditional distribution from Nadaraya–Watson weights: CDF, quantiles, conformal
intervals.

The weights :math:`w_i(x) \ge 0`, :math:`\sum_i w_i(x) = 1` of a Nadaraya–Watson estimate
are a distribution over the training targets, and every functional of it is an estimate of
the same functional of the conditional distribution of :math:`y` given :math:`x`:

- the conditional CDF :math:`\hat F(t \mid x) = \sum_i w_i(x)\, 1\{y_i \le t\}`, the
  Nadaraya–Watson estimate of the indicator targets (Hall, Wolff and Yao 1999);
- its quantiles :math:`\hat Q(\tau \mid x) = \inf\{t : \hat F(t \mid x) \ge \tau\}`, exact
  weighted quantiles of the training targets, non-crossing by construction.

With the targets sorted once at fit and cut into tiles of consecutive ranks
(:class:`TargetTiles`), one pass of the reduction over the keys in that order gives each
query's weight on every tile, hence :math:`\hat F` at the tiles' edges; a threshold or a
quantile level then needs the weights inside one tile only (:func:`cdf_at_counts`,
:func:`quantile_ranks`, every query of a block at once). No (queries × keys) matrix is
formed.

Weights that can be negative (the equivalent weights of a local line, the implied weights of
a signed feature map) are held in memory (:class:`DenseWeights`) and give an :math:`\hat F`
that can decrease or leave :math:`[0, 1]`; it is replaced by its monotone rearrangement
(Chernozhukov, Fernández-Val and Galichon 2010): the sorted values of :math:`\hat F` over the
grid of sorted training targets (each target one point), then clipped to :math:`[0, 1]`.

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

Both hold the kernel as fitted on all rows: a kernel chosen with the targets (a searched
bandwidth, a learned kernel) makes these residuals optimistic. CV+, which refits the
estimator on folds with its selection redone, is in :mod:`kernattn._engine.cross_conformal`.

Split (inductive) conformal (Papadopoulos et al. 2002; Lei et al. 2018;
:class:`SplitCalibration`) needs no training row at all: the absolute residuals
:math:`R_i = |y_i - \hat\mu(x_i)|` of :math:`n` calibration rows the fit never saw give
:math:`\hat\mu(x) \pm \hat q`, :math:`\hat q` the :math:`\lceil (1-\alpha)(n+1)
\rceil`-th smallest :math:`R_i`; its coverage is at least :math:`1 - \alpha` in finite
samples whenever the calibration rows and the new one are exchangeable, whatever the model.

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
.. [5] H. Papadopoulos, K. Proedrou, V. Vovk, A. Gammerman, "Inductive confidence machines
   for regression", ECML (2002).
.. [6] J. Lei, M. G'Sell, A. Rinaldo, R. J. Tibshirani, L. Wasserman, "Distribution-free
   predictive inference for regression", J. Amer. Statist. Assoc. 113 (2018).
.. [7] R. J. Tibshirani, R. F. Barber, E. J. Candès, A. Ramdas, "Conformal prediction under
   covariate shift", NeurIPS (2019).
"""

import functools
import math
from numbers import Real

import numpy as np
from scipy.special import ndtr
from scipy.stats import binom

from kernattn._core.blocks import KEY_TILE, iter_query_blocks, map_query_blocks, query_block_size
from kernattn._core.loo import DuplicateGroups

__all__ = [
    "CONFORMAL_METHODS",
    "check_alpha",
    "check_confidence",
    "conformal_level",
    "check_conformal_method",
    "check_quantiles",
    "check_thresholds",
    "check_y_bandwidth",
    "kernel_cdf_columns",
    "y_bandwidth_candidates",
    "DenseWeights",
    "KernelCdfWindows",
    "TargetTiles",
    "cdf_at_counts",
    "jackknife_plus",
    "local_residual_quantiles",
    "quantile_ranks",
    "threshold_ranks",
    "MixedWeights",
    "SplitCalibration",
    "conformal_bounds",
    "cross_validated_y_bandwidth",
    "head_proportions",
    "kernel_estimate",
    "leave_one_out_at",
    "leave_one_out_residuals",
    "map_distribution",
    "rank_residuals",
    "residual_ranks",
    "rearrange_signed",
    "smoothed_cdf",
    "smoothed_quantiles",
    "with_total",
]


def check_alpha(alpha):
    """``alpha`` as a float in (0, 1), or a ``ValueError`` that says so."""
    if isinstance(alpha, bool | np.bool_) or not isinstance(alpha, Real) or not 0 < alpha < 1:
        raise ValueError(
            f"alpha must be a float strictly between 0 and 1 (0.1 for 90 % intervals); "
            f"got {alpha!r}"
        )
    return float(alpha)


def check_confidence(confidence):
    """``confidence`` as ``None`` or a float in (0, 1), or a ``ValueError`` that says so."""
    if confidence is None:
        return None
    if (
        isinstance(confidence, bool | np.bool_)
        or not isinstance(confidence, Real)
        or not 0 < confidence < 1
    ):
        raise ValueError(
            "confidence must be None (coverage on average over training sets) or a float "
            "strictly between 0 and 1 (0.9: the coverage given these training rows is at "
            f"least 1 - alpha for 90 % of training sets); got {confidence!r}"
        )
    return float(confidence)


def conformal_level(n, alpha, confidence=None):
    r"""The rank, among ``n`` values, of the upper conformal quantile :math:`\hat q^+`: a
    real level in rows of the mean weight (the ``k``-th smallest value for a level ``k``).

    - ``confidence=None``: :math:`(1-\alpha)(n+1)`, coverage :math:`1 - \alpha` on
      average over the training (calibration) sets.
    - ``confidence`` :math:`= 1 - \delta`: the smallest integer :math:`k` with
      :math:`P\{\mathrm{Bin}(n, 1-\alpha) \ge k\} \le \delta`, :math:`n + 1` where
      no :math:`k \le n` is enough. The coverage *given* the calibration rows of the
      :math:`k`-th smallest of :math:`n` exchangeable continuous residuals is
      :math:`\mathrm{Beta}(k, n + 1 - k)`, and :math:`P\{\mathrm{Beta}(k, n+1-k) < p\} =
      P\{\mathrm{Bin}(n, p) \ge k\}`: with probability at least :math:`1 - \delta` over
      the calibration rows, the interval covers at least :math:`1 - \alpha` of new
      observations (Vovk 2012, "training-conditional" validity; the PAC intervals of
      Park et al. 2020).
    """
    if confidence is None:
        return (1.0 - alpha) * (n + 1)
    return _binomial_rank(int(n), float(alpha), float(confidence))


@functools.lru_cache(maxsize=64)
def _binomial_rank(n, alpha, confidence):
    """The smallest k with P{Bin(n, 1 − α) ≥ k} ≤ 1 − confidence (n + 1 where none ≤ n
    is): one more than scipy's inverse survival function, the smallest x with
    P{Bin > x} ≤ 1 − confidence. Cached: every block of queries asks for it."""
    x = binom.isf(1.0 - confidence, n, 1.0 - alpha)
    return float(min(x + 1, n + 1))


#: The prediction intervals of ``conformal_interval``: ``"auto"`` is ``"split"`` where the fit
#: has a calibration, else ``"cv+"`` where the kernel was chosen with the training targets,
#: else ``"jackknife+"``.
CONFORMAL_METHODS = ("auto", "jackknife+", "cv+", "local", "split")


def check_conformal_method(method):
    """``method`` as one of :data:`CONFORMAL_METHODS`, or a ``ValueError`` that lists them."""
    if not isinstance(method, str) or method not in CONFORMAL_METHODS:
        raise ValueError(
            "from the fit's leave-one-out residuals, method must be 'jackknife+' or 'local'; "
            f"got {method!r}; from refits on K folds (the kernel's selection redone), "
            "'cv+'; 'auto' (the default) takes 'cv+' where the kernel was chosen with the "
            "targets, else 'jackknife+'; from held-out rows given to calibrate, 'split'"
        )
    return method


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


def check_y_bandwidth(y_bandwidth, n_outputs):
    """``None`` (no smoothing in y), ``"cv"``, or an array of ``n_outputs`` positive
    bandwidths (a float is shared by the outputs)."""
    if y_bandwidth is None or (isinstance(y_bandwidth, str) and y_bandwidth == "cv"):
        return y_bandwidth
    message = (
        "y_bandwidth must be None (the step CDF), 'cv', a positive float or one positive "
        f"float per output ({n_outputs}); got {y_bandwidth!r}"
    )
    if isinstance(y_bandwidth, str | bool | np.bool_):
        raise ValueError(message)
    try:
        h = np.asarray(y_bandwidth, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    h = np.broadcast_to(h, (n_outputs,)) if h.ndim == 0 else h
    if h.shape != (n_outputs,) or not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(message)
    return h


def kernel_cdf_columns(targets, thresholds, bandwidth):
    r"""The Gaussian kernel CDF in :math:`y`, :math:`\Phi((t - y_i)/h_y)`, of every target
    (rows) at every threshold (columns): the values whose weighted average is the smoothed
    conditional CDF :math:`\tilde F(t \mid x) = \sum_i w_i(x)\, \Phi((t - y_i)/h_y)`
    (R np's ``npcdist``; it tends to the step CDF as :math:`h_y \to 0`)."""
    return ndtr((thresholds[None, :] - targets[:, None]) / bandwidth)


def y_bandwidth_candidates(targets, n_candidates=29):
    r"""Bandwidths in :math:`y` searched by ``y_bandwidth="cv"``: :math:`2^{-5}` to :math:`2^2`
    times Silverman's rule for the marginal distribution of the targets,
    :math:`1.06 \min(s, \mathrm{IQR}/1.34)\, n^{-1/5}` (the conditional distribution is
    narrower than the marginal one)."""
    q75, q25 = np.percentile(targets, [75, 25])
    spread = min(np.std(targets), (q75 - q25) / 1.34) or np.std(targets) or 1.0
    rule = 1.06 * spread * len(targets) ** (-0.2)
    return rule * 2.0 ** np.linspace(-5, 2, n_candidates)


def threshold_ranks(sorted_targets, thresholds):
    """For each threshold :math:`t`, the number of training targets :math:`\\le t`."""
    return np.searchsorted(sorted_targets, thresholds, side="right")


class TargetTiles:
    r"""The training rows in increasing order of one target, cut into tiles of ``tile``
    consecutive ranks (the key tiles of the reduction, :data:`kernattn._core.blocks.KEY_TILE`).

    A query's weight on each tile (its *masses*) gives :math:`\hat F` at the tiles' edges;
    the weights inside the one tile where a level is reached give the rest. So a quantile
    needs one pass of the reduction over the keys in target order, and then the weights of
    a few tiles of keys, never the whole (queries × keys) matrix.
    """

    def __init__(self, order, tile=KEY_TILE):
        self.order = order
        self.tile = tile
        self.n = len(order)
        self.n_tiles = max(-(-self.n // tile), 1)

    def keys(self, j):
        """The rows of tile ``j`` (in target order)."""
        return self.order[j * self.tile : (j + 1) * self.tile]


class DenseWeights:
    r"""The masses and in-tile weights of a block of weights held in memory (a local fit's
    equivalent weights, implied feature weights), in the order of ``tiles``.

    Rows with a negative weight have an :math:`\hat F` that decreases somewhere (and may
    leave :math:`[0, 1]`): it is replaced by its monotone rearrangement (Chernozhukov,
    Fernández-Val and Galichon 2010) on the grid of sorted targets — the sorted values of
    :math:`\hat F`, each target one point of the grid — clipped to :math:`[0, 1]`, and the
    row's weights by that function's increments (non-negative). ``rearranged`` marks them.
    """

    def __init__(self, weights, tiles):
        self.tile = tiles.tile
        ordered = np.take(weights, tiles.order, axis=1)
        self.rearranged = np.any(ordered < 0, axis=1)
        if np.any(self.rearranged):
            cdf = np.cumsum(ordered[self.rearranged], axis=1)
            cdf /= cdf[:, -1:]
            cdf = np.clip(np.sort(cdf, axis=1), 0.0, 1.0)
            ordered[self.rearranged] = np.diff(cdf, axis=1, prepend=0.0)
        self.weights = ordered
        self.masses = np.add.reduceat(ordered, np.arange(0, tiles.n, tiles.tile), axis=1)

    def fractions(self, rows, j):
        return self.weights[rows, j * self.tile : (j + 1) * self.tile]


def _edges(masses):
    r""":math:`\hat F` at the tiles' edges, shape (b, n_tiles + 1): 0, then the cumulative
    masses divided by their total (the last edge is exactly 1)."""
    cumulative = np.cumsum(masses, axis=1)
    total = cumulative[:, -1:].copy()
    np.divide(cumulative, total, out=cumulative, where=total > 0)
    return np.concatenate([np.zeros((len(masses), 1)), cumulative], axis=1)


def _inside(edges, rows, j, fractions):
    r""":math:`\hat F` at each key of tile ``j`` for ``rows``: the edge before the tile plus
    its mass times the cumulative share of the key's weight in it (its last entry is the
    next edge, exactly)."""
    within = np.cumsum(fractions, axis=1)
    total = within[:, -1:].copy()
    share = np.divide(within, total, out=np.zeros_like(within), where=total > 0)
    share[:, -1] = 1.0
    low, high = edges[rows, j], edges[rows, j + 1]
    return low[:, None] + (high - low)[:, None] * share


def cdf_at_counts(masses, counts, fractions, tile):
    r""":math:`\hat F` after the first ``counts[k]`` sorted targets, per query, shape
    (b, n_counts): non-decreasing along sorted ``counts``, in :math:`[0, 1]`.

    Parameters
    ----------
    masses : ndarray of shape (b, n_tiles)
        Each query's weight on each tile of sorted targets (non-negative).
    counts : ndarray of int, shape (n_counts,)
    fractions : callable
        ``fractions(rows, j)``: the weights of those rows on the keys of tile ``j``, in
        target order (any positive scale per row).
    tile : int
    """
    edges = _edges(masses)
    b, n_tiles = masses.shape
    j, k = np.divmod(counts, tile)
    at_edge = (k == 0) | (j >= n_tiles)
    out = np.empty((b, len(counts)))
    out[:, at_edge] = edges[:, np.minimum(j[at_edge], n_tiles)]
    rows = np.arange(b)
    for t in np.unique(j[~at_edge]):
        columns = np.flatnonzero((j == t) & ~at_edge)
        inside = _inside(edges, rows, t, fractions(rows, t))
        out[:, columns] = inside[:, k[columns] - 1]
    # One rounding of the in-tile products could step back an ulp.
    np.maximum.accumulate(out, axis=1, out=out)
    return np.clip(out, 0.0, 1.0, out=out)


def quantile_ranks(masses, levels, fractions, tile):
    r"""The rank among the sorted targets of :math:`\inf\{t : \hat F(t) \ge \tau\}` per
    query and level (for :math:`\tau = 0` the first target of positive weight), shape
    (b, n_levels); every query of the block at once, a loop over the tiles reached.

    ``levels``: shape (n_levels,) shared by the queries, or (b, n_levels); ``masses``,
    ``fractions`` and ``tile`` as for :func:`cdf_at_counts`.
    """
    edges = _edges(masses)
    b, n_tiles = masses.shape
    levels = np.broadcast_to(np.asarray(levels, dtype=np.float64), (b, np.shape(levels)[-1]))
    zero = levels[:, :, None] == 0
    tail = edges[:, None, 1:]
    reached = np.where(zero, tail <= 0, tail < levels[:, :, None]).sum(axis=2)
    reached = np.minimum(reached, n_tiles - 1)
    ranks = np.empty(levels.shape, dtype=np.intp)
    for t in np.unique(reached):
        pair_rows, pair_levels = np.nonzero(reached == t)
        rows, inverse = np.unique(pair_rows, return_inverse=True)
        inside = _inside(edges, rows, t, fractions(rows, t))[inverse]
        tau = levels[pair_rows, pair_levels][:, None]
        k = np.where(tau == 0, inside <= 0, inside < tau).sum(axis=1)
        ranks[pair_rows, pair_levels] = t * tile + np.minimum(k, inside.shape[1] - 1)
    return ranks


def upper_rank_quantile(values, alpha, sample_weight=None, confidence=None):
    r"""Per row, :math:`\hat q^+_\alpha`: the :math:`\lceil (1-\alpha)(n+1) \rceil`-th smallest
    of the row's ``n`` values (:math:`+\infty` when that exceeds ``n``); with ``confidence``,
    the rank of :func:`conformal_level` instead.

    With sample weights :math:`s_i` (a row of weight 2 counts as two), the smallest value
    :math:`v` with :math:`\sum_{v_i \le v} s_i \ge \bar s\,k`, :math:`\bar s` their mean and
    :math:`k` the level (:math:`(1-\alpha)(n+1)`: :math:`(1-\alpha)(\sum_i s_i + \bar s)`,
    the new observation weighing :math:`\bar s`); the same for equal weights.
    """
    b, n = values.shape
    # (1 − α)(n + 1) is often an integer that rounds up a hair: ceil(9.000000000000002).
    level = conformal_level(n, alpha, confidence) * (1 - 1e-12)
    if sample_weight is None or np.all(sample_weight == sample_weight[0]):
        k = math.ceil(level)
        if k > n:
            return np.full(b, np.inf)
        return np.partition(values, k - 1, axis=1)[:, k - 1]
    order = np.argsort(values, axis=1)
    weight = sample_weight / sample_weight.mean()
    cumulative = np.cumsum(weight[order], axis=1)
    if cumulative[0, -1] < level:
        return np.full(b, np.inf)
    first = np.argmax(cumulative >= level, axis=1)
    return np.take_along_axis(values, np.take_along_axis(order, first[:, None], 1), 1)[:, 0]


def jackknife_plus(loo_at_query, residuals, alpha, sample_weight=None, confidence=None):
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
    confidence : float or None
        The ranks of :func:`conformal_level`.

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
    upper = upper_rank_quantile(upper_values, alpha, sample_weight, confidence)
    lower = -upper_rank_quantile(lower_values, alpha, sample_weight, confidence)
    return lower, upper


def local_residual_quantiles(weights, tiles, sorted_residuals, alpha):
    r"""The half-widths :math:`\hat q(x)` of the locally weighted intervals of a block:
    the weighted :math:`(1-\alpha)(1 + 1/n_\mathrm{eff})` quantile of the residuals under
    each query's weights (:math:`n_\mathrm{eff} = 1/\sum_i w_i^2`; negative weights count
    as 0); :math:`+\infty` where that level exceeds 1.

    Parameters
    ----------
    weights : ndarray of shape (b, n)
    tiles : TargetTiles
        The rows in increasing order of their residual.
    sorted_residuals : ndarray of shape (n,)
    alpha : float
    """
    weights = np.maximum(weights, 0.0)
    weights /= weights.sum(axis=1, keepdims=True)
    n_eff = 1.0 / np.einsum("ij,ij->i", weights, weights)
    level = (1.0 - alpha) * (1.0 + 1.0 / n_eff)
    reachable = level <= 1.0
    half = np.full(len(weights), np.inf)
    if np.any(reachable):
        dense = DenseWeights(weights[reachable], tiles)
        ranks = quantile_ranks(dense.masses, level[reachable, None], dense.fractions, tiles.tile)
        half[reachable] = sorted_residuals[ranks[:, 0]]
    return half


def with_total(weights, keys):
    """Columns of the reduction that return a tile's weights themselves and their sum."""
    return np.concatenate([weights, weights.sum(axis=1, keepdims=True)], axis=1)


def head_proportions(head_weights):
    r"""The heads' shares :math:`\pi_h = |a_h| / \sum_g |a_g|` of the mixture whose weights
    are the distribution (as for ``return_std``; equal shares when every :math:`a_h` is 0)."""
    a = np.abs(head_weights)
    total = a.sum()
    return a / total if total > 0 else np.full(len(a), 1.0 / len(a))


class MixedWeights:
    """The weights a fitted engine's conditional distribution is taken under: the heads'
    weights mixed in the shares :func:`head_proportions`.

    Parameters
    ----------
    kernel : SoftmaxHeads or approximate kernel
        The fitted kernel (``head_weights``, ``n_heads``, ``local`` if any).
    exact : object or None
        The kernel whose reduction serves the distribution (its ``sums`` take an order of
        keys and left-out pairs); ``None`` where the weights are approximate and are held
        in memory.
    head_weights : callable
        ``head_weights(X, h)``: head ``h``'s weights of a block of queries against the kept
        keys (a local fit's equivalent weights where the head has one).
    """

    def __init__(self, kernel, exact, head_weights):
        self.kernel = kernel
        self.exact = exact
        self.head_weights = head_weights
        self.proportions = head_proportions(kernel.head_weights)
        self.heads = np.flatnonzero(self.proportions > 0)
        local = getattr(kernel, "local", None)
        self.local = [None] * kernel.n_heads if local is None else list(local)
        # Kernel averages of an exact kernel: the reduction serves them, no weights in memory.
        self.by_reduction = exact is not None and all(self.local[h] is None for h in self.heads)

    def block_sizes(self, n_arrays):
        """The query block options of a pass: key tiles for the reduction, else
        ``n_arrays`` (queries × keys) arrays in memory."""
        if self.by_reduction:
            return {"key_tile": KEY_TILE}
        return {"n_arrays": n_arrays, "cache": False}

    def mixed(self, X):
        """The mixed weights of a block of queries (rows sum to 1)."""
        weights = None
        for h, p in enumerate(self.proportions):
            if p == 0:
                continue
            w = np.asarray(self.head_weights(X, h), dtype=np.float64)
            weights = p * w if weights is None else weights + p * w
        return weights

    def of_kernel(self, X, h):
        """Head ``h``'s kernel weights (the local constant's, whatever the head's local
        fit): what the leave-one-out estimates of conformal intervals are formed from."""
        if self.local[h] is None:
            return np.asarray(self.head_weights(X, h), dtype=np.float64)
        return self.kernel.weights(X, h)

    def on_tiles(self, X, tiles):
        r"""For each output's :class:`TargetTiles`, a block's weight on every tile of sorted
        targets (masses, (b, n_tiles)), ``fractions(rows, j)`` (the weights of those rows
        on the keys of tile ``j``) and the rows whose weights were rearranged.

        Kernel averages of an exact kernel come from the one reduction over the keys in
        target order (one pass for the masses, one tile for each fraction); other weights
        from the block's weights in memory (:class:`DenseWeights`, which rearranges signed
        rows).
        """
        if not self.by_reduction:
            weights = self.mixed(X)
            for tile in tiles:
                dense = DenseWeights(weights, tile)
                yield dense.masses, dense.fractions, dense.rearranged
            return
        for tile in tiles:
            yield *self._reduced_tiles(X, tile), np.zeros(len(X), dtype=bool)

    def _reduced_tiles(self, X, tile):
        n_tiles, kernel, heads = tile.n_tiles, self.exact, self.heads

        def tile_masses(weights, keys):
            # One key tile of the reduction is one tile of ranks: its weight goes to its
            # own column (and to the total, last).
            part = np.zeros((len(weights), n_tiles + 1))
            part[:, keys.start // tile.tile] = part[:, n_tiles] = weights.sum(axis=1)
            return part

        shares = []
        for h in heads:
            sums = kernel.sums(X, h, tile_masses, keys=tile.order).astype(np.float64)
            shares.append(self.proportions[h] * sums[:, :n_tiles] / sums[:, n_tiles:])

        def fractions(rows, j):
            mixed = 0.0
            for h, share in zip(heads, shares, strict=True):
                sums = kernel.sums(X[rows], h, with_total, keys=tile.keys(j))
                inside = sums[:, :-1] / np.where(sums[:, -1:] > 0, sums[:, -1:], 1.0)
                mixed = mixed + share[rows, j][:, None] * inside
            return mixed

        return np.sum(shares, axis=0), fractions

    def averages(self, X, columns):
        """A block's weighted averages of ``columns`` (one row per kept key, a column of
        ones last) and the rows whose weights are signed: through the kernel sums where
        the reduction serves the weights."""
        if self.by_reduction:
            averages = 0.0
            for h, share in enumerate(self.proportions):
                if share > 0:
                    sums = self.exact.sums(X, h, columns).astype(np.float64)
                    averages = averages + share * sums[:, :-1] / sums[:, -1:]
            return averages, np.zeros(len(X), dtype=bool)
        weights = self.mixed(X)
        return weights @ columns[:, :-1], np.any(weights < 0, axis=1)


def map_distribution(weights, X, target_order, compute, n_jobs):
    """``compute(rows, o, masses, fractions, tile)`` for every query block and output
    ``o`` (:meth:`MixedWeights.on_tiles`, the keys in the order ``target_order[:, o]``);
    the number of rows rearranged, summed."""
    tiles = [TargetTiles(order) for order in target_order.T]

    def run(rows):
        rearranged = np.zeros(rows.stop - rows.start, dtype=bool)
        for o, (masses, fractions, bad) in enumerate(weights.on_tiles(X[rows], tiles)):
            compute(rows, o, masses, fractions, tiles[o].tile)
            rearranged |= bad
        return int(rearranged.sum())

    # Without the reduction: the weights, their copy in target order and the rearranged
    # rows' work.
    sizes = weights.block_sizes(4)
    return sum(map_query_blocks(run, len(X), len(target_order), n_jobs=n_jobs, **sizes))


def rearrange_signed(cdf, signed):
    """Replace, in place, the CDF of the ``signed`` rows (axis 1 of ``cdf``, shape
    (n_outputs, b, n_thresholds)) by its monotone rearrangement along the thresholds,
    clipped to [0, 1]; the rows that needed it (a decrease or a value outside [0, 1])."""
    rearranged = np.zeros(len(signed), dtype=bool)
    if np.any(signed):
        part = cdf[:, signed]
        bad = np.any(np.diff(part, axis=2) < 0, axis=(0, 2)) | np.any(
            (part < 0) | (part > 1), axis=(0, 2)
        )
        rearranged[np.flatnonzero(signed)[bad]] = True
        cdf[:, signed] = np.clip(np.sort(part, axis=2), 0.0, 1.0)
    return rearranged


def smoothed_cdf(weights, X, targets, thresholds, bandwidths, n_jobs):
    """The CDF smoothed in y, (n_outputs, n_queries, n_thresholds), of the kept
    ``targets`` (n, n_outputs), and the number of signed rows rearranged (sorted along the
    thresholds) and clipped."""
    n_outputs, T = thresholds.shape
    columns = np.concatenate(
        [kernel_cdf_columns(targets[:, o], thresholds[o], bandwidths[o]) for o in range(n_outputs)]
        + [np.ones((len(targets), 1))],
        axis=1,
    )
    out = np.zeros((n_outputs, len(X), T))

    def run(rows):
        block, signed = weights.averages(X[rows], columns)
        block = block.reshape(len(block), n_outputs, T).transpose(1, 0, 2)
        out[:, rows] = block
        return int(rearrange_signed(out[:, rows], signed).sum())

    sizes = weights.block_sizes(3)
    counts = map_query_blocks(run, len(X), len(targets), n_jobs=n_jobs, **sizes)
    return out, sum(counts)


#: Thresholds of the grid on which the smoothed CDF is first inverted.
SMOOTHED_GRID = 64
#: Half-widths of the kernel beyond the extreme targets where the grid ends: the kernel
#: CDF there is within an ulp of 0 and 1.
SMOOTHED_MARGIN = 9.0


def smoothed_grid(targets, bandwidth, size=SMOOTHED_GRID):
    """The grid of thresholds inverting the CDF smoothed in y of one output: evenly spaced
    from the smallest target less ``SMOOTHED_MARGIN`` bandwidths to the largest plus as
    many."""
    margin = SMOOTHED_MARGIN * bandwidth
    return np.linspace(targets.min() - margin, targets.max() + margin, size)


def grid_brackets(cdf, grid, levels):
    r"""For each row of ``cdf`` (the CDF on the non-decreasing ``grid``, shape (b, G)) and
    level :math:`\tau`, the grid cell where :math:`\tilde F` reaches it: its ends
    ``low, high`` and the linear interpolation between them, each (b, n_levels) (the
    grid's ends where the level lies outside the CDF's range on the grid)."""
    G = len(grid)
    below = (cdf[:, None, :] < levels[None, :, None]).sum(axis=2)
    high_index = np.minimum(below, G - 1)
    low_index = np.maximum(below - 1, 0)
    low, high = grid[low_index], grid[high_index]
    f_low = np.take_along_axis(cdf, low_index, axis=1)
    f_high = np.take_along_axis(cdf, high_index, axis=1)
    rise = f_high - f_low
    share = np.divide(levels[None, :] - f_low, rise, out=np.zeros_like(rise), where=rise > 0)
    return low, high, low + np.clip(share, 0.0, 1.0) * (high - low)


class KernelCdfWindows:
    r"""The smoothed CDF :math:`\tilde F(t) = \sum_i w_i \Phi((t - y_i)/h)` of rows of
    weights (non-negative, summing to 1) on brackets ``[low, high]`` of thresholds, from the
    targets near the bracket only: in increasing order of the targets, those below
    ``low`` less ``SMOOTHED_MARGIN`` bandwidths count their whole weight (their kernel CDF
    is within an ulp of 1), those above ``high`` plus as many nothing, and the window
    between them its kernel CDF.

    Parameters
    ----------
    weights : ndarray of shape (b, n)
        In the order of ``sorted_targets``.
    cumulative : ndarray of shape (b, n)
        Their cumulative sums along the rows.
    sorted_targets : ndarray of shape (n,)
    bandwidth : float
    low, high : ndarray of shape (b,)
    """

    def __init__(self, weights, cumulative, sorted_targets, bandwidth, low, high):
        margin = SMOOTHED_MARGIN * bandwidth
        first = np.searchsorted(sorted_targets, low - margin, side="left")
        end = np.searchsorted(sorted_targets, high + margin, side="right")
        width = max(int(np.max(end - first, initial=0)), 1)
        index = first[:, None] + np.arange(width)
        inside = index < end[:, None]
        index = np.minimum(index, len(sorted_targets) - 1)
        rows = np.arange(len(weights))[:, None]
        self.weights = np.where(inside, weights[rows, index], 0.0)
        self.targets = sorted_targets[index]
        below = cumulative[rows[:, 0], np.maximum(first - 1, 0)]
        self.below = np.where(first > 0, below, 0.0)
        self.bandwidth = bandwidth

    def values(self, rows, t):
        r""":math:`\tilde F` and its density at thresholds ``t`` of ``rows``."""
        z = (t[:, None] - self.targets[rows]) / self.bandwidth
        w = self.weights[rows]
        cdf = self.below[rows] + np.einsum("ij,ij->i", w, ndtr(z))
        density = np.einsum("ij,ij->i", w, np.exp(-0.5 * z * z))
        return cdf, density / (self.bandwidth * math.sqrt(2 * np.pi))


def invert_kernel_cdf(windows, level, start, low, high, max_iter=60):
    r"""Per row of :class:`KernelCdfWindows`, the threshold :math:`t` with
    :math:`\tilde F(t) = \tau`: Newton's steps from ``start``, kept inside the bracket
    ``[low, high]`` (a bisection where a step leaves it), every row at once, until
    :math:`\tilde F` is within 1e-13 of the level, a Newton step is taken from within 1e-8
    of it, or the bracket is within 1e-13 of the thresholds' scale."""
    t, low, high = start.copy(), low.copy(), high.copy()
    tolerance = 1e-13 * (np.max(np.abs(high), initial=0.0) + windows.bandwidth)
    active = np.arange(len(t))
    for _ in range(max_iter):
        cdf, slope = windows.values(active, t[active])
        gap = cdf - level
        above = gap >= 0
        high[active[above]] = t[active[above]]
        low[active[~above]] = t[active[~above]]
        # A row within the tolerance keeps the threshold just evaluated.
        going = (np.abs(gap) > 1e-13) & (high[active] - low[active] > tolerance)
        active, gap, slope = active[going], gap[going], slope[going]
        if len(active) == 0:
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            step = t[active] - gap / slope
        inside = (step > low[active]) & (step < high[active])
        t[active] = np.where(inside, step, 0.5 * (low[active] + high[active]))
        # Newton's error squares: a step from within 1e-8 of the level lands within about
        # 1e-16 of it (times the CDF's curvature over its squared density), unchecked.
        active = active[~(inside & (np.abs(gap) <= 1e-8))]
        if len(active) == 0:
            break
    return t


def smoothed_quantiles(weights, X, targets, levels, bandwidths, n_jobs):
    r"""The quantiles of the CDF smoothed in y, :math:`\inf\{t : \tilde F(t \mid x) \ge
    \tau\}`, (n_outputs, n_queries, n_levels), of the kept ``targets`` (n, n_outputs), and
    the number of signed rows rearranged.

    Per block of queries, with its weights in memory: :math:`\tilde F` on a grid of
    thresholds (:func:`smoothed_grid`), the cell where each level is reached
    (:func:`grid_brackets`), then Newton's steps inside it (:func:`invert_kernel_cdf`), every
    query and level at once. Signed rows take the monotone rearrangement of their CDF on
    the grid, clipped (as :func:`smoothed_cdf`), inverted linearly inside the cell. Level
    0 gives :math:`-\infty` and level 1 :math:`+\infty` (the Gaussian kernel CDF reaches
    neither); non-decreasing along the levels (non-crossing).
    """
    n_outputs = targets.shape[1]
    grids = [smoothed_grid(targets[:, o], bandwidths[o]) for o in range(n_outputs)]
    columns = [
        kernel_cdf_columns(targets[:, o], grids[o], bandwidths[o]) for o in range(n_outputs)
    ]
    orders = [np.argsort(targets[:, o], kind="stable") for o in range(n_outputs)]
    sorted_targets = [targets[order, o] for o, order in enumerate(orders)]
    interior = (levels > 0) & (levels < 1)
    out = np.empty((n_outputs, len(X), len(levels)))
    out[..., levels == 0] = -np.inf
    out[..., levels == 1] = np.inf
    inner = levels[interior]

    def run(rows):
        w = weights.mixed(X[rows])
        cdf = np.stack([w @ c for c in columns])
        signed = np.any(w < 0, axis=1)
        rearranged = rearrange_signed(cdf, signed)
        # One rounding of the products could step back an ulp.
        np.maximum.accumulate(cdf, axis=2, out=cdf)
        for o in range(n_outputs):
            low, high, start = grid_brackets(cdf[o], grids[o], inner)
            ordered = w[~signed][:, orders[o]]
            cumulative = np.cumsum(ordered, axis=1)
            for k, tau in enumerate(inner):
                bracket = [a[~signed, k] for a in (start, low, high)]
                windows = KernelCdfWindows(
                    ordered, cumulative, sorted_targets[o], bandwidths[o], *bracket[1:]
                )
                start[~signed, k] = invert_kernel_cdf(windows, tau, *bracket)
            out[o, rows][:, interior] = start
        return int(rearranged.sum())

    # The weights, their copy in target order and its cumulative sums, the windows (their
    # weights, targets, standardized distances and kernel CDF) and the rearranged rows.
    counts = map_query_blocks(run, len(X), len(targets), n_jobs=n_jobs, n_arrays=8, cache=False)
    order = np.argsort(levels, kind="stable")
    out[..., order] = np.maximum.accumulate(out[..., order], axis=2)
    return out, sum(counts)


def cross_validated_y_bandwidth(weights, inputs, targets, max_rows):
    """Per output, the bandwidth in y of the smoothed CDF with the lowest leave-one-out
    CRPS: at most ``max_rows`` of the kept rows (``inputs``, ``targets``), evenly spread,
    each with its own row and exact duplicates removed from its weights."""
    n = len(inputs)
    n_rows = min(max_rows, query_block_size(n, n, n_arrays=3, cache=False))
    rows = np.unique(np.linspace(0, n - 1, n_rows).round().astype(int))
    ids = DuplicateGroups(inputs).ids
    mixed = weights.mixed(inputs[rows])
    mixed[ids[rows][:, None] == ids[None, :]] = 0.0
    total = mixed.sum(axis=1)
    # A row with no other input has no leave-one-out CDF.
    kept = total > 0
    mixed = mixed[kept] / total[kept, None]
    rows = rows[kept]
    chosen = []
    for o in range(targets.shape[1]):
        y = targets[:, o]
        grid = np.unique(np.quantile(y, np.linspace(0.01, 0.99, 50)))
        spacing = np.gradient(grid) if len(grid) > 1 else np.ones(1)
        observed = y[rows][:, None] <= grid[None, :]
        criteria = [
            np.mean(((mixed @ kernel_cdf_columns(y, grid, h) - observed) ** 2) @ spacing)
            for h in y_bandwidth_candidates(y)
        ]
        chosen.append(y_bandwidth_candidates(y)[int(np.argmin(criteria))])
    return np.array(chosen)


def leave_one_out_residuals(weights, inputs, values, columns, value_scale):
    r"""Per kept row, :math:`y_i - \hat\mu_{-i}(x_i)` (centered target units, (n,
    n_outputs)): the kernel average without the row and its exact duplicates, through the
    reduction with those pairs left out (``columns``: the value columns ``[v, v², 1]`` in
    units of ``value_scale``), or, for approximate weights, with their weight removed from
    the row's weights; :math:`\pm\infty` for a row with no other input."""
    groups = DuplicateGroups(inputs)
    exact, kernel = weights.exact, weights.kernel
    a, b = kernel.head_weights, kernel.head_bias
    n, t = values.shape
    estimate = np.zeros((n, t)) + b
    alone = np.zeros(n, dtype=bool)
    for block in iter_query_blocks(n, n if exact is None else min(n, KEY_TILE), n_arrays=3):
        left_out = groups.pairs_of(np.arange(n)[block])
        for h in range(kernel.n_heads):
            if exact is not None:
                sums = exact.sums(inputs[block], h, columns, left_out=left_out)
                sums = sums.astype(np.float64)
                total = sums[:, -1]
                with np.errstate(invalid="ignore", divide="ignore"):
                    mean = sums[:, :t] / total[:, None] * value_scale
            else:
                total, mean = _without_own(weights.of_kernel(inputs[block], h), values, left_out)
            alone[block] |= ~(total > 0)
            estimate[block] += a[h] * mean
    residuals = values - estimate
    residuals[alone] = np.inf
    return residuals


def _without_own(weights, values, left_out):
    """The total weight and weighted mean of ``values`` of a block's weights (rows summing
    to 1) with the ``left_out`` pairs' weight removed."""
    own = np.zeros(len(weights))
    np.add.at(own, left_out[0], weights[left_out])
    own_values = np.zeros((len(weights), values.shape[1]))
    np.add.at(own_values, left_out[0], weights[left_out][:, None] * values[left_out[1]])
    total = 1.0 - own
    with np.errstate(invalid="ignore", divide="ignore"):
        return total, (weights @ values - own_values) / total[:, None]


def leave_one_out_at(weights, X, values, ids):
    r""":math:`\hat\mu_{-i}(x)` at a block of queries for every kept row :math:`i`
    (centered target units, shape (n_outputs, b, n)), from the heads' kernel weights:
    :math:`(\hat\mu(x) - \sum_{j \in G_i} w_j y_j) / (1 - \sum_{j \in G_i} w_j)`
    with :math:`G_i` the row's group of exact duplicates (``ids``); :math:`+\infty` where
    the group holds (nearly) all of the weight, which leaves nothing to estimate from."""
    from scipy import sparse

    n, t = values.shape
    n_groups = int(ids.max()) + 1
    # Each row's group: its own column of a sparse indicator (none without duplicates).
    members = None
    if n_groups < n:
        members = sparse.csr_matrix((np.ones(n), (np.arange(n), ids)), shape=(n, n_groups))
    kernel = weights.kernel
    a, b = kernel.head_weights, kernel.head_bias
    result = np.zeros((t, len(X), n)) + b[:, None, None]
    unknown = np.zeros((len(X), n), dtype=bool)
    for h in range(kernel.n_heads):
        w = weights.of_kernel(X, h)
        own = w if members is None else np.asarray(w @ members)[:, ids]
        rest = 1.0 - own
        # Rounding leaves 1 − w with few digits where the group holds nearly all the
        # weight: those estimates are unknown (the interval is then unbounded).
        unknown |= ~(rest > 1e-9)
        for o in range(t):
            mean = w @ values[:, o]
            own_values = w * values[:, o]
            if members is not None:
                own_values = np.asarray(own_values @ members)[:, ids]
            with np.errstate(invalid="ignore", divide="ignore"):
                result[o] += a[h] * (mean[:, None] - own_values) / rest
    result[:, unknown] = np.inf
    return result


def kernel_estimate(weights, X, values):
    """The kernel average's estimate (the local constant of every head, mixed; centered
    target units, (b, n_outputs)) and the block's mixed kernel weights."""
    kernel = weights.kernel
    a, b = kernel.head_weights, kernel.head_bias
    estimate = np.zeros((len(X), len(b))) + b
    mixed = None
    for h in range(kernel.n_heads):
        w = weights.of_kernel(X, h)
        estimate += a[h] * (w @ values)
        p = weights.proportions[h]
        mixed = p * w if mixed is None else mixed + p * w
    return estimate, mixed


def residual_ranks(residuals, inputs):
    """What a conformal interval needs of the kept rows' leave-one-out ``residuals``: their
    absolute values, order per output and sorted values, and the rows' groups of exact
    duplicates of ``inputs`` (computed once per fit)."""
    return rank_residuals(residuals, DuplicateGroups(inputs).ids)


def rank_residuals(residuals, ids):
    """:func:`residual_ranks` with the groups of exact duplicates given (``ids``, a group
    number per kept row)."""
    residuals = np.abs(residuals)
    order = np.argsort(residuals, axis=0, kind="stable")
    return residuals, order, np.take_along_axis(residuals, order, axis=0), ids


def conformal_bounds(
    weights, X, method, alpha, ranked, sample_weight, values, n_jobs, confidence=None
):
    """The conformal intervals of queries (centered target units, (n_queries, n_outputs)
    each), ``"jackknife+"`` (with the ranks of :func:`conformal_level` at ``confidence``)
    or ``"local"``, from the kept rows' leave-one-out residuals ranked by
    :func:`residual_ranks`."""
    n, t = values.shape
    residuals, order, sorted_residuals, ids = ranked
    tiles = [TargetTiles(column) for column in order.T]
    lower = np.empty((len(X), t))
    upper = np.empty((len(X), t))

    def compute(rows):
        if method == "jackknife+":
            loo = leave_one_out_at(weights, X[rows], values, ids)
            for o in range(t):
                low, high = jackknife_plus(
                    loo[o], residuals[:, o], alpha, sample_weight, confidence
                )
                lower[rows, o], upper[rows, o] = low, high
        else:
            # The kernel weights carry the sample weights: a row of weight 2 counts twice
            # among the residuals.
            estimate, mixed = kernel_estimate(weights, X[rows], values)
            for o in range(t):
                half = local_residual_quantiles(mixed, tiles[o], sorted_residuals[:, o], alpha)
                lower[rows, o] = estimate[:, o] - half
                upper[rows, o] = estimate[:, o] + half

    # jackknife+: the weights, the groups' shares, the leave-one-out estimates per output
    # and the two sets of values a selection copies; local: the weights twice.
    n_arrays = 8 + 3 * t if method == "jackknife+" else 4
    map_query_blocks(compute, len(X), n, n_jobs=n_jobs, n_arrays=n_arrays, cache=False)
    return lower, upper


class SplitCalibration:
    r"""The held-out absolute residuals of split conformal intervals (inductive conformal
    prediction: Papadopoulos et al. 2002, Lei et al. 2018; MAPIE's ``cv="prefit"``).

    :math:`R_i = |y_i - \hat\mu(x_i)|` of calibration rows the fit never saw, per output.
    The half-width at level :math:`1 - \alpha` is :math:`\hat q^+_\alpha` of
    :func:`upper_rank_quantile`: the :math:`\lceil (1-\alpha)(n+1) \rceil`-th smallest
    residual (:math:`+\infty` when that exceeds :math:`n`). For exchangeable calibration and
    test rows, :math:`P\{|y - \hat\mu(x)| \le \hat q\} \ge 1 - \alpha` exactly in
    finite samples (Lei et al. 2018, theorem 2.2), and below :math:`1 - \alpha + 1/(n+1)`
    when the residuals have no ties.

    With sample weights :math:`s_i`, the weighted conformal quantile of Tibshirani, Barber,
    Candès and Ramdas (2019): the smallest :math:`v` with :math:`\sum_{R_i \le v} s_i \ge
    (1-\alpha)(\sum_i s_i + s_{n+1})`, the new observation weighing the mean weight
    :math:`s_{n+1} = \bar s` (as jackknife+ and CV+ count weights here). With weights
    proportional to the likelihood ratio of the test to the calibration distribution of
    :math:`x` it keeps :math:`1 - \alpha` under that covariate shift (their corollary 1,
    with the test point's own ratio in place of :math:`\bar s`).

    Parameters
    ----------
    residuals : ndarray of shape (n, n_outputs)
        The absolute residuals, every row of positive weight.
    sample_weight : ndarray of shape (n,) or None
        ``None``: every row counts once.
    """

    def __init__(self, residuals, sample_weight=None):
        self.residuals = residuals
        self.sample_weight = sample_weight

    @property
    def n_rows(self):
        return len(self.residuals)

    def half_width(self, alpha, confidence=None):
        r""":math:`\hat q` per output, shape (n_outputs,); with ``confidence``, at the rank
        of :func:`conformal_level`."""
        return upper_rank_quantile(self.residuals.T, alpha, self.sample_weight, confidence)
