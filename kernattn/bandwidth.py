r"""Bandwidth selection for the kernel smoother: normal-reference rules and leave-one-out.

The bandwidth sets how far a query looks: with the Gaussian kernel, :math:`h_j` is the
kernel's standard deviation along feature :math:`j`. The rules of thumb read it off each
feature's spread; leave-one-out picks, per feature, the bandwidths whose smoother best
predicts every training target from the other training points.
"""

import numbers
import time
import warnings
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize
from sklearn.utils import check_random_state

from kernattn._blocks import (
    KEY_TILE,
    iter_query_blocks,
    map_query_blocks,
    n_workers,
    single_threaded_blas,
)
from kernattn._local_linear import (
    key_columns,
    n_line_parameters,
    solve_covariance,
    sparse_neighborhoods,
    unpack_second,
    value_key_columns,
)
from kernattn._loo import DuplicateGroups
from kernattn._numerics import (
    EXP_FLOOR,
    has_spread,
    normalized_weights,
    power_of_two_scale,
    shifted_exp,
)
from kernattn._sums import kernel_sums
from kernattn.kernels import log_kernel, log_kernel_derivative

__all__ = [
    "BANDWIDTH_RULES",
    "CRITERIA",
    "BandwidthSelection",
    "BandwidthWarning",
    "loo_bandwidth",
    "resolve_bandwidth",
    "rule_of_thumb_bandwidth",
    "select_bandwidth",
]

BANDWIDTH_RULES = ("scott", "silverman", "loo")
# Common factors of the rule-of-thumb bandwidth tried before the per-feature refinement.
_LOO_GRID = np.geomspace(1e-2, 1e1, 16)
# The per-feature refinement keeps log-bandwidths within this factor of the rule of thumb.
_LOO_RANGE = 1e3
# Entries per (queries × keys) array of a block of the leave-one-out objective.
_BLOCK_ENTRIES = 2**18
# Unshifted kernel sums of a row below this are redone with the row's maximum logit
# subtracted: above it, the floor of the logits (EXP_FLOOR) is far below every digit.
_UNSHIFTED_SUM = 1e-250
# The sums go unshifted only while ½‖k‖²/c² stays below this: the rounding of the logits'
# expansion (about 1e-16 of it) then moves no logit by more than 1e-6.
_ROUNDING_SAFE = 1e10


def _weighted_quantile(x, weights, q):
    """Inverted-CDF quantile: integer weights give the quantile of the repeated sample."""
    order = np.argsort(x)
    cumulative = np.cumsum(weights[order])
    index = np.searchsorted(cumulative, q * cumulative[-1], side="left")
    return x[order][min(index, len(x) - 1)]


def rule_of_thumb_bandwidth(X, sample_weight=None, rule="scott"):
    r"""Normal-reference bandwidths, one per feature.

    Scott: :math:`h_j = \sigma_j\, n^{-1/(d+4)}`. Silverman:
    :math:`h_j = (4/(d+2))^{1/(d+4)}\, n^{-1/(d+4)} \min(\sigma_j, \mathrm{IQR}_j/1.349)`.
    With sample weights, :math:`n` is their sum and :math:`\sigma_j`, the IQR are weighted,
    so integer weights act as repeated rows. A constant feature gets bandwidth 1: it
    shifts every key's logit by the same amount, so any bandwidth gives the same weights.

    Examples
    --------
    >>> X = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    >>> rule_of_thumb_bandwidth(X).round(3)
    array([0.887, 1.   ])
    """
    X = np.asarray(X, dtype=float)
    n, d = X.shape
    weights = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    # The sum of the weights in logs: n weights near 1e308 overflow it, not its root.
    unit = power_of_two_scale(weights)
    weights = weights / unit
    with np.errstate(over="ignore"):
        total = weights.sum() * unit
    if np.isfinite(total):
        factor = total ** (-1.0 / (d + 4))
    else:
        factor = np.exp(-(np.log(weights.sum()) + np.log(unit)) / (d + 4))
    _, sigma = weighted_spread(X, weights)
    if rule == "scott":
        h = sigma * factor
    elif rule == "silverman":
        iqr = np.array([_weighted_iqr(X[:, j], weights) for j in range(d)])
        spread = np.where(iqr > 0, np.minimum(sigma, iqr / 1.349), sigma)
        h = (4.0 / (d + 2)) ** (1.0 / (d + 4)) * factor * spread
    else:
        raise ValueError(f"rule must be 'scott' or 'silverman'; got {rule!r}")
    # Relative to the feature's magnitude: a "constant" feature that differs only by rounding.
    scale = np.max(np.abs(X), axis=0) if n else np.ones(d)
    return np.where(has_spread(sigma, scale), h, 1.0)


def _weighted_iqr(x, weights):
    """Weighted interquartile range, its difference taken in units of ``max|x|`` (exact
    powers of two): quartiles near ±1e308 would overflow it."""
    unit = power_of_two_scale(x)
    x = x / unit
    return (_weighted_quantile(x, weights, 0.75) - _weighted_quantile(x, weights, 0.25)) * unit


def weighted_spread(X, weights):
    r"""Weighted mean and standard deviation of every column, at any scale.

    :math:`\sigma = m\, \mathrm{std}(x/m)` with :math:`m` a power of two near
    :math:`\max|x - \bar x|`: the squares of inputs near 1e200 overflow and those of
    inputs near 1e-200 underflow, their scaled versions do neither; for ordinary data the
    scaling is exact and changes nothing.
    """
    weights = normalized_weights(weights)
    total = weights.sum()
    unit = power_of_two_scale(X, axis=0)
    mean = weights @ (X / unit) / total * unit
    deviation = X - mean
    unit = power_of_two_scale(deviation, axis=0)
    deviation /= unit
    sigma = np.sqrt(np.maximum(weights @ deviation**2 / total, 0.0)) * unit
    return mean, sigma


class BandwidthWarning(UserWarning):
    """A selected bandwidth ended on the lower edge of its search range, or a local-linear
    neighborhood was too small for a line.

    Issued once per fit (and once per prediction for the neighborhoods); it names the edge
    and the features, and can be filtered on its own::

        warnings.filterwarnings("ignore", category=kernattn.BandwidthWarning)
    """


#: The selection criteria: name → what the search minimizes.
CRITERIA = ("loo", "aic", "gcv")


