r"""``KernelSmoother``: the classical Nadaraya–Watson (and local-linear) kernel smoother.

The Gaussian smoother is softmax attention in disguise: with :math:`q = x/h`, :math:`k = x_i/h`,

.. math::

    -\tfrac12 \|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2,

and the last term depends on the query only, so it cancels in the softmax: the weights are
``softmax(q·k − ½‖k‖²)``, dot-product attention with scale 1 and a key bias. The bandwidth
rules and the leave-one-out search live in :mod:`kernattn.bandwidth`.
"""

import numbers
import warnings

import numpy as np

from kernattn._base import NadarayaWatsonRegressor
from kernattn.attention import _EXP_FLOOR
from kernattn.bandwidth import (
    _LOO_RANGE,
    BANDWIDTH_RULES,
    loo_bandwidth,
    rule_of_thumb_bandwidth,
)
from kernattn.kernels import _OUTSIDE_SLOPE, KERNELS, log_kernel, squared_distances


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

    Notes
    -----
    The logits come from one matrix product per block of queries, with the expansion
    :math:`\|q - k\|^2 = \|q\|^2 + \|k\|^2 - 2q^\top k` of the inputs centred on the
    training mean and divided by the bandwidth. Their absolute accuracy is about
    :math:`10^{-16} (\text{spread}/h)^2`: predictions agree with a direct computation to
    about 1e-12 for bandwidths above a thousandth of the data's spread, less below that.
    A query whose kernel underflows for every key (far from the data, or outside every
    compact support) is recomputed from logits without its own norm and gets its nearest
    training target (the mean over exact ties), never 0/0.

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
        if isinstance(self.bandwidth, str) and self.bandwidth not in BANDWIDTH_RULES:
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

    def _block_logits(self, X, floor=False, keys=slice(None)):
        Q = self._queries(X)
        log_sw = self._log_sample_weight[keys]
        if self.kernel != "gaussian":
            r2 = squared_distances(Q, self._keys[keys], K_sq=self._keys_sq[keys])
            logits = log_kernel(r2, self.kernel)
            logits += log_sw
            return np.maximum(logits, _EXP_FLOOR, out=logits) if floor else logits
        half_sq = 0.5 * np.einsum("ij,ij->i", Q, Q)
        logits = np.hstack([Q, -half_sq[:, None], np.ones((len(Q), 1))]) @ self._keys_aug[keys].T
        # −½‖q − k‖² ≥ −½(‖q‖ + max‖k‖)²: floor only blocks that can reach the slow range.
        lowest = -0.5 * (np.sqrt(2.0 * half_sq.max()) + self._key_radius) ** 2
        if floor and lowest + log_sw.min() < _EXP_FLOOR:
            np.maximum(logits, _EXP_FLOOR, out=logits)
        return logits

    def _far_logits(self, X):
        """qᵀk − ½‖k‖² (+ log s): the Gaussian logits without the query's own −½‖q‖².

        That term is the same for every key, so it cancels in the weights, but for a query
        far from the data it swamps the differences between keys (or overflows). Without it
        the logits keep those differences, and the nearest key wins. Outside a compact
        support the log-kernel is −10⁶ r², hence the factor 2·10⁶ there. A query beyond
        about 1e150 (in bandwidths) is scaled down with its logits, so qᵀk cannot overflow;
        its weights are one-hot on the nearest key either way.
        """
        Q = self._queries(X)
        shrink = np.maximum(np.abs(Q).max(axis=1, initial=0.0) / 1e150, 1.0)[:, None]
        logits = (Q / shrink) @ self._keys.T
        logits -= 0.5 * self._keys_sq / shrink
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
