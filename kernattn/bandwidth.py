r"""Bandwidth selection for the kernel smoother: normal-reference rules and leave-one-out.

The bandwidth sets how far a query looks: with the Gaussian kernel, :math:`h_j` is the
kernel's standard deviation along feature :math:`j`. The rules of thumb read it off each
feature's spread; leave-one-out picks, per feature, the bandwidths whose smoother best
predicts every training target from the other training points.
"""

import numbers
import warnings

import numpy as np
from scipy.optimize import minimize

from kernattn._blocks import map_query_blocks, single_threaded_blas
from kernattn._loo import DuplicateGroups
from kernattn._numerics import (
    exp_shifted,
    normalized_weights,
    power_of_two_scale,
    shifted_exp,
)
from kernattn.kernels import log_kernel, log_kernel_derivative

__all__ = ["BANDWIDTH_RULES", "rule_of_thumb_bandwidth", "loo_bandwidth", "resolve_bandwidth"]

BANDWIDTH_RULES = ("scott", "silverman", "loo")
# Common factors of the rule-of-thumb bandwidth tried before the per-feature refinement.
_LOO_GRID = np.geomspace(1e-2, 1e1, 16)
# The per-feature refinement keeps log-bandwidths within this factor of the rule of thumb.
_LOO_RANGE = 1e3
# Entries per (queries × keys) array of a block of the leave-one-out objective.
_BLOCK_ENTRIES = 2**18


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
    return np.where(sigma > 1e-12 * np.maximum(scale, 1e-300), h, 1.0)


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