def constant_gradient_terms(Q, sums, residual, ybar):
    r"""The per-query terms of the local-constant gradient from the column sums.

    With u = q − k, kernel values E and Γ = −2f'(r²), ``sums`` holds per query
    :math:`\sum_j E Γ [1, y_j, k_j, k_j^2, y_j k_j, y_j k_j^2]` (outputs major in the last
    two). :math:`\sum_j E Γ u_f^2` and :math:`\sum_j E Γ y_{jo} u_f^2` expand in
    :math:`q_f^2`, :math:`-2 q_f` and these sums. Returns ``inner`` (b, d),
    :math:`\sum_j E Γ (r \cdot y_j - r \cdot \bar y) u_f^2` for the residuals ``r``, and
    ``plain_u2`` (b, d), :math:`\sum_j E Γ u_f^2`.
    """
    b, d = Q.shape
    t = residual.shape[1]
    base = 1 + t
    start = base + 2 * d
    Q2 = Q**2
    plain_u2 = Q2 * sums[:, :1] - 2.0 * Q * sums[:, base : base + d] + sums[:, base + d : start]
    valued_u2 = (
        Q2[:, None, :] * sums[:, 1 : 1 + t, None]
        - 2.0 * Q[:, None, :] * sums[:, start : start + t * d].reshape(b, t, d)
        + sums[:, start + t * d : start + 2 * t * d].reshape(b, t, d)
    )
    inner = np.einsum("bt,btf->bf", residual, valued_u2)
    inner -= np.einsum("bt,bt->b", residual, ybar)[:, None] * plain_u2
    return inner, plain_u2


