r"""``KernelSmoother``: the classical Nadaraya–Watson (and local-linear) kernel smoother.

The Gaussian smoother is softmax attention in disguise: with :math:`q = x/h`, :math:`k = x_i/h`,

.. math::

    -\tfrac12 \|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2,

and the last term depends on the query only, so it cancels in the softmax: the weights are
``softmax(q·k − ½‖k‖²)``, dot-product attention with scale 1 and a key bias. The bandwidth
rules and the leave-one-out search live in :mod:`kernattn.bandwidth`.
"""

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from kernattn._engine import NadarayaWatsonRegressor
from kernattn._heads import SoftmaxHeads
from kernattn._local_linear import (
    key_columns,
    n_line_parameters,
    solve_covariance,
    sparse_neighborhoods,
    unpack_second,
    value_key_columns,
)
from kernattn._loo import duplicate_groups
from kernattn._numerics import normalized_weights, power_of_two_scale
from kernattn.bandwidth import (
    BANDWIDTH_RULES,
    CRITERIA,
    BandwidthWarning,
    edge_message,
    resolve_bandwidth,
    select_bandwidth,
)
from kernattn.kernels import KERNELS

# Entries of a (rows × keys) array of the rows whose neighborhoods are counted.
_ROW_ENTRIES = 2**18


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
    ``Σ_i l_i(x) = 1``, but the equivalent weights :math:`l_i` can be negative. The line is
    solved scale-invariantly with a tiny ridge (see :mod:`kernattn._local_linear`): a huge
    bandwidth gives the least-squares line of all the data, a vanishing one interpolates
    the training targets. A query whose weights rest on fewer distinct training inputs
    than the line has parameters gets the local-constant estimate, and ``predict`` says
    how many did with a :class:`~kernattn.BandwidthWarning`.

    Parameters
    ----------
    kernel : {"gaussian", "epanechnikov", "tricube"}, default="gaussian"
        The radial profile of the kernel (see :mod:`kernattn.kernels`). The compact ones give
        a query outside every training point's support its nearest training target.
    bandwidth : float, array_like or {"scott", "silverman", "loo", "aic", "gcv"}, default="scott"
        A positive float (the same bandwidth for every feature), one positive float per
        feature, a normal-reference rule (one bandwidth per feature from its spread), or a
        selection criterion of the estimator actually fitted (local constant or local
        linear, as ``degree`` says), minimized per feature: ``"loo"`` the leave-one-out
        squared error, ``"aic"`` the corrected AIC of Hurvich, Simonoff and Tsai (1998),
        ``"gcv"`` generalized cross-validation (a grid over a common multiple of Scott's
        bandwidths, then all of them refined by gradient descent; see
        :func:`~kernattn.bandwidth.select_bandwidth`). The selected bandwidths do not
        depend on the units of ``X`` or ``y``. Features are not rescaled otherwise.
    degree : {0, 1}, default=0
        0 for Nadaraya–Watson (local constant), 1 for local linear.
    n_jobs : int, default=None
        Threads for the leave-one-out search and for exact prediction and weights of large
        problems: ``None`` all cores (or the ``n_jobs`` of an enclosing
        ``joblib.parallel_config``), −1 all cores, a positive number that many. A thread
        limit set around the call with ``threadpoolctl.threadpool_limits`` is honored.
    random_state : int, RandomState instance or None, default=None
        Draws the subsets of queries a selector searches on for training sets of more than
        4 000 rows (see :func:`~kernattn.bandwidth.select_bandwidth`); smaller ones are
        searched exactly and do not use it.
    verbose : int, default=0
        1 prints a line per stage of a bandwidth search, 2 also one per evaluation of the
        criterion.

    Attributes
    ----------
    bandwidth_ : ndarray of shape (n_features,)
        The bandwidth used, one per feature.
    loo_error_ : float
        Leave-one-out mean squared error of this estimator (of its ``degree``) at
        ``bandwidth_`` (only with ``bandwidth="loo"``; for more than 4 000 training rows, an
        unbiased estimate from the last subset of queries of the search).
    criterion_ : float
        The AICc or GCV value reached (only with ``bandwidth="aic"`` or ``"gcv"``).
    effective_dof_ : float
        The effective degrees of freedom, :math:`\mathrm{tr}(S)`, the trace of the smoother
        matrix at the training points (only with a selected bandwidth; an estimate from
        the last subset of queries for more than 4 000 rows).
    irrelevant_features_ : ndarray of bool, shape (n_features,)
        Only with a selected bandwidth: the features whose bandwidth ended on the upper
        edge of the search range (1000 times Scott's). The kernel ignores them: with
        ``degree=0`` the estimate does not depend on them (they are smoothed away); with
        ``degree=1`` it is linear in them (a global slope, 0 if they do not matter at
        all). They are reported here, not warned about. A bandwidth on the lower edge
        (the target varies faster than the sample resolves) issues one
        :class:`~kernattn.BandwidthWarning` per fit naming the features.
    kernel_ : SoftmaxHeads
        The fitted kernel: one softmax head whose queries and keys are the inputs, centered on
        the training mean and divided by ``bandwidth_``.
    X_fit_, y_fit_, sample_weight_ : ndarray
        The training set (the keys and values the queries attend to).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    Notes
    -----
    The logits come from one matrix product per block of queries, with the expansion
    :math:`\|q - k\|^2 = \|q\|^2 + \|k\|^2 - 2q^\top k` of the inputs centered on the
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

    _parameter_constraints: dict = {
        **NadarayaWatsonRegressor._parameter_constraints,
        "kernel": [StrOptions(set(KERNELS))],
        "bandwidth": [
            Interval(Real, 0, None, closed="neither"),
            "array-like",
            StrOptions(set(BANDWIDTH_RULES) | set(CRITERIA)),
        ],
        "degree": [Interval(Integral, 0, 1, closed="both")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        kernel="gaussian",
        bandwidth="scott",
        degree=0,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.degree = degree
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _fit_kernel(self, X, Y, sample_weight):
        h = self._select_bandwidth(X, Y, sample_weight)
        self.bandwidth_ = h
        # Center before scaling: distances are translation invariant, their expansion
        # ‖q‖² + ‖k‖² − 2qᵀk is not (data near 1e6 would lose every digit).
        kernel = SoftmaxHeads(
            similarity=self.kernel,
            center=_weighted_mean(X, sample_weight),
            input_scale=h,
            query_weights=None,
            key_weights=None,
            scale=np.ones(1),
            head_weights=np.ones(1),
            head_bias=np.zeros(Y.shape[1]),
            keys=X,
            log_sample_weight=self._log_sample_weight,
            dtype=self._dtype,
        )
        if self.degree == 1:
            # What the kernel weights are summed against for the local-linear fit: the
            # engine's value moments, then the keys' first and second moments and the
            # values times the keys (see kernattn._local_linear). In float64: the local
            # covariance is a difference of these sums.
            keys = kernel.keys(0)
            values = self._values / self._value_scale
            # Keys beyond the float range (a bandwidth near 1e-300) give infinite moments:
            # those queries' lines are not determined (see solve_covariance).
            with np.errstate(over="ignore", invalid="ignore"):
                self._local_moments = np.hstack(
                    [
                        self._moments.astype(np.float64),
                        key_columns(keys),
                        value_key_columns(values, keys),
                    ]
                )
            self._line_parameters = n_line_parameters(X)
            groups = duplicate_groups(X)
            self._groups = groups if groups.max(initial=0) + 1 < len(X) else None
        return kernel

    def _select_bandwidth(self, X, Y, sample_weight):
        """The bandwidth (and, for the selectors, the fitted attributes they report)."""
        if not (isinstance(self.bandwidth, str) and self.bandwidth in CRITERIA):
            rules = BANDWIDTH_RULES + CRITERIA[1:]
            return resolve_bandwidth(
                self.bandwidth, X, Y, sample_weight, self.kernel, rules=rules
            )[0]
        selection = select_bandwidth(
            X,
            Y,
            sample_weight,
            self.kernel,
            criterion=self.bandwidth,
            degree=self.degree,
            n_jobs=self.n_jobs,
            random_state=self.random_state,
            verbose=self.verbose,
        )
        if self.bandwidth == "loo":
            self.loo_error_ = selection.value
        else:
            self.criterion_ = selection.value
        self.effective_dof_ = selection.effective_dof
        self.irrelevant_features_ = selection.upper_edge
        if np.any(selection.lower_edge):
            features = self._feature_labels(np.flatnonzero(selection.lower_edge))
            warnings.warn(
                edge_message(self.bandwidth, features, "lower"), BandwidthWarning, stacklevel=4
            )
        return selection.bandwidth

    def _feature_labels(self, indices):
        """Feature indices, with their names where ``X`` had column names."""
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return indices.tolist()
        return [f"{i} ({names[i]})" for i in indices]

    # ------------------------------------------------------------ local linear

    def _local_linear_weights(self, X, kernel_weights):
        """Equivalent weights l_i(x) of the local-linear fit, given normalized kernel weights.

        With the weighted mean m and covariance C of the keys (inputs centered and divided
        by the bandwidth) under the kernel weights w, the weighted least-squares line at
        query q has l_i = w_i (1 + (k_i − m)ᵀ C⁻¹ (q − m)), solved scale-invariantly with
        a tiny ridge (see :mod:`kernattn._local_linear`). Only a query whose weights rest on
        fewer distinct training inputs than the line has parameters gets the local-constant
        weights w_i. Returns the weights and the mask of the rows that fell back.
        """
        kernel_weights = np.asarray(kernel_weights, dtype=np.float64)
        Q = self.kernel_.project(X, 0)
        with np.errstate(over="ignore", invalid="ignore"):
            return self._solve_local_linear(Q, kernel_weights)

    def _solve_local_linear(self, Q, kernel_weights):
        keys = self.kernel_.keys(0)
        d = Q.shape[1]
        first = 2 * self._values.shape[1] + 1
        columns = self._local_moments[:, first : first + d + d * (d + 1) // 2]
        sums = kernel_weights @ columns
        mean = sums[:, :d]
        second = unpack_second(sums[:, d:], d)
        g, resolved = solve_covariance(mean, second, (Q - mean)[:, :, None])
        g = g[:, :, 0]
        fallback = np.zeros(len(Q), dtype=bool)
        unresolved = np.flatnonzero(~resolved)
        if len(unresolved):
            fallback[unresolved] = sparse_neighborhoods(
                kernel_weights[unresolved], self._line_parameters, self._groups
            )
            g[fallback] = 0.0
        # l_i = w_i (1 − gᵀm + gᵀk_i).
        scale = g @ keys.T
        scale += (1.0 - np.einsum("bj,bj->b", g, mean))[:, None]
        return kernel_weights * scale, fallback

    def _head_weights(self, X, h):
        weights = super()._head_weights(X, h)
        if self.degree == 1:
            return self._local_linear_weights(X, weights)[0]
        return weights

    def _head_moments(self, X, h, return_std):
        if self.degree == 0:
            return super()._head_moments(X, h, return_std)
        # One pass over the keys (in tiles, like the local-constant estimate) gives every
        # sum the local line needs.
        with np.errstate(over="ignore", invalid="ignore"):
            sums = self._exact_sums(self.kernel_, X, h, moments=self._local_moments)
        t = self._values.shape[1]
        d = X.shape[1]
        pairs = d * (d + 1) // 2
        S0 = sums[:, 2 * t]
        ybar = sums[:, :t] / S0[:, None]
        second_values = sums[:, t : 2 * t] / S0[:, None]
        m = sums[:, 2 * t + 1 : 2 * t + 1 + d] / S0[:, None]
        second = unpack_second(sums[:, 2 * t + 1 + d : 2 * t + 1 + d + pairs] / S0[:, None], d)
        T1 = sums[:, 2 * t + 1 + d + pairs :].reshape(len(X), t, d) / S0[:, None, None]
        Cxy = (T1 - ybar[:, :, None] * m[:, None, :]).transpose(0, 2, 1)
        Q = self.kernel_.project(X, 0)
        with np.errstate(over="ignore", invalid="ignore"):
            g, resolved = solve_covariance(m, second, (Q - m)[:, :, None])
            g = g[:, :, 0]
            Cxy[~np.isfinite(Cxy)] = 0.0
        fallback = np.zeros(len(X), dtype=bool)
        unresolved = np.flatnonzero(~resolved)
        step = max(1, _ROW_ENTRIES // max(1, len(self._values)))
        for start in range(0, len(unresolved), step):
            rows = unresolved[start : start + step]
            weights = self._exact_weights(self.kernel_, X[rows], h).astype(np.float64)
            fallback[rows] = sparse_neighborhoods(weights, self._line_parameters, self._groups)
        g[fallback] = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            mean = ybar + np.einsum("bdt,bd->bt", Cxy, g)
            ybar_ok = np.all(np.isfinite(mean), axis=1)
        # Moments that overflowed (keys beyond the float range): the local constant.
        mean[~ybar_ok] = ybar[~ybar_ok]
        fallback |= ~ybar_ok
        if not return_std:
            return mean, None, fallback
        # The spread of the values under the (non-negative) kernel weights around the
        # local-linear estimate: Var_w(v) + (v̄ − ŷ)², redone from the deviations where
        # the difference of moments cancels.
        spread = second_values - ybar**2 + (ybar - mean) ** 2
        spread = self._accurate_spread(X, h, mean, spread, second_values)
        return mean, np.maximum(spread, 0.0), fallback

    def _report_fallback(self, n_fallback, n_queries):
        if n_fallback:
            warnings.warn(
                f"{n_fallback} of {n_queries} queries have fewer distinct training inputs "
                f"with weight than a local line has parameters ({self._line_parameters}): "
                "they got the local-constant estimate. The bandwidth is small for them.",
                BandwidthWarning,
                stacklevel=4,
            )


def _weighted_mean(X, sample_weight):
    """The weighted mean of the columns, in units that cannot overflow (powers of two near
    the largest input and weight: exact, so ordinary data give the plain average)."""
    unit = power_of_two_scale(X, axis=0)
    return np.average(X / unit, axis=0, weights=normalized_weights(sample_weight)) * unit
