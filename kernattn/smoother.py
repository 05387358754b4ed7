r"""``KernelSmoother``: the classical Nadaraya–Watson (and local-linear) kernel smoother.

The Gaussian smoother is softmax attention in disguise: with :math:`q = x/h`, :math:`k = x_i/h`,

.. math::

    -\tfrac12 \|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2,

and the last term depends on the query only, so it cancels in the softmax: the weights are
``softmax(q·k − ½‖k‖²)``, dot-product attention with scale 1 and a key bias. This module also
holds the smoother's bandwidth selection (rules of thumb and leave-one-out).
"""

import numbers
import warnings

import numpy as np
from scipy.optimize import minimize

from kernattn._base import NadarayaWatsonRegressor
from kernattn._blocks import iter_query_blocks, single_threaded_blas
from kernattn.attention import _EXP_FLOOR, _exp_shifted
from kernattn.kernels import (
    _OUTSIDE_SLOPE,
    KERNELS,
    log_kernel,
    log_kernel_derivative,
    squared_distances,
)

_BANDWIDTH_RULES = ("scott", "silverman", "loo")
# Common factors of the rule-of-thumb bandwidth tried before the per-feature refinement.
_LOO_GRID = np.geomspace(1e-2, 1e1, 16)
# The per-feature refinement keeps log-bandwidths within this factor of the rule of thumb.
_LOO_RANGE = 1e3


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
    total = weights.sum()
    mean = weights @ X / total
    sigma = np.sqrt(np.maximum(weights @ (X - mean) ** 2 / total, 0.0))
    if rule == "scott":
        h = sigma * total ** (-1.0 / (d + 4))
    elif rule == "silverman":
        iqr = np.array(
            [
                _weighted_quantile(X[:, j], weights, 0.75)
                - _weighted_quantile(X[:, j], weights, 0.25)
                for j in range(d)
            ]
        )
        spread = np.where(iqr > 0, np.minimum(sigma, iqr / 1.349), sigma)
        h = (4.0 / (d + 2)) ** (1.0 / (d + 4)) * total ** (-1.0 / (d + 4)) * spread
    else:
        raise ValueError(f"rule must be 'scott' or 'silverman'; got {rule!r}")
    # Relative to the feature's magnitude: a "constant" feature that differs only by rounding.
    scale = np.max(np.abs(X), axis=0) if n else np.ones(d)
    return np.where(sigma > 1e-12 * np.maximum(scale, 1e-300), h, 1.0)


def _duplicate_groups(X):
    """Group id per row: rows with identical inputs share an id."""
    _, groups = np.unique(X, axis=0, return_inverse=True)
    return groups.ravel()