class _Criterion:
    r"""A bandwidth-selection criterion of the smoother as a function of the log-bandwidths.

    ``"loo"``: the leave-one-out squared error :math:`\sum_i s_i \|y_i - \hat y_{-i}\|^2 /
    \sum_i s_i`, where :math:`\hat y_{-i}` is the estimate (local constant or local linear)
    at :math:`x_i` from the training set without row :math:`i` and every exact duplicate of
    it. For a linear smoother this is :math:`(y_i - \hat y_i)/(1 - S_{ii})` with
    :math:`S` the smoother matrix at the training points (exactly so for the local-linear
    fit without its ridge); computing the fit without the row is the same and does not
    cancel as :math:`S_{ii} \to 1`.

    ``"gcv"``: :math:`\hat\sigma^2 / (1 - \mathrm{tr}(S)/n)^2` (that is
    :math:`n\,\mathrm{RSS}/(n - \mathrm{tr}\,S)^2`), and ``"aic"``: the corrected AIC of
    Hurvich, Simonoff and Tsai (1998),
    :math:`\log\hat\sigma^2 + (1 + \mathrm{tr}(S)/n)/(1 - (\mathrm{tr}(S) + 2)/n)`, with
    :math:`\hat\sigma^2 = \sum_i s_i \|y_i - \hat y_i\|^2 / n` the in-sample error and
    :math:`n = \sum_i s_i` (integer weights count as repeated rows).

    The gradients with respect to :math:`\theta_f = \log h_f` are analytic. With
    :math:`\gamma_{ijf} = \partial \log\kappa_{ij}/\partial\theta_f = -2 f'(r_{ij}^2)
    u_{ijf}^2` (:math:`u^2_{ijf}` for the Gaussian kernel), the local fit's
    :math:`\partial\hat y_i/\partial\theta_f = \sum_j l_{ij}\,\gamma_{ijf}\, e_{ij}`, where
    :math:`l_{ij}` are the equivalent weights and :math:`e_{ij} = y_j - \hat m_i(x_j)` the
    residual of key :math:`j` from query :math:`i`'s local fit (for the local-constant fit,
    :math:`y_j - \hat y_i`); and :math:`\partial S_{ii}/\partial\theta_f = -w_{ii}
    \sum_j w_{ij} a_{ij}^2 \gamma_{ijf}` with :math:`l_{ij} = w_{ij} a_{ij}`.

    The targets are centered and divided by their total standard deviation, so the search
    sees the same function for ``Y`` and ``c·Y`` (up to rounding): the selected bandwidth
    does not depend on the units of the targets; the inputs are centered and the search
    runs in log-bandwidths, so it does not depend on the units of the inputs either. The
    ``scaled_`` methods give the criterion in those units; :meth:`in_target_units` converts.

    The local line can live in a subset of the columns (``line``): with discrete features
    (encoded columns, :mod:`kernattn._mixed`) it is fitted in the continuous features only,
    and the discrete ones enter through the kernel weights (Li and Racine, 2004). The
    gradient formula holds as it is: the local fit depends on the bandwidths only through
    its weights.

    Every evaluation can be restricted to a subset of the queries (``rows``): each query
    is still compared with every key, and the sums over the subset are scaled to the whole
    training set, so the criterion's ingredients (the squared error, the trace) and their
    gradients are unbiased estimates.
    """

    def __init__(
        self,
        X,
        Y,
        sample_weight,
        kernel,
        degree=0,
        criterion="loo",
        n_jobs=None,
        leave_out_duplicates=True,
        line=None,
    ):
        self.n_jobs = n_jobs
        self.kernel = kernel
        self.degree = degree
        self.criterion = criterion
        self.loo = criterion == "loo"
        raw = np.asarray(sample_weight, dtype=float)
        sample_weight = normalized_weights(raw)
        with np.errstate(over="ignore"):
            self.n_total = float(raw.sum())
        unit = power_of_two_scale(X, axis=0)
        self.X = X - np.average(X / unit, axis=0, weights=sample_weight) * unit
        # Centered, and divided by a power of two near the total standard deviation of the
        # targets (the root of the summed variances of the outputs): the loss of predicting
        # the mean is between 1 and 4 whatever the units, so the optimizer's absolute
        # tolerances mean the same for y and c·y. A power of two is exact: weighted and
        # repeated rows, whose spreads differ in their last bits, see the same targets.
        _, sigma = weighted_spread(Y, sample_weight)
        top = float(sigma.max(initial=0.0))
        total = top * float(np.sqrt(np.sum((sigma / top) ** 2))) if top > 0 else 1.0
        self.y_scale = float(power_of_two_scale(total))
        unit = power_of_two_scale(Y, axis=0)
        Y = Y - np.average(Y / unit, axis=0, weights=sample_weight) * unit
        self.Y = Y / self.y_scale
        self.sw = sample_weight
        log_sw = np.log(sample_weight / sample_weight.max())
        self.log_sw = log_sw if np.any(log_sw != 0) else None
        self.total = sample_weight.sum()
        self.n = len(X)
        # The (query, key) pairs to leave out: each row with every row of identical input.
        # Without leave_out_duplicates only the row itself (rows that share a category are
        # neighbours there, not copies).
        self.groups = DuplicateGroups(X if leave_out_duplicates else np.arange(len(X))[:, None])
        self.n_groups = self.groups.n_groups
        self.group_ids = self.groups.ids if self.n_groups < self.n else None
        if self.group_ids is not None:
            sizes = np.bincount(self.group_ids)
            self._has_copies = sizes[self.group_ids] > 1
            order = np.argsort(self.group_ids, kind="stable")
            bounds = np.searchsorted(self.group_ids[order], np.arange(self.n_groups + 1))
            self._members = [order[bounds[g] : bounds[g + 1]] for g in range(self.n_groups)]
        # The columns of the local line (all of them, or the continuous features' with
        # discrete ones, whose levels enter through the kernel only).
        self.line = np.arange(X.shape[1]) if line is None else np.asarray(line, dtype=int)
        self.n_params = n_line_parameters(X[:, self.line])
        # The local-constant Gaussian criterion needs only sums over the keys: it goes
        # through the keys in tiles (see _tiled_sums); the others need whole rows.
        self.tiled = degree == 0 and kernel == "gaussian"

    # ------------------------------------------------------------------ units

    def in_target_units(self, value):
        """A criterion value of the search in the targets' units (``inf`` only where the
        true value overflows)."""
        if self.criterion == "aic":
            return value + 2.0 * np.log(self.y_scale)
        with np.errstate(over="ignore", under="ignore"):
            return value * self.y_scale * self.y_scale

    def loss_and_grad(self, log_bandwidth, rows=None):
        """The criterion and its gradient at ``exp(log_bandwidth)``, in the targets'
        units."""
        value, grad = self.scaled_loss_and_grad(log_bandwidth, rows)
        if self.criterion == "aic":
            return self.in_target_units(value), grad
        return self.in_target_units(value), self.in_target_units(grad)

    def grid_losses(self, bandwidth, factors, rows=None):
        """The criterion at ``bandwidth * c`` for every common factor ``c`` (targets'
        units)."""
        return self.in_target_units(self.scaled_grid_losses(bandwidth, factors, rows))

    # ------------------------------------------------------------- the blocks

    def _columns(self, K, gradient=True):
        """What the kernel weights are summed against, transposed (columns × keys):
        ``[1, y]``, then for the local line ``[k, k kᵀ, y kᵀ]``; for the local-constant
        gradient ``[k, k², y k, y k²]`` (the gradient's sums, from the same product)."""
        columns = [np.ones((len(K), 1)), self.Y]
        if self.degree == 1:
            line = K[:, self.line]
            columns += [key_columns(line), value_key_columns(self.Y, line)]
        elif gradient:
            columns += [K, K**2, value_key_columns(self.Y, K), value_key_columns(self.Y, K**2)]
        return np.ascontiguousarray(np.hstack(columns).T)

    def _map_blocks(self, function, rows, tiled=None):
        """``function(rows)`` over query blocks (global row indices: a slice when ``rows``
        is ``None``), on threads; the results in block order. ``tiled``: blocks sized for
        tiles of keys (default: as the criterion's sums go), else for whole rows."""
        n_queries = self.n if rows is None else len(rows)
        tiled = self.tiled if tiled is None else tiled

        def run(block):
            return function(block if rows is None else rows[block])

        if tiled:
            options = dict(key_tile=KEY_TILE, n_arrays=2)
            width = min(self.n, KEY_TILE)
        else:
            options = dict(n_arrays=6, cache=_BLOCK_ENTRIES)
            width = self.n
        if n_workers(n_queries, self.n, self.n_jobs) == 1:
            # One thread (the search already holds BLAS to one): the blocks in a loop,
            # without entering the thread limits again for every evaluation.
            blocks = iter_query_blocks(
                n_queries, width, **{k: v for k, v in options.items() if k != "key_tile"}
            )
            return [run(block) for block in blocks]
        return map_query_blocks(run, n_queries, self.n, n_jobs=self.n_jobs, **options)

    def _distances(self, K, K_aug, rows):
        """Scaled squared distances of a block (rows × all keys), with the row minimum
        subtracted for the Gaussian kernel (its exact shift); +inf on the left-out pairs
        for ``"loo"``.

        One product: [q, ‖q‖², 1] · [−2k, 1, ‖k‖²]. Not clipped at 0: a rounding error of
        −1e-16 only shifts a logit by as much.
        """
        Q = K[rows]
        Q_aug = np.hstack([Q, np.einsum("ij,ij->i", Q, Q)[:, None], np.ones((len(Q), 1))])
        r2 = Q_aug @ K_aug
        if self.loo:
            r2 = self._leave_out(r2, rows)
        if self.kernel == "gaussian":
            r2 -= r2.min(axis=1, keepdims=True)
        else:
            np.maximum(r2, 0.0, out=r2)
        return r2

    def _largest_r2(self, r2):
        """The largest finite entry of a block of distances (+inf marks left-out pairs)."""
        top = r2.max(axis=1)
        if np.all(np.isfinite(top)):
            return float(top.max(initial=0.0))
        return float(np.where(np.isfinite(r2), r2, 0.0).max(initial=0.0))

    def _logit_source(self, K, K_aug, rows, factor):
        """The Gaussian logits −½‖q − k‖²/c² + log s of the block ``rows``, a tile of keys
        at a time, from one product with d + 2 inner terms: the block's key indices, the
        logits of a tile (a callable for :func:`~kernattn._sums.kernel_sums`) and the
        left-out pairs (``None`` outside leave-one-out)."""
        Q = K[rows]
        b = len(Q)
        half = 0.5 / factor**2
        # [q, ‖q‖², 1]·(−half) · [−2k, 1, ‖k‖²] + log s.
        Q_aug = -half * np.hstack([Q, np.einsum("ij,ij->i", Q, Q)[:, None], np.ones((b, 1))])
        index = np.arange(self.n)[rows]
        left_out = self._left_out_pairs(index) if self.loo else None

        def logits(keys, out):
            block = np.matmul(Q_aug, K_aug[:, keys], out=out)
            if self.log_sw is not None:
                block += self.log_sw[keys]
            return block

        return index, logits, left_out

    def _tiled_sums(self, K, K_aug, columns, rows, factor, shifted=False):
        """Gaussian kernel sums of a block by the one reduction
        (:func:`~kernattn._sums.kernel_sums`), tiles of keys that stay in cache.

        The logits (:meth:`_logit_source`) are at most 0 (up to the rounding of the
        product), so they are first used as they are: two passes over each tile fewer than
        shifting them. The rows whose sums come out below ``_UNSHIFTED_SUM`` (the nearest
        kept key far away) are redone ``shifted`` by the running row maximum (the nearest
        kept key so far), as in the engine's exact path, so that no row underflows; so is
        every row when the rounding of the product could make a logit large. Returns the
        sums and each row's own kernel value on the same shift (its logit is log s_i), for
        the trace.
        """
        unshifted = not shifted and 0.5 * (self._key_radius(K) / factor) ** 2 < _ROUNDING_SAFE
        index, logits, left_out = self._logit_source(K, K_aug, rows, factor)

        def column_sums(weights, keys):
            return weights @ columns[:, keys].T

        top, sums = kernel_sums(
            logits, self.n, column_sums, shift=not unshifted, left_out=left_out
        )
        E_self = None
        if not self.loo:
            log_self = np.zeros(len(index)) if self.log_sw is None else self.log_sw[index]
            E_self = np.exp(np.maximum(log_self - top, EXP_FLOOR))
        if not unshifted:
            return sums, E_self
        redo = np.flatnonzero(~((sums[:, 0] >= _UNSHIFTED_SUM) & (sums[:, 0] < np.inf)))
        if len(redo):
            sums[redo], again = self._tiled_sums(
                K, K_aug, columns, index[redo], factor, shifted=True
            )
            if E_self is not None:
                E_self[redo] = again
        return sums, E_self

    def _key_radius(self, K):
        return float(np.sqrt(np.einsum("ij,ij->i", K, K).max(initial=0.0)))

    def _left_out_pairs(self, index):
        """(block row, key) pairs a leave-one-out block leaves out: each row with itself
        and every copy of its input."""
        block_rows = [np.arange(len(index))]
        keys = [index]
        if self.group_ids is not None:
            for i in np.flatnonzero(self._has_copies[index]):
                members = self._members[self.group_ids[index[i]]]
                block_rows.append(np.full(len(members), i))
                keys.append(members)
        return np.concatenate(block_rows), np.concatenate(keys)

    def _leave_out(self, r2, rows):
        """+inf where query ``rows[i]`` and a key share an input (itself, its copies)."""
        if isinstance(rows, slice):
            return self.groups.leave_out(r2, rows, value=np.inf)
        r2[np.arange(len(rows)), rows] = np.inf
        if self.group_ids is not None:
            # Only the rows with copies need a look at their group (most have none).
            for i in np.flatnonzero(self._has_copies[rows]):
                r2[i, self._members[self.group_ids[rows[i]]]] = np.inf
        return r2

    @staticmethod
    def _augment(K):
        return np.vstack([-2.0 * K.T, np.ones(len(K)), np.einsum("ij,ij->i", K, K)])

    def _kernel(self, r2, factor=1.0):
        """Kernel weights (times the sample weights) of a block, each row scaled by a
        constant (it cancels), and the rows that no key reaches (compact kernels), which
        get their nearest keys, as in prediction."""
        if self.kernel == "gaussian":
            logits = np.multiply(r2, -0.5 / factor**2)
            if self.log_sw is None:
                # The row minimum is subtracted: logits ≤ 0 with a 0 in every row. Floor
                # them (numpy's exp is slow where it underflows) only if some can be low.
                if 0.5 * self._largest_r2(r2) / factor**2 > -EXP_FLOOR:
                    np.maximum(logits, EXP_FLOOR, out=logits)
                return np.exp(logits, out=logits), np.zeros(len(r2), dtype=bool)
        else:
            logits = log_kernel(r2 / factor**2, self.kernel)
        if self.log_sw is not None:
            logits += self.log_sw
        with np.errstate(invalid="ignore"):
            E = shifted_exp(logits)
        empty = ~(E.sum(axis=1) > 0)
        if np.any(empty):
            nearest = r2[empty] == r2[empty].min(axis=1, keepdims=True)
            E[empty] = nearest * (self.sw / self.sw.max())
        return E, empty

    def _block(
        self,
        K,
        K_aug,
        columns,
        rows,
        factor=1.0,
        gradient=True,
        r2=None,
        powers=None,
        weights=None,
    ):
        """Per block: Σ s_i‖r_i‖², Σ_i S_ii (not for ``"loo"``), and their gradients
        (``r2``: the block's distances, when they are shared by several factors;
        ``powers``: ``[1, k, k²]`` of the keys; ``weights``: the Gaussian kernel of ``r2``
        at ``factor``, when it is known)."""
        d = K.shape[1]
        t = self.Y.shape[1]
        if self.tiled and r2 is None:
            sums, E_self = self._tiled_sums(K, K_aug, columns, rows, factor)
            E, empty = None, np.zeros(len(sums), dtype=bool)
        else:
            if r2 is None:
                r2 = self._distances(K, K_aug, rows)
            if weights is None:
                E, empty = self._kernel(r2, factor)
            else:
                E, empty = weights, np.zeros(len(r2), dtype=bool)
            # (Cᵀ Eᵀ)ᵀ: BLAS is faster with the long dimension inside.
            sums = np.dot(columns, E.T).T
            E_self = None if self.loo else E[np.arange(len(E)), np.arange(self.n)[rows]]
        b = len(sums)
        S0 = sums[:, 0]
        ybar = sums[:, 1 : 1 + t] / S0[:, None]
        Q = K[rows]
        if self.degree == 1:
            # The line lives in the columns ``self.line`` (the continuous features).
            KL = K[:, self.line]
            QL = Q[:, self.line]
            dl = len(self.line)
            pairs = dl * (dl + 1) // 2
            m = sums[:, 1 + t : 1 + t + dl] / S0[:, None]
            second = unpack_second(sums[:, 1 + t + dl : 1 + t + dl + pairs] / S0[:, None], dl)
            T1 = sums[:, 1 + t + dl + pairs :].reshape(b, t, dl) / S0[:, None, None]
            Cxy = (T1 - ybar[:, :, None] * m[:, None, :]).transpose(0, 2, 1)
            rhs = np.concatenate([(QL - m)[:, :, None], Cxy], axis=2)
            solution, resolved = solve_covariance(m, second, rhs)
            unresolved = np.flatnonzero(~resolved)
            if len(unresolved):
                sparse = sparse_neighborhoods(E[unresolved], self.n_params, self.group_ids)
                solution[unresolved[sparse]] = 0.0
            g = solution[:, :, 0]
            B = solution[:, :, 1:]
            fitted = ybar + np.einsum("bdt,bd->bt", Cxy, g)
        else:
            fitted = ybar
        residual = self.Y[rows] - fitted
        s = self.sw[rows]
        rss = s @ np.einsum("ij,ij->i", residual, residual)
        trace = 0.0
        self_weight = None
        if not self.loo:
            self_weight = E_self / S0
            if self.degree == 1:
                self_weight = self_weight * (1.0 + np.einsum("bd,bd->b", QL - m, g))
            trace = self_weight.sum()
        if not gradient:
            return rss, trace
        if self.degree == 0:
            # A row that no key reaches has its nearest keys, which no bandwidth moves.
            S0 = np.where(empty, np.inf, S0)
            d_rss, d_trace = self._constant_gradient(
                K, columns, rows, r2, E, sums, residual, ybar, factor, S0, self_weight
            )
            return rss, trace, d_rss, d_trace
        # Σ_o r_io e_ijo, the residual of key j from query i's local fit against query
        # i's own residual: r_i·y_j − r_i·(local fit at k_j).
        if t == 1:
            P = np.multiply.outer(residual[:, 0], self.Y[:, 0])
        else:
            P = residual @ self.Y.T
        if self.degree == 1:
            A = (1.0 - np.einsum("bd,bd->b", g, m))[:, None] + g @ KL.T
            beta = np.einsum("bdt,bt->bd", B, residual)
            offset = np.einsum("bt,bt->b", residual, ybar) - np.einsum("bd,bd->b", beta, m)
            P -= offset[:, None]
            P -= beta @ KL.T
            P *= A
        else:
            A = None
            P -= np.einsum("bt,bt->b", residual, ybar)[:, None]
        P *= E
        P *= (s / S0)[:, None]
        parts = [P]
        if not self.loo:
            # ∂S_ii/∂θ = −w_ii Σ_j w_ij a_ij² γ_ij.
            T = E * (self_weight / S0)[:, None] if A is None else E * A * A
            if A is not None:
                T *= (E[np.arange(b), np.arange(self.n)[rows]] / S0**2)[:, None]
            parts.append(T)
        stacked = parts[0] if len(parts) == 1 else np.vstack(parts)
        if self.kernel != "gaussian":
            finite = np.where(np.isfinite(r2), r2 / factor**2, 0.0)
            stacked *= np.tile(-2.0 * log_kernel_derivative(finite, self.kernel), (len(parts), 1))
        stacked[np.tile(empty, len(parts))] = 0.0
        # Σ_j P_ij u_ijf² with u = (q − k)/factor: q² Σ P − 2q Σ P k + Σ P k².
        if powers is None:
            powers = np.hstack([np.ones((self.n, 1)), K, K**2])
        moments = stacked @ powers
        Qs = np.tile(Q, (len(parts), 1))
        du = Qs**2 * moments[:, :1] - 2.0 * Qs * moments[:, 1 : 1 + d] + moments[:, 1 + d :]
        du /= factor**2
        d_rss = -2.0 * du[:b].sum(axis=0)
        d_trace = -du[b:].sum(axis=0) if not self.loo else np.zeros(d)
        return rss, trace, d_rss, d_trace

    def _constant_gradient(
        self, K, columns, rows, r2, E, sums, residual, ybar, factor, S0, w_self
    ):
        """The local-constant gradients from the sums of one product.

        With Γ = −2f'(r²) (1 for the Gaussian kernel) and u = q − k,
        Σ_j E_ij Γ_ij (r_i·y_j − r_i·ȳ_i) u_ijf² expands in q_f² Σ_j E Γ [1, y],
        −2q_f Σ_j E Γ [k_f, y k_f] and Σ_j E Γ [k_f², y k_f²]: sums of the columns, so
        the gradient costs no pass over the block beyond the product that gives the
        estimate (for the Gaussian kernel, the same product).
        """
        d = K.shape[1]
        if self.kernel != "gaussian":
            finite = np.where(np.isfinite(r2), r2 / factor**2, 0.0)
            sums = np.dot(columns, (E * (-2.0 * log_kernel_derivative(finite, self.kernel))).T).T
        inner, plain_u2 = constant_gradient_terms(K[rows], sums, residual, ybar)
        d_rss = -2.0 * ((self.sw[rows] / S0) @ inner) / factor**2
        if self.loo:
            return d_rss, np.zeros(d)
        # ∂S_ii/∂θ = −w_ii Σ_j w_ij Γ_ij u_ij².
        return d_rss, -((w_self / S0) @ plain_u2) / factor**2

    # -------------------------------------------------------------- criteria

    def _statistics(self, log_bandwidth, rows, gradient=True, factors=None):
        K = self.X / np.exp(log_bandwidth)
        K_aug = self._augment(K)
        columns = self._columns(K, gradient and factors is None)
        scale = 1.0 if rows is None else self.n / len(rows)
        if factors is None:
            powers = np.hstack([np.ones((self.n, 1)), K, K**2]) if self.degree else None

            def block_statistics(block):
                return self._block(K, K_aug, columns, block, gradient=gradient, powers=powers)

            parts = self._map_blocks(block_statistics, rows)
            return [scale * np.sum([p[k] for p in parts], axis=0) for k in range(len(parts[0]))]

        squaring = self.kernel == "gaussian" and self.log_sw is None

        def block_grid(block):
            if self.tiled and not squaring:
                return [self._block(K, K_aug, columns, block, c, gradient=False) for c in factors]
            r2 = self._distances(K, K_aug, block)
            if not squaring:
                return [
                    self._block(K, K_aug, columns, block, c, gradient=False, r2=r2)
                    for c in factors
                ]
            # exp(−r²/(2c²)) for the largest factor, then each factor half the one before
            # by squaring twice, (e^{−a})⁴ = e^{−4a}: two products instead of an exp.
            # (The row minimum is subtracted from r², so every row keeps a weight of 1.)
            results = [None] * len(factors)
            E, previous = None, None
            for k in np.argsort(factors)[::-1]:
                c = factors[k]
                if previous == 2.0 * c:
                    np.square(E, out=E)
                    np.square(E, out=E)
                else:
                    E = self._kernel(r2, c)[0]
                previous = c
                results[k] = self._block(
                    K, K_aug, columns, block, c, gradient=False, r2=r2, weights=E
                )
            return results

        parts = self._map_blocks(block_grid, rows, tiled=self.tiled and not squaring)
        return [
            [scale * sum(p[c][k] for p in parts) for k in range(2)] for c in range(len(factors))
        ]

    def _value(self, rss, trace, d_rss=None, d_trace=None):
        """The criterion (search units) from the squared error and the trace."""
        sigma2 = rss / self.total
        d_sigma2 = None if d_rss is None else d_rss / self.total
        if self.loo:
            return sigma2, d_sigma2
        n = self.n_total
        tau = trace / n
        if self.criterion == "gcv":
            room = 1.0 - tau
            if not room > 0:
                return _INFEASIBLE, None if d_rss is None else np.zeros_like(d_rss)
            value = sigma2 / room**2
            if d_rss is None:
                return value, None
            return value, d_sigma2 / room**2 + 2.0 * sigma2 * (d_trace / n) / room**3
        room = 1.0 - tau - 2.0 / n
        if not room > 0:
            return _INFEASIBLE, None if d_rss is None else np.zeros_like(d_rss)
        sigma2 = max(sigma2, 1e-300)
        value = np.log(sigma2) + (1.0 + tau) / room
        if d_rss is None:
            return value, None
        return value, d_sigma2 / sigma2 + (2.0 - 2.0 / n) / room**2 * (d_trace / n)

    def scaled_loss_and_grad(self, log_bandwidth, rows=None):
        """The criterion and its gradient at ``exp(log_bandwidth)`` (search units)."""
        rss, trace, d_rss, d_trace = self._statistics(log_bandwidth, rows)
        return self._value(rss, trace, d_rss, d_trace)

    def scaled_loss(self, log_bandwidth, rows=None):
        rss, trace = self._statistics(log_bandwidth, rows, gradient=False)
        return self._value(rss, trace)[0]

    def scaled_grid_losses(self, bandwidth, factors, rows=None):
        """The criterion at ``bandwidth * c`` for every common factor ``c``, sharing the
        distances (search units)."""
        stats = self._statistics(np.log(bandwidth), rows, gradient=False, factors=factors)
        return np.array([self._value(rss, trace)[0] for rss, trace in stats])

    def effective_dof(self, log_bandwidth, rows=None):
        """tr(S), the trace of the smoother matrix at the training points."""
        loo, self.loo = self.loo, False
        try:
            return float(self._statistics(log_bandwidth, rows, gradient=False)[1])
        finally:
            self.loo = loo