class _LeaveOneOut:
    r"""Leave-one-out squared error of the smoother as a function of the log-bandwidths.

    Query :math:`i`'s own key, and every exact duplicate of it, is left out: otherwise a
    vanishing bandwidth would copy each target from itself (or from its twin, so that
    repeated rows would not act like integer weights). The loss is
    :math:`L = \sum_i s_i \|y_i - \hat y_{-i}\|^2 / \sum_i s_i` and its gradient with respect
    to :math:`\log h_f` is
    :math:`\frac{4}{S}\sum_i s_i \sum_j w_{ij} \langle y_i - \hat y_i, y_j - \hat y_i\rangle
    f'(r_{ij}^2)\, u_{ijf}^2`, with :math:`f` the log-kernel and :math:`u = (x_i - x_j)/h`.
    Everything is computed in query blocks bounded by ``working_memory``, on the targets
    divided by a power of two per output (see ``__init__``): the loss and gradient are
    those in units of ``target_unit²`` (the ``scaled_`` methods, which the search uses), and
    :meth:`in_target_units` converts back.
    """

    def __init__(self, X, Y, sample_weight, kernel, n_jobs=None, leave_out_duplicates=True):
        self.n_jobs = n_jobs
        # Weights and data divided by powers of two (exact): their sums cannot overflow.
        sample_weight = normalized_weights(sample_weight)
        unit = power_of_two_scale(X, axis=0)
        self.X = X - np.average(X / unit, axis=0, weights=sample_weight) * unit
        unit = power_of_two_scale(Y, axis=0)
        Y = Y - np.average(Y / unit, axis=0, weights=sample_weight) * unit
        # The centered targets in units of a power of two per output (exact): squared
        # residuals of targets near 1e200 would overflow, of targets near 1e-200 underflow.
        # Each output's squares are weighted by (unit / target_unit)², so that the loss is
        # the plain one divided by target_unit², one power of two for all outputs: the
        # search sees the same function for y and c·y (c a power of two) and the error is
        # reported in the targets' units only at the end. The optimizer's tolerances are
        # absolute (ftol's floor of 1, gtol), so the unit of the loss decides where it
        # stops: targets whose squares cannot leave the float range keep the plain loss
        # (target_unit 1, the same search for data that differ in their last bits, such as
        # weighted and repeated rows); beyond 2^±100 target_unit is half the largest
        # output's unit (2^(k−1) for 2^k ≤ max|y − ȳ| < 2^(k+1)).
        self.unit = power_of_two_scale(Y, axis=0)
        largest = float(self.unit.max())
        self.target_unit = 1.0 if 2.0**-100 <= largest <= 2.0**100 else 0.5 * largest
        self.output_weight = (self.unit / self.target_unit) ** 2
        self.Y = Y / self.unit
        self.Y1 = np.hstack([self.Y, np.ones((len(Y), 1))])
        self.sw = sample_weight
        log_sw = np.log(sample_weight / sample_weight.max())
        self.log_sw = log_sw if np.any(log_sw != 0) else None
        self.kernel = kernel
        self.total = sample_weight.sum()
        # The (query, key) pairs to leave out: each row with every row of identical input.
        # Without leave_out_duplicates only the row itself (rows that share a category are
        # neighbours there, not copies).
        self.groups = DuplicateGroups(X if leave_out_duplicates else np.arange(len(X))[:, None])
        self.n_groups = self.groups.n_groups

    def in_target_units(self, loss):
        """Losses (or gradients) of the search, in units of ``target_unit²``, in the
        targets' units: inf only where the true value overflows."""
        with np.errstate(over="ignore", under="ignore"):
            return loss * self.target_unit * self.target_unit

    def _map_blocks(self, function):
        """``function(rows)`` over query blocks, on threads; the results in block order."""
        n = len(self.X)
        return map_query_blocks(
            function, n, n, n_jobs=self.n_jobs, n_arrays=3, cache=_BLOCK_ENTRIES
        )

    def _distances(self, K, K_aug, rows):
        """Scaled squared distances of a block, +inf on the left-out pairs.

        One product: [q, ‖q‖², 1] · [−2k, 1, ‖k‖²]. Not clipped at 0: a rounding error of
        −1e-16 only shifts a logit by as much.
        """
        Q = K[rows]
        Q_aug = np.hstack([Q, np.einsum("ij,ij->i", Q, Q)[:, None], np.ones((len(Q), 1))])
        return self.groups.leave_out(Q_aug @ K_aug, rows, value=np.inf)

    @staticmethod
    def _augment(K):
        return np.vstack([-2.0 * K.T, np.ones(len(K)), np.einsum("ij,ij->i", K, K)])

    def _kernel(self, r2, factor=1.0, out=None):
        """exp(logits − shift) of a block, the shift a per-row upper bound of the logits.

        For the Gaussian kernel, ``r2`` must already have its row minimum (the nearest kept
        key) subtracted: that is the shift, exact when the sample weights are equal, and
        it saves a pass over the block.
        """
        if self.kernel == "gaussian":
            logits = np.multiply(r2, -0.5 / factor**2, out=out)
        else:
            logits = log_kernel(r2 / factor**2, self.kernel)
        if self.log_sw is not None:
            logits += self.log_sw
        if self.kernel != "gaussian" or self.log_sw is not None:
            return shifted_exp(logits)
        return exp_shifted(logits)

    def _prepare(self, r2):
        if self.kernel == "gaussian":
            r2 -= r2.min(axis=1, keepdims=True)
        return r2

    def grid_losses(self, bandwidth, factors):
        """Loss at ``bandwidth * c`` for every common factor ``c`` (targets' units)."""
        return self.in_target_units(self.scaled_grid_losses(bandwidth, factors))

    def loss_and_grad(self, log_bandwidth):
        """Loss and gradient at ``exp(log_bandwidth)`` in the targets' units (they overflow
        to inf for targets beyond about 1e154: the search uses the scaled ones)."""
        loss, grad = self.scaled_loss_and_grad(log_bandwidth)
        return self.in_target_units(loss), self.in_target_units(grad)

    def scaled_grid_losses(self, bandwidth, factors):
        """Loss at ``bandwidth * c`` for every common factor ``c``, sharing the distances
        (in units of ``target_unit²``)."""
        K = self.X / bandwidth
        K_aug = self._augment(K)
        t = self.Y.shape[1]

        def block_losses(rows):
            losses = np.zeros(len(factors))
            r2 = self._prepare(self._distances(K, K_aug, rows))
            buffer = np.empty_like(r2)
            for c, factor in enumerate(factors):
                sums = self._kernel(r2, factor, out=buffer) @ self.Y1
                residual = self.Y[rows] - sums[:, :t] / sums[:, t:]
                weighted = residual * self.output_weight
                losses[c] = self.sw[rows] @ np.einsum("ij,ij->i", weighted, residual)
            return losses

        return np.sum(self._map_blocks(block_losses), axis=0) / self.total

    def scaled_loss_and_grad(self, log_bandwidth):
        """Loss and gradient at ``exp(log_bandwidth)`` in units of ``target_unit²``."""
        K = self.X / np.exp(log_bandwidth)
        K_aug = self._augment(K)
        n, d = K.shape
        t = self.Y.shape[1]
        # Key moments M_j = [1, k_j, k_j²], alone and times each target column: one product
        # with the kernel block gives the normalizer, the estimate and every gradient sum.
        M = np.hstack([np.ones((n, 1)), K, K**2])
        columns = np.hstack([M] + [self.Y[:, [c]] * M for c in range(t)])

        def block_loss_and_grad(rows):
            r2 = self._prepare(self._distances(K, K_aug, rows))
            kernel = self._kernel(r2 if self.kernel == "gaussian" else r2.copy())
            sums = (kernel @ columns).reshape(len(kernel), t + 1, 2 * d + 1)
            if self.kernel != "gaussian":
                kernel *= log_kernel_derivative(np.where(np.isfinite(r2), r2, 0.0), self.kernel)
                derivative_sums = (kernel @ columns).reshape(sums.shape)
            else:
                derivative_sums = -0.5 * sums
            denominator = sums[:, 0, 0]
            fitted = sums[:, 1:, 0] / denominator[:, None]
            residual = self.Y[rows] - fitted
            # The output weights enter through the residual of the loss and its gradient.
            weighted = residual * self.output_weight
            loss = self.sw[rows] @ np.einsum("ij,ij->i", weighted, residual)
            residual = weighted
            # C_i = Σ_j w_ij f'_ij <r_i, y_j − ŷ_i> M_j, up to the factor 1/denominator_i.
            C = np.einsum("ic,icm->im", residual, derivative_sums[:, 1:, :])
            C -= np.einsum("ic,ic->i", residual, fitted)[:, None] * derivative_sums[:, 0, :]
            C *= (self.sw[rows] / denominator)[:, None]
            Q = K[rows]
            # Σ_j (...) (q_f − k_jf)² = q_f² C_0 − 2 q_f C_f + C_{d+f}.
            grad = np.einsum("if,i->f", Q**2, C[:, 0])
            grad -= 2.0 * np.einsum("if,if->f", Q, C[:, 1 : d + 1])
            grad += C[:, d + 1 :].sum(axis=0)
            return loss, grad

        parts = self._map_blocks(block_loss_and_grad)
        loss = sum(part[0] for part in parts)
        grad = np.sum([part[1] for part in parts], axis=0)
        return loss / self.total, 4.0 * grad / self.total