class _LeaveOneOut:
    r"""Leave-one-out squared error of the smoother as a function of the log-bandwidths.

    Query :math:`i`'s own key, and every exact duplicate of it, is left out: otherwise a
    vanishing bandwidth would copy each target from itself (or from its twin, so that
    repeated rows would not act like integer weights). The loss is
    :math:`L = \sum_i s_i \|y_i - \hat y_{-i}\|^2 / \sum_i s_i` and its gradient with respect
    to :math:`\log h_f` is
    :math:`\frac{4}{S}\sum_i s_i \sum_j w_{ij} \langle y_i - \hat y_i, y_j - \hat y_i\rangle
    f'(r_{ij}^2)\, u_{ijf}^2`, with :math:`f` the log-kernel and :math:`u = (x_i - x_j)/h`.
    Everything is computed in query blocks bounded by ``working_memory``.
    """

    def __init__(self, X, Y, sample_weight, kernel):
        self.X = X - np.average(X, axis=0, weights=sample_weight)
        self.Y = Y - np.average(Y, axis=0, weights=sample_weight)
        self.Y1 = np.hstack([self.Y, np.ones((len(Y), 1))])
        self.sw = sample_weight
        log_sw = np.log(sample_weight / sample_weight.max())
        self.log_sw = log_sw if np.any(log_sw != 0) else None
        self.kernel = kernel
        self.total = sample_weight.sum()
        # The (query, key) pairs to leave out: each row with every row of identical input.
        groups = _duplicate_groups(X)
        self.n_groups = groups.max() + 1
        order = np.argsort(groups, kind="stable")
        starts = np.searchsorted(groups[order], np.arange(self.n_groups + 1))
        sizes = np.diff(starts)
        rows = np.repeat(order, sizes[groups[order]])
        cols = np.concatenate([order[starts[g] : starts[g + 1]] for g in groups[order]])
        by_row = np.argsort(rows, kind="stable")
        self.left_out_rows, self.left_out_cols = rows[by_row], cols[by_row]

    def _blocks(self):
        n = len(self.X)
        return iter_query_blocks(n, n, n_arrays=3, cache=False)

    def _distances(self, K, K_aug, rows):
        """Scaled squared distances of a block, +inf on the left-out pairs.

        One product: [q, ‖q‖², 1] · [−2k, 1, ‖k‖²]. Not clipped at 0: a rounding error of
        −1e-16 only shifts a logit by as much.
        """
        Q = K[rows]
        Q_aug = np.hstack([Q, np.einsum("ij,ij->i", Q, Q)[:, None], np.ones((len(Q), 1))])
        r2 = Q_aug @ K_aug
        lo, hi = np.searchsorted(self.left_out_rows, [rows.start, rows.stop])
        r2[self.left_out_rows[lo:hi] - rows.start, self.left_out_cols[lo:hi]] = np.inf
        return r2

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
            logits -= logits.max(axis=1, keepdims=True)
        return _exp_shifted(logits)

    def _prepare(self, r2):
        if self.kernel == "gaussian":
            r2 -= r2.min(axis=1, keepdims=True)
        return r2

    def grid_losses(self, bandwidth, factors):
        """Loss at ``bandwidth * c`` for every common factor ``c``, sharing the distances."""
        K = self.X / bandwidth
        K_aug = self._augment(K)
        losses = np.zeros(len(factors))
        t = self.Y.shape[1]
        for rows in self._blocks():
            r2 = self._prepare(self._distances(K, K_aug, rows))
            buffer = np.empty_like(r2)
            for c, factor in enumerate(factors):
                sums = self._kernel(r2, factor, out=buffer) @ self.Y1
                residual = self.Y[rows] - sums[:, :t] / sums[:, t:]
                losses[c] += self.sw[rows] @ np.einsum("ij,ij->i", residual, residual)
        return losses / self.total

    def loss_and_grad(self, log_bandwidth):
        K = self.X / np.exp(log_bandwidth)
        K_aug = self._augment(K)
        n, d = K.shape
        t = self.Y.shape[1]
        # Key moments M_j = [1, k_j, k_j²], alone and times each target column: one product
        # with the kernel block gives the normaliser, the estimate and every gradient sum.
        M = np.hstack([np.ones((n, 1)), K, K**2])
        columns = np.hstack([M] + [self.Y[:, [c]] * M for c in range(t)])
        loss = 0.0
        grad = np.zeros(d)
        for rows in self._blocks():
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
            loss += self.sw[rows] @ np.einsum("ij,ij->i", residual, residual)
            # C_i = Σ_j w_ij f'_ij <r_i, y_j − ŷ_i> M_j, up to the factor 1/denominator_i.
            C = np.einsum("ic,icm->im", residual, derivative_sums[:, 1:, :])
            C -= np.einsum("ic,ic->i", residual, fitted)[:, None] * derivative_sums[:, 0, :]
            C *= (self.sw[rows] / denominator)[:, None]
            Q = K[rows]
            # Σ_j (...) (q_f − k_jf)² = q_f² C_0 − 2 q_f C_f + C_{d+f}.
            grad += np.einsum("if,i->f", Q**2, C[:, 0])
            grad -= 2.0 * np.einsum("if,if->f", Q, C[:, 1 : d + 1])
            grad += C[:, d + 1 :].sum(axis=0)
        return loss / self.total, 4.0 * grad / self.total