# A criterion where tr(S) leaves no degrees of freedom for the error: worse than any other.
_INFEASIBLE = 1e10
# Training sets up to this many rows are searched exactly; larger ones on growing random
# subsets of the queries (each against every key).
_EXACT_ROWS = 4000
# The subsets of queries of the stages of a large search.
_FIRST_SUBSET = 600
_SUBSET_GROWTH = 4
_LAST_SUBSET = 2400
# The common factors of the first stage of a search (a coarse grid: it only picks the
# basin the refinement starts in), from 0.02 to 10, each twice the one before: the Gaussian
# kernel at one is the square of the square of the kernel at the next.
_SUBSET_GRID = 10.0 * 2.0 ** -np.arange(10.0)[::-1]
# The relative change of the criterion at which a search on a subset stops, and the
# iterations of the stages after the first (they start next to the minimum).
_SUBSET_FTOL = 1e-6
# Exact searches of at most this many rows restart from several points, each to this
# relative tolerance (the best end is polished to the full one).
_RESTART_ROWS = 2000
_RESTART_FTOL = 1e-4
# ... and, for the Gaussian kernel, with at most this many features: the 2d restarts cost 2d
# coarse searches, several times the search itself in ten dimensions. (A compact kernel's
# criterion has flat regions, where neighbours leave the support, in any dimension.)
_RESTART_FEATURES = 4
# A restart whose log-bandwidths all end within this of the optimum found returned to it.
_SAME_OPTIMUM = 0.1
_LATER_ITERATIONS = 12