def loo_bandwidth(X, Y, sample_weight=None, kernel="gaussian", *, n_jobs=None):
    """Per-feature bandwidths that minimize the leave-one-out squared error.

    First the best common multiple ``c · h_scott`` over a log grid (all factors evaluated on
    one set of distances), then all log-bandwidths refined together by L-BFGS-B with the
    analytic gradient, within a factor 1000 of the Scott bandwidth either way. Last, each
    feature is tried with its largest bandwidth (smoothed away: irrelevant features want
    that, but a small bandwidth on a feature with gaps is a flat plateau the gradient cannot
    leave), and the refinement is repeated from any improvement.

    The objective and its gradient are computed over blocks of queries on ``n_jobs``
    threads (``None``: all cores, within any thread limit set around the call).

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loss : float
        The leave-one-out mean squared error reached, in the targets' units (squared,
        summed over the outputs). The search itself works on the targets divided by a power
        of two per output, so it chooses the same bandwidths for ``Y`` and ``c·Y`` (exactly
        when ``c`` is a power of two) and neither overflows nor underflows for targets near
        1e±200; only this reported error is ``inf`` when its true value exceeds the largest
        float (targets beyond about 1e154).
    at_bound : ndarray of bool, shape (n_features,)
        Which bandwidths ended on the edge of the search range.
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(len(X), -1)
    sw = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    if len(X) < 2:
        raise ValueError(
            f"bandwidth='loo' needs at least 2 samples to leave one out; got {len(X)} sample"
        )
    with single_threaded_blas():
        return _search_loo_bandwidth(X, Y, sw, kernel, n_jobs)


def _search_loo_bandwidth(X, Y, sw, kernel, n_jobs):
    objective = _LeaveOneOut(X, Y, sw, kernel, n_jobs)
    if objective.n_groups < 2:
        raise ValueError(
            "bandwidth='loo' needs at least 2 distinct training inputs; every row of X is the "
            "same. Give a bandwidth or use 'scott'."
        )
    start = rule_of_thumb_bandwidth(X, sw, "scott")
    grid = objective.scaled_grid_losses(start, _LOO_GRID)
    best = np.exp(np.log(start) + np.log(_LOO_GRID[np.argmin(grid)]))
    lower = np.log(start / _LOO_RANGE)
    upper = np.log(start * _LOO_RANGE)
    bounds = list(zip(lower, upper, strict=True))
    options = {"maxiter": 100, "ftol": 1e-9, "gtol": 1e-7}

    def refine(log_h):
        result = minimize(
            objective.scaled_loss_and_grad,
            log_h,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options=options,
        )
        return result.x, result.fun

    log_h, loss = refine(np.log(best))
    if grid.min() < loss:
        log_h, loss = np.log(best), grid.min()
    # A small bandwidth on a feature with gaps (integer codes, say) is a plateau: the
    # gradient vanishes before the feature is smoothed away. Try dropping each feature
    # (its bandwidth to the upper edge) and refine again from any improvement.
    dropped, dropped_loss = log_h.copy(), loss
    for j in range(len(log_h)):
        candidate = dropped.copy()
        candidate[j] = upper[j]
        candidate_loss = objective.scaled_loss_and_grad(candidate)[0]
        if candidate_loss < dropped_loss:
            dropped, dropped_loss = candidate, candidate_loss
    if np.any(dropped != log_h):
        candidate, candidate_loss = refine(dropped)
        if candidate_loss < loss:
            log_h, loss = candidate, candidate_loss
    # Within 1 %: the optimizer stops as the loss flattens, not exactly on the edge.
    at_bound = (log_h <= lower + 0.01) | (log_h >= upper - 0.01)
    return np.exp(log_h), float(objective.in_target_units(loss)), at_bound


def _bandwidth_message(bandwidth, detail=""):
    return (
        "bandwidth must be a positive float, an array of n_features positive floats, or "
        f"one of 'scott', 'silverman', 'loo'; got {bandwidth!r}{detail}"
    )


def check_bandwidth(bandwidth, n_features):
    """A given bandwidth as one positive finite float per feature, or a ``ValueError``."""
    if isinstance(bandwidth, numbers.Real) and not isinstance(bandwidth, bool):
        h = np.full(n_features, float(bandwidth))
    else:
        try:
            h = np.asarray(bandwidth, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(_bandwidth_message(bandwidth)) from None
        if h.shape != (n_features,):
            raise ValueError(
                _bandwidth_message(
                    bandwidth, f" (shape {h.shape}, but X has {n_features} features)"
                )
            )
    if not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(_bandwidth_message(bandwidth))
    return h


def resolve_bandwidth(bandwidth, X, Y, sample_weight, kernel="gaussian", *, n_jobs=None):
    """The bandwidth a smoother uses: a rule, the leave-one-out search, or the given values.

    Warns when a leave-one-out bandwidth ends on the edge of its search range.

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loo_error : float or None
        The leave-one-out error reached, for ``"loo"``.
    """
    if isinstance(bandwidth, str) and bandwidth == "loo":
        h, loss, at_bound = loo_bandwidth(X, Y, sample_weight, kernel, n_jobs=n_jobs)
        if np.any(at_bound):
            features = np.flatnonzero(at_bound).tolist()
            warnings.warn(
                f"the leave-one-out bandwidth of feature(s) {features} ended on the "
                f"edge of the search range (a factor {_LOO_RANGE:g} from Scott's rule). "
                "At the upper edge the feature barely matters to the target (its "
                "bandwidth wants to be infinite); at the lower edge the target varies "
                "faster than the sample resolves.",
                UserWarning,
                stacklevel=3,
            )
        return h, loss
    if isinstance(bandwidth, str):
        if bandwidth not in BANDWIDTH_RULES:
            raise ValueError(_bandwidth_message(bandwidth))
        return rule_of_thumb_bandwidth(X, sample_weight, bandwidth), None
    return check_bandwidth(bandwidth, X.shape[1]), None


def loo_tied_bandwidth(
    X, Y, sample_weight, scales, tied, bounds, *, leave_out_duplicates=True, n_jobs=None
):
    """Leave-one-out bandwidths of columns tied in groups (the encoded columns of a discrete
    feature share one scale).

    Parameter ``p`` is the log-scale of the columns ``tied[p]``; the other columns keep
    their ``scales``. The search is that of :func:`loo_bandwidth`: the best common shift of
    the log-parameters from their start over the same grid of factors, then L-BFGS-B with the
    analytic gradient (the sum of the tied columns' gradients) within ``bounds``, then each
    parameter tried at its upper bound and the refinement repeated from any improvement.

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
    leave_out_duplicates : bool
        Leave every exact duplicate of a row out with it (else only the row).

    Returns
    -------
    scales : ndarray of shape (n_columns,)
    loss : float
        The leave-one-out mean squared error reached, in the targets' units.
    at_bound : ndarray of bool, shape (n_parameters,)
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(len(X), -1)
    if len(X) < 2:
        raise ValueError(
            f"bandwidth='loo' needs at least 2 samples to leave one out; got {len(X)} sample"
        )
    with single_threaded_blas():
        objective = _LeaveOneOut(
            X, Y, sample_weight, "gaussian", n_jobs, leave_out_duplicates=leave_out_duplicates
        )
        base = np.log(np.asarray(scales, dtype=float))
        lower, upper = np.asarray(bounds, dtype=float).T

        def columns(theta):
            log_scales = base.copy()
            for p, cols in enumerate(tied):
                log_scales[cols] = theta[p]
            return log_scales

        def loss_and_grad(theta):
            loss, grad = objective.scaled_loss_and_grad(columns(theta))
            return loss, np.array([grad[cols].sum() for cols in tied])

        start = np.array([base[cols[0]] if len(cols) else 0.0 for cols in tied])
        candidates = [np.clip(start + np.log(f), lower, upper) for f in _LOO_GRID]
        losses = [loss_and_grad(theta)[0] for theta in candidates]
        best, best_loss = candidates[int(np.argmin(losses))], float(np.min(losses))

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

        theta, loss = refine(best)
        if best_loss < loss:
            theta, loss = best, best_loss
        dropped, dropped_loss = theta.copy(), loss
        for p in range(len(theta)):
            candidate = dropped.copy()
            candidate[p] = upper[p]
            candidate_loss = loss_and_grad(candidate)[0]
            if candidate_loss < dropped_loss:
                dropped, dropped_loss = candidate, candidate_loss
        if np.any(dropped != theta):
            candidate, candidate_loss = refine(dropped)
            if candidate_loss < loss:
                theta, loss = candidate, candidate_loss
        at_bound = (theta <= lower + 0.01) | (theta >= upper - 0.01)
        return np.exp(columns(theta)), float(objective.in_target_units(loss)), at_bound