def loo_bandwidth(X, Y, sample_weight=None, kernel="gaussian"):
    """Per-feature bandwidths that minimise the leave-one-out squared error.

    First the best common multiple ``c · h_scott`` over a log grid (all factors evaluated on
    one set of distances), then all log-bandwidths refined together by L-BFGS-B with the
    analytic gradient, within a factor 1000 of the Scott bandwidth either way. Last, each
    feature is tried with its largest bandwidth (smoothed away: irrelevant features want
    that, but a small bandwidth on a feature with gaps is a flat plateau the gradient cannot
    leave), and the refinement is repeated from any improvement.

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loss : float
        The leave-one-out mean squared error reached.
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
        return _search_loo_bandwidth(X, Y, sw, kernel)


def _search_loo_bandwidth(X, Y, sw, kernel):
    objective = _LeaveOneOut(X, Y, sw, kernel)
    if objective.n_groups < 2:
        raise ValueError(
            "bandwidth='loo' needs at least 2 distinct training inputs; every row of X is the "
            "same. Give a bandwidth or use 'scott'."
        )
    start = rule_of_thumb_bandwidth(X, sw, "scott")
    grid = objective.grid_losses(start, _LOO_GRID)
    best = np.exp(np.log(start) + np.log(_LOO_GRID[np.argmin(grid)]))
    lower = np.log(start / _LOO_RANGE)
    upper = np.log(start * _LOO_RANGE)
    bounds = list(zip(lower, upper, strict=True))
    options = {"maxiter": 100, "ftol": 1e-9, "gtol": 1e-7}

    def refine(log_h):
        result = minimize(
            objective.loss_and_grad,
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
        candidate_loss = objective.loss_and_grad(candidate)[0]
        if candidate_loss < dropped_loss:
            dropped, dropped_loss = candidate, candidate_loss
    if np.any(dropped != log_h):
        candidate, candidate_loss = refine(dropped)
        if candidate_loss < loss:
            log_h, loss = candidate, candidate_loss
    # Within 1 %: the optimiser stops as the loss flattens, not exactly on the edge.
    at_bound = (log_h <= lower + 0.01) | (log_h >= upper - 0.01)
    return np.exp(log_h), float(loss), at_bound


class KernelSmoother(NadarayaWatsonRegressor):
    r"""Nadaraya–Watson kernel regression (local constant or local linear).

    The estimate at a query :math:`x` is the kernel-weighted average of the training targets,

    .. math::

        \hat y(x) = \sum_i w_i(x)\, y_i, \qquad
        w_i(x) \propto s_i\, \kappa\!\left(\frac{x - x_i}{h}\right),

    with per-feature bandwidth :math:`h` and sample weights :math:`s_i`. For the Gaussian
    kernel :math:`\kappa(u) = \exp(-\|u\|^2/2)`, :math:`h_j` is the kernel's standard deviation
    in feature :math:`j`'s units, and the weights are exactly softmax attention with queries
    :math:`x/h`, keys :math:`x_i/h`, scale 1 and key bias :math:`-\|x_i/h\|^2/2`.

    With ``degree=1`` the estimate is local linear: at each query a weighted least-squares
    line is fitted with the same weights and evaluated at the query. This removes the
    boundary bias of the local-constant estimate (which flattens towards the inside at the
    edges of the data); it is still linear in the targets, ``ŷ(x) = Σ_i l_i(x) y_i`` with
    ``Σ_i l_i(x) = 1``, but the equivalent weights :math:`l_i` can be negative.

    Parameters
    ----------
    kernel : {"gaussian", "epanechnikov", "tricube"}, default="gaussian"
        The radial profile of the kernel (see :mod:`kernattn.kernels`). The compact ones give
        a query outside every training point's support its nearest training target.
    bandwidth : float, array_like of shape (n_features,), or {"scott", "silverman", "loo"}, \