def subset_sizes(n):
    """The sizes of the nested subsets of queries a search of ``n`` rows runs on, growing
    (600, then 2 400); none (an exact search on all rows) for at most 4 000 rows.

    Examples
    --------
    >>> subset_sizes(3000), subset_sizes(10**6)
    ([], [600, 2400])
    """
    if n <= _EXACT_ROWS:
        return []
    sizes = []
    size = _FIRST_SUBSET
    while size < min(n, _LAST_SUBSET):
        sizes.append(size)
        size *= _SUBSET_GROWTH
    sizes.append(min(n, _LAST_SUBSET))
    return sizes


def _subset_stages(n, rng):
    """Nested random subsets of the queries, growing; ``[None]`` (all rows) for small n."""
    if n <= _EXACT_ROWS:
        return [None]
    order = rng.permutation(n)
    return [np.sort(order[:size]) for size in subset_sizes(n)]


class BandwidthSelection(NamedTuple):
    """The result of :func:`select_bandwidth`."""

    #: ndarray of shape (n_features,): the bandwidths.
    bandwidth: np.ndarray
    #: float: the criterion reached, in the targets' units (for ``"loo"`` the leave-one-out
    #: mean squared error; an estimate from ``n_queries`` queries for large training sets).
    value: float
    #: ndarray of bool: the bandwidths on the lower edge of the search range.
    lower_edge: np.ndarray
    #: ndarray of bool: the bandwidths on the upper edge of the search range.
    upper_edge: np.ndarray
    #: float: tr(S), the effective degrees of freedom at the selected bandwidths.
    effective_dof: float
    #: int: the queries the last stage of the search used (all rows for small sets).
    n_queries: int


def select_bandwidth(
    X,
    Y,
    sample_weight=None,
    kernel="gaussian",
    *,
    criterion="loo",
    degree=0,
    n_jobs=None,
    random_state=None,
    verbose=0,
):
    """Per-feature bandwidths that minimize a selection criterion of the smoother.

    The criterion is that of the estimator actually fitted (``degree`` 0 for
    local-constant, 1 for local-linear): ``"loo"`` the leave-one-out squared error,
    ``"aic"`` the corrected AIC of Hurvich, Simonoff and Tsai (1998), ``"gcv"`` generalized
    cross-validation (see :class:`_Criterion`). First the best common multiple
    ``c · h_scott`` over a log grid (``c`` from 0.02 to 10, each twice the one before, all
    evaluated on one set of distances; the Gaussian kernel at one factor is the fourth power
    of the kernel at the next larger, so without sample weights the grid costs one
    ``exp``), then all
    log-bandwidths refined together by L-BFGS-B with the analytic gradient, within a factor
    1000 of the Scott bandwidth either way; exact leave-one-out searches of up to 2 000
    rows (with the Gaussian kernel, of 2 to 4 features; any number with a compact kernel,
    whose criterion has flat regions) also start from that common factor with each
    feature's bandwidth e times smaller and larger (the criterion can have local minima
    that trade one feature's bandwidth against another's) and keep the best end; for the
    Gaussian kernel the starts run in the order of their criterion, until one returns to
    the optimum already found. Then each
    feature is tried with its largest bandwidth (smoothed away: irrelevant features want
    that, but a small bandwidth on a feature with gaps is a flat plateau the gradient
    cannot leave), and the refinement is repeated from any improvement.

    Training sets of more than 4 000 rows are searched on random subsets of the queries
    (600, then 2 400 rows), each compared with every key: the criterion's sums over the
    subset, scaled to the whole set, are unbiased estimates of the full sums, and each
    stage starts from the previous stage's bandwidths. The search then costs a few
    thousand rows' worth of kernel sums instead of ``n`` per evaluation.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
    sample_weight : ndarray of shape (n_samples,), optional
    kernel : {"gaussian", "epanechnikov", "tricube"}
    criterion : {"loo", "aic", "gcv"}
    degree : {0, 1}
    n_jobs : int, optional
        Threads for the blocks of the criterion (``None``: all cores, within any thread
        limit set around the call).
    random_state : int, RandomState instance or None
        The subsets of queries of a large search.
    verbose : int
        1: a line per stage of the search; 2: also a line per evaluation.

    Returns
    -------
    selection : BandwidthSelection

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(80, 1))
    >>> y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=80)
    >>> selection = select_bandwidth(X, y, criterion="gcv", degree=1)
    >>> bool(0.05 < selection.bandwidth[0] < 0.5), bool(selection.effective_dof > 2)
    (True, True)
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(len(X), -1)
    sw = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    if len(X) < 2:
        raise ValueError(f"bandwidth={criterion!r} needs at least 2 samples; got {len(X)} sample")
    with single_threaded_blas():
        return _search(X, Y, sw, kernel, criterion, degree, n_jobs, random_state, verbose)


def _search(X, Y, sw, kernel, criterion, degree, n_jobs, random_state, verbose):
    objective = _Criterion(X, Y, sw, kernel, degree, criterion, n_jobs)
    if objective.n_groups < 2:
        raise ValueError(
            f"bandwidth={criterion!r} needs at least 2 distinct training inputs; every row "
            "of X is the same. Give a bandwidth or use 'scott'."
        )
    start = rule_of_thumb_bandwidth(X, sw, "scott")
    stages = _subset_stages(len(X), check_random_state(random_state))
    return search_criterion(objective, start, stages, criterion, kernel, verbose)


def search_criterion(objective, start, stages, criterion="loo", kernel="gaussian", verbose=0):
    """The search of :func:`select_bandwidth` on a criterion object, from Scott's ``start``.

    ``objective`` has ``n`` (the training rows) and, in search units, the methods
    ``scaled_loss_and_grad(log_h, rows)``, ``scaled_loss(log_h, rows)``,
    ``scaled_grid_losses(h, factors, rows)``, ``effective_dof(log_h, rows)`` and
    ``in_target_units(value)``, where ``rows`` is an entry of ``stages`` (``None``: all
    rows; otherwise a subset of the queries the objective understands, of ``len`` queries).
    The in-memory :class:`_Criterion` is one; the Dask path's criterion, whose sums are taken
    on the workers, is another.
    """
    started = time.perf_counter()

    def say(level, message):
        if verbose >= level:
            print(f"[bandwidth={criterion!r} {time.perf_counter() - started:7.2f} s] {message}")

    lower = np.log(start / _LOO_RANGE)
    upper = np.log(start * _LOO_RANGE)
    bounds = list(zip(lower, upper, strict=True))
    log_h = None
    for stage, rows in enumerate(stages):
        n_queries = objective.n if rows is None else len(rows)
        first = stage == 0

        def evaluate(log_h, rows=rows):
            value, grad = objective.scaled_loss_and_grad(log_h, rows)
            if verbose >= 2:  # (formatting the array costs as much as a small evaluation)
                say(2, f"  criterion {value:.6g} at h = {np.exp(log_h)}")
            return value, grad

        # On a subset the criterion is an estimate with a relative error of about
        # 1/√(queries): the search stops at a matching tolerance, not at 1e-9.
        ftol = 1e-9 if rows is None else _SUBSET_FTOL

        def refine(log_h, maxiter, evaluate=evaluate, ftol=ftol):
            result = minimize(
                evaluate,
                log_h,
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": maxiter, "ftol": ftol, "gtol": 1e-7},
            )
            return result.x, float(result.fun)

        if first:
            factors = _SUBSET_GRID
            grid = objective.scaled_grid_losses(start, factors, rows)
            best = np.log(start) + np.log(factors[np.argmin(grid)])
            say(1, f"{n_queries} queries: grid of common factors, best {grid.min():.6g}")
            log_h, loss = refine(best, 100)
            if grid.min() < loss:
                log_h, loss = best, float(grid.min())
            # The criterion can have several local minima that trade one feature's
            # bandwidth against another's (a common factor cannot see them): small exact
            # searches also start from the best common factor with each feature's
            # bandwidth a factor e smaller and larger, and keep the best end (as R's np
            # restarts its search).
            if (
                criterion == "loo"
                and rows is None
                and objective.n <= _RESTART_ROWS
                and len(best) > 1
                and (len(best) <= _RESTART_FEATURES or kernel != "gaussian")
            ):
                log_h, loss, n_starts = _restart(
                    objective, refine, best, log_h, loss, bounds, screen=kernel == "gaussian"
                )
                say(1, f"{n_queries} queries: best of {n_starts} starts {loss:.6g}")
            # A small bandwidth on a feature with gaps (integer codes, say) is a plateau:
            # the gradient vanishes before the feature is smoothed away. Try dropping each
            # feature (its bandwidth to the upper edge), refine again from any improvement.
            dropped, dropped_loss = log_h.copy(), loss
            for j in range(len(log_h)):
                candidate = dropped.copy()
                candidate[j] = upper[j]
                candidate_loss = objective.scaled_loss(candidate, rows)
                if candidate_loss < dropped_loss:
                    dropped, dropped_loss = candidate, candidate_loss
            if np.any(dropped != log_h):
                candidate, candidate_loss = refine(dropped, 100)
                if candidate_loss < loss:
                    log_h, loss = candidate, candidate_loss
        else:
            log_h, loss = refine(log_h, _LATER_ITERATIONS)
        say(1, f"{n_queries} queries: criterion {loss:.6g} at h = {np.exp(log_h)}")
    dof = objective.effective_dof(log_h, stages[-1])
    # Within 1 %: the optimizer stops as the loss flattens, not exactly on the edge.
    return BandwidthSelection(
        bandwidth=np.exp(log_h),
        value=float(objective.in_target_units(loss)),
        lower_edge=log_h <= lower + 0.01,
        upper_edge=log_h >= upper - 0.01,
        effective_dof=dof,
        n_queries=objective.n if stages[-1] is None else len(stages[-1]),
    )


def _restart(objective, refine, best, log_h, loss, bounds, screen=True):
    """Restarts of an exact search from per-feature perturbations of its start.

    The criterion can have several local minima that trade one feature's bandwidth against
    another's (a common factor cannot see them). The search also starts from the best
    common factor ``best`` with each feature's bandwidth a factor e smaller and larger (as
    R's np restarts its search), each to a coarse tolerance, and keeps the best end,
    polished to the full tolerance.

    With ``screen``, the 2d starts are ranked by one evaluation of the criterion and run
    most promising first, and the restarts stop at the first that returns to the optimum
    already found: the basin around it reaches that start, and the starts further up the
    criterion rarely find a lower one. (Not for the compact kernels: their criterion has
    flat regions, where a restart does not move and every start is run.)

    Returns the bandwidths, the criterion and the number of starts run (the first
    included).
    """
    lower, upper = np.asarray(bounds, dtype=float).T
    starts = []
    for j in range(len(best)):
        for step in (-1.0, 1.0):
            other = best.copy()
            other[j] = np.clip(other[j] + step, lower[j], upper[j])
            starts.append(other)
    order = range(len(starts))
    if screen:
        screened = [objective.scaled_loss(start) for start in starts]
        order = np.argsort(screened, kind="stable")
    n_starts = 1
    restarted = False
    for k in order:
        candidate, candidate_loss = refine(starts[k], 15, ftol=_RESTART_FTOL)
        n_starts += 1
        returned = bool(np.all(np.abs(candidate - log_h) < _SAME_OPTIMUM))
        if candidate_loss < loss:
            log_h, loss, restarted = candidate, candidate_loss, True
        if screen and returned:
            break
    if restarted:
        log_h, loss = refine(log_h, 100)
    return log_h, loss, n_starts


def loo_bandwidth(X, Y, sample_weight=None, kernel="gaussian", *, degree=0, n_jobs=None):
    """Per-feature bandwidths that minimize the leave-one-out squared error.

    :func:`select_bandwidth` with ``criterion="loo"``.

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loss : float
        The leave-one-out mean squared error reached, in the targets' units (squared,
        summed over the outputs). The search works on the targets divided by their total
        standard deviation, so it chooses the same bandwidths for ``Y`` and ``c·Y``;
        only this reported error is ``inf`` when its true value exceeds the largest
        float (targets beyond about 1e154).
    at_bound : ndarray of bool, shape (n_features,)
        Which bandwidths ended on the edge of the search range.
    """
    if len(X) < 2:
        raise ValueError(
            f"bandwidth='loo' needs at least 2 samples to leave one out; got {len(X)} sample"
        )
    selection = select_bandwidth(
        X, Y, sample_weight, kernel, criterion="loo", degree=degree, n_jobs=n_jobs
    )
    return selection.bandwidth, selection.value, selection.lower_edge | selection.upper_edge


def edge_message(criterion, features, edge):
    """The warning for bandwidths on an edge of the search range."""
    meaning = {
        "lower": f"its lower end, a factor {_LOO_RANGE:g} below Scott's rule: the target "
        "varies faster than the sample resolves; consider more data or give a bandwidth",
        "upper": f"its upper end, a factor {_LOO_RANGE:g} above Scott's rule: the feature "
        "barely matters to the target (its bandwidth wants to be infinite)",
    }[edge]
    name = "leave-one-out" if criterion == "loo" else criterion.upper()
    return (
        f"the {name} bandwidth of feature(s) {features} ended on the edge of the search "
        f"range, at {meaning}."
    )


def _bandwidth_message(bandwidth, detail="", rules=BANDWIDTH_RULES):
    return (
        "bandwidth must be a positive float, an array of n_features positive floats, or "
        f"one of {', '.join(map(repr, rules))}; got {bandwidth!r}{detail}"
    )


def check_bandwidth(bandwidth, n_features, rules=BANDWIDTH_RULES):
    """A given bandwidth as one positive finite float per feature, or a ``ValueError``."""
    if isinstance(bandwidth, numbers.Real) and not isinstance(bandwidth, bool):
        h = np.full(n_features, float(bandwidth))
    else:
        try:
            h = np.asarray(bandwidth, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(_bandwidth_message(bandwidth, rules=rules)) from None
        if h.shape != (n_features,):
            raise ValueError(
                _bandwidth_message(
                    bandwidth, f" (shape {h.shape}, but X has {n_features} features)", rules
                )
            )
    if not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(_bandwidth_message(bandwidth, rules=rules))
    return h


def resolve_bandwidth(
    bandwidth, X, Y, sample_weight, kernel="gaussian", *, n_jobs=None, rules=BANDWIDTH_RULES
):
    """The bandwidth a local-constant smoother uses: a rule, a selection criterion, or
    the given values.

    Warns (:class:`BandwidthWarning`) when a selected bandwidth ends on the lower edge of
    its search range, naming the features; the upper edge (an irrelevant feature) is not a
    warning.

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loo_error : float or None
        The criterion reached, for ``"loo"``, ``"aic"`` and ``"gcv"``.
    """
    if isinstance(bandwidth, str) and bandwidth in CRITERIA and bandwidth in rules:
        selection = select_bandwidth(
            X, Y, sample_weight, kernel, criterion=bandwidth, n_jobs=n_jobs
        )
        # The upper edge means an irrelevant feature, which the kernel then ignores: only
        # the lower edge, a target varying faster than the sample resolves, is a warning.
        if np.any(selection.lower_edge):
            warnings.warn(
                edge_message(bandwidth, np.flatnonzero(selection.lower_edge).tolist(), "lower"),
                BandwidthWarning,
                stacklevel=3,
            )
        return selection.bandwidth, selection.value
    if isinstance(bandwidth, str):
        if bandwidth not in rules:
            raise ValueError(_bandwidth_message(bandwidth, rules=rules))
        return rule_of_thumb_bandwidth(X, sample_weight, bandwidth), None
    return check_bandwidth(bandwidth, X.shape[1], rules), None


def select_tied_bandwidth(
    X,
    Y,
    sample_weight,
    scales,
    tied,
    bounds,
    *,
    criterion="loo",
    degree=0,
    line=None,
    grid_groups=None,
    leave_out_duplicates=True,
    n_jobs=None,
):
    """Gaussian-kernel bandwidths of columns tied in groups (the encoded columns of a
    discrete feature share one scale) that minimize a selection criterion.

    Parameter ``p`` is the log-scale of the columns ``tied[p]``; the other columns keep
    their ``scales``. The search is that of :func:`select_bandwidth` on all rows: the best
    common shift of the log-parameters from their start over the same grid of factors, then
    L-BFGS-B with the analytic gradient (the sum of the tied columns' gradients) within
    ``bounds``, then each parameter tried at its upper bound and the refinement repeated
    from any improvement. With ``grid_groups``, the grid shifts each group of parameters in
    turn, the others held at their best so far.

    Parameters
    ----------
    X : ndarray of shape (n, n_columns)
    Y : ndarray of shape (n, n_outputs)
    sample_weight : ndarray of shape (n,)
    scales : ndarray of shape (n_columns,)
        The start (and the fixed scale of the columns no parameter sets).
    tied : list of ndarray
        Per parameter, its columns.
    bounds : ndarray of shape (n_parameters, 2)
        The range of each log-parameter.
    criterion : {"loo", "aic", "gcv"}
    degree : {0, 1}
        The estimator whose criterion is minimized: local constant or local linear.
    line : ndarray of int, optional
        The columns of the local line for ``degree=1`` (default: all).
    grid_groups : list of ndarray, optional
        Groups of parameter indices whose common shift is searched one group after the
        other (default: all parameters together).
    leave_out_duplicates : bool
        Leave every exact duplicate of a row out with it (else only the row).
    n_jobs : int, optional

    Returns
    -------
    selection : BandwidthSelection
        With the scales of the columns as ``bandwidth`` and the parameters' edges.
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(len(X), -1)
    if len(X) < 2:
        raise ValueError(f"bandwidth={criterion!r} needs at least 2 samples; got {len(X)} sample")
    with single_threaded_blas():
        objective = _Criterion(
            X,
            Y,
            sample_weight,
            "gaussian",
            degree=degree,
            criterion=criterion,
            n_jobs=n_jobs,
            leave_out_duplicates=leave_out_duplicates,
            line=line,
        )
        base = np.log(np.asarray(scales, dtype=float))
        lower, upper = np.asarray(bounds, dtype=float).T

        def columns(theta):
            log_scales = base.copy()
            for p, cols in enumerate(tied):
                log_scales[cols] = theta[p]
            return log_scales

        def loss_and_grad(theta):
            value, grad = objective.scaled_loss_and_grad(columns(theta))
            return value, np.array([grad[cols].sum() for cols in tied])

        best = np.array([base[cols[0]] if len(cols) else 0.0 for cols in tied])
        for group in [np.arange(len(tied))] if grid_groups is None else grid_groups:
            candidates = []
            for f in _LOO_GRID:
                theta = best.copy()
                theta[group] = np.clip(best[group] + np.log(f), lower[group], upper[group])
                candidates.append(theta)
            values = [objective.scaled_loss(columns(theta)) for theta in candidates]
            best, best_value = candidates[int(np.argmin(values))], float(np.min(values))

        def refine(theta):
            result = minimize(
                loss_and_grad,
                theta,
                jac=True,
                method="L-BFGS-B",
                bounds=list(zip(lower, upper, strict=True)),
                options={"maxiter": 100, "ftol": 1e-9, "gtol": 1e-7},
            )
            return result.x, float(result.fun)

        theta, value = refine(best)
        if best_value < value:
            theta, value = best, best_value
        dropped, dropped_value = theta.copy(), value
        for p in range(len(theta)):
            candidate = dropped.copy()
            candidate[p] = upper[p]
            candidate_value = objective.scaled_loss(columns(candidate))
            if candidate_value < dropped_value:
                dropped, dropped_value = candidate, candidate_value
        if np.any(dropped != theta):
            candidate, candidate_value = refine(dropped)
            if candidate_value < value:
                theta, value = candidate, candidate_value
        return BandwidthSelection(
            bandwidth=np.exp(columns(theta)),
            value=float(objective.in_target_units(value)),
            lower_edge=theta <= lower + 0.01,
            upper_edge=theta >= upper - 0.01,
            effective_dof=objective.effective_dof(columns(theta)),
            n_queries=len(X),
        )