default="scott"
        A positive float (the same bandwidth for every feature), one positive float per
        feature, a normal-reference rule (one bandwidth per feature from its spread), or
        ``"loo"``: one bandwidth per feature minimising the leave-one-out squared error (a
        grid over a common multiple of Scott's bandwidths, then all of them refined by
        gradient descent; see :func:`loo_bandwidth`). Features are not rescaled otherwise.
    degree : {0, 1}, default=0
        0 for Nadaraya–Watson (local constant), 1 for local linear.

    Attributes
    ----------
    bandwidth_ : ndarray of shape (n_features,)
        The bandwidth used, one per feature.
    loo_error_ : float
        Leave-one-out mean squared error reached (only with ``bandwidth="loo"``).
    X_fit_, y_fit_, sample_weight_ : ndarray
        The training set (the keys and values the queries attend to).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    See Also
    --------
    kernattn.AttentionRegressor : the same estimate with a learned dot-product kernel.
    kernattn.LinearAttentionRegressor : a random-feature approximation, linear in n.
    sklearn.neighbors.KNeighborsRegressor : the hard (k-nearest) version of the average.

    References
    ----------
    .. [1] E. A. Nadaraya, "On estimating regression", Theory Probab. Appl. 9 (1964).
    .. [2] G. S. Watson, "Smooth regression analysis", Sankhyā A 26 (1964).
    .. [3] J. Fan, I. Gijbels, "Local Polynomial Modelling and Its Applications" (1996).

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import KernelSmoother
    >>> X = np.linspace(0, 1, 50)[:, None]
    >>> y = np.sin(2 * np.pi * X[:, 0])
    >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
    >>> model.predict([[0.25]]).round(2)
    array([0.95])
    >>> print(model.attention_weights([[0.25]]).sum().round(12))
    1.0
    """

    _nonpositive_logits = True

    def __init__(self, kernel="gaussian", bandwidth="scott", degree=0):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.degree = degree

    def _check_params(self):
        if not isinstance(self.kernel, str) or self.kernel not in KERNELS:
            raise ValueError(
                f"kernel must be one of {', '.join(map(repr, KERNELS))}; got {self.kernel!r}"
            )
        if isinstance(self.degree, bool) or self.degree not in (0, 1):
            raise ValueError(
                f"degree must be 0 (Nadaraya-Watson) or 1 (local linear); got {self.degree!r}"
            )
        if isinstance(self.bandwidth, str) and self.bandwidth not in _BANDWIDTH_RULES:
            raise ValueError(self._bandwidth_message())

    def _bandwidth_message(self, detail=""):
        return (
            "bandwidth must be a positive float, an array of n_features positive floats, or "
            f"one of 'scott', 'silverman', 'loo'; got {self.bandwidth!r}{detail}"
        )

    def _resolve_bandwidth(self, X, Y, sample_weight):
        d = X.shape[1]
        if isinstance(self.bandwidth, str):
            if self.bandwidth == "loo":
                h, loss, at_bound = loo_bandwidth(X, Y, sample_weight, self.kernel)
                if np.any(at_bound):
                    features = np.flatnonzero(at_bound).tolist()
                    warnings.warn(
                        f"the leave-one-out bandwidth of feature(s) {features} ended on the "
                        f"edge of the search range (a factor {_LOO_RANGE:g} from Scott's rule). "
                        "At the upper edge the feature barely matters to the target (its "
                        "bandwidth wants to be infinite); at the lower edge the target varies "
                        "faster than the sample resolves.",
                        UserWarning,
                        stacklevel=4,
                    )
                return h, loss
            return rule_of_thumb_bandwidth(X, sample_weight, self.bandwidth), None
        if isinstance(self.bandwidth, numbers.Real) and not isinstance(self.bandwidth, bool):
            h = np.full(d, float(self.bandwidth))
        else:
            try:
                h = np.asarray(self.bandwidth, dtype=float)
            except (TypeError, ValueError):
                raise ValueError(self._bandwidth_message()) from None
            if h.shape != (d,):
                raise ValueError(
                    self._bandwidth_message(f" (shape {h.shape}, but X has {d} features)")
                )
        if not np.all(np.isfinite(h) & (h > 0)):
            raise ValueError(self._bandwidth_message())
        return h, None

    def _fit_kernel(self, X, Y, sample_weight):
        h, loo_error = self._resolve_bandwidth(X, Y, sample_weight)
        self.bandwidth_ = h
        if loo_error is not None:
            self.loo_error_ = loo_error
        # Centre before scaling: distances are translation invariant, their expansion
        # ‖q‖² + ‖k‖² − 2qᵀk is not (data near 1e6 would lose every digit).
        self._centre = np.average(X, axis=0, weights=sample_weight)
        keys = (X - self._centre) / h
        self._keys = keys
        self._keys_sq = np.einsum("ij,ij->i", keys, keys)
        self._key_radius = np.sqrt(self._keys_sq.max())
        half_sq = 0.5 * self._keys_sq
        # Gaussian logits in one product: [q, −½‖q‖², 1] · [k, 1, −½‖k‖² + log s].
        self._keys_aug = np.hstack(
            [keys, np.ones((len(keys), 1)), (self._log_sample_weight - half_sq)[:, None]]
        )
        if self.degree == 1:
            self._keys_outer = np.einsum("ij,ik->ijk", keys, keys).reshape(len(keys), -1)

    def _queries(self, X):
        return (X - self._centre) / self.bandwidth_

    def _block_logits(self, X, floor=False):
        Q = self._queries(X)
        if self.kernel != "gaussian":
            r2 = squared_distances(Q, self._keys, K_sq=self._keys_sq)
            logits = log_kernel(r2, self.kernel)
            logits += self._log_sample_weight
            return np.maximum(logits, _EXP_FLOOR, out=logits) if floor else logits
        half_sq = 0.5 * np.einsum("ij,ij->i", Q, Q)
        logits = np.hstack([Q, -half_sq[:, None], np.ones((len(Q), 1))]) @ self._keys_aug.T
        # −½‖q − k‖² ≥ −½(‖q‖ + max‖k‖)²: floor only blocks that can reach the slow range.
        lowest = -0.5 * (np.sqrt(2.0 * half_sq.max()) + self._key_radius) ** 2
        if floor and lowest + self._log_sample_weight.min() < _EXP_FLOOR:
            np.maximum(logits, _EXP_FLOOR, out=logits)
        return logits

    def _far_logits(self, X):
        """qᵀk − ½‖k‖² (+ log s): the Gaussian logits without the query's own −½‖q‖².

        That term is the same for every key, so it cancels in the weights, but for a query
        far from the data it swamps the differences between keys (or overflows). Without it
        the logits keep those differences, and the nearest key wins. Outside a compact
        support the log-kernel is −10⁶ r², hence the factor 2·10⁶ there.
        """
        logits = self._queries(X) @ self._keys.T
        logits -= 0.5 * self._keys_sq
        if self.kernel != "gaussian":
            # Shift before scaling, so that the nearest key's logit is 0, not an overflow.
            logits -= logits.max(axis=1, keepdims=True)
            with np.errstate(over="ignore"):
                logits *= 2.0 * _OUTSIDE_SLOPE
        logits += self._log_sample_weight
        return logits

    # ------------------------------------------------------------ local linear

    def _local_linear_weights(self, X, kernel_weights):
        """Equivalent weights l_i(x) of the local-linear fit, given normalised kernel weights.

        At query q the weighted least-squares line in u = (x_i − q)/h has intercept
        ŷ = e₁ᵀ M⁻¹ Σ_i w_i [1, u_i] y_i with M = Σ_i w_i [1, u_i][1, u_i]ᵀ, so
        l_i = w_i (a₀ + aᵀu_i) with (a₀, a) = M⁻¹e₁. Where M is (nearly) singular — all the
        weight on one point, or on a lower-dimensional set — the line is not determined and
        the query falls back to the local-constant weights w_i.
        """
        Q = self._queries(X)
        d = Q.shape[1]
        centroid = kernel_weights @ self._keys  # Σ w k
        # Σ w u uᵀ = Σ w k kᵀ − q mᵀ − m qᵀ + q qᵀ, with m = Σ w k and Σ w = 1.
        second = (kernel_weights @ self._keys_outer).reshape(-1, d, d)
        second -= Q[:, :, None] * centroid[:, None, :]
        second -= centroid[:, :, None] * Q[:, None, :]
        second += Q[:, :, None] * Q[:, None, :]
        M = np.empty((len(Q), d + 1, d + 1))
        M[:, 0, 0] = 1.0
        M[:, 0, 1:] = M[:, 1:, 0] = centroid - Q
        M[:, 1:, 1:] = second
        eigenvalues, eigenvectors = np.linalg.eigh(M)
        solvable = eigenvalues[:, 0] > 1e-10 * eigenvalues[:, -1]
        eigenvalues[~solvable] = 1.0
        # (a₀, a) = M⁻¹ e₁ = Σ_k v_k v_k[0] / λ_k.
        coef = np.einsum("bik,bk,bk->bi", eigenvectors, 1.0 / eigenvalues, eigenvectors[:, 0, :])
        coef[~solvable] = 0.0
        coef[~solvable, 0] = 1.0
        # l_i = w_i (a₀ − aᵀq + aᵀk_i).
        scale = coef[:, 1:] @ self._keys.T
        scale += (coef[:, 0] - np.einsum("bj,bj->b", coef[:, 1:], Q))[:, None]
        return kernel_weights * scale

    def _block_weights(self, X):
        weights = super()._block_weights(X)
        if self.degree == 1:
            return self._local_linear_weights(X, weights)
        return weights

    def _predict_block(self, X, return_std):
        if self.degree == 0:
            return super()._predict_block(X, return_std)
        kernel_weights = super()._block_weights(X)
        mean = self._local_linear_weights(X, kernel_weights) @ self._values
        if not return_std:
            return mean, None
        # The spread uses the (non-negative) kernel weights around the local-linear estimate.
        moments = kernel_weights @ np.hstack([self._values, self._values**2])
        t = self._values.shape[1]
        variance = moments[:, t:] - 2.0 * mean * moments[:, :t] + mean**2
        return mean, np.maximum(variance, 0.0)
