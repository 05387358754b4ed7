"""Confidence intervals and marginal effects of the fitted smoother: the public inference
methods of :class:`~kernattn.KernelSmoother`, over its linear-smoother view
(``_inference()``: :class:`~kernattn._engine.inference.LinearSmootherInference`, or on the
binned tier :class:`~kernattn.smoother._binned.kernel.BinnedInference`)."""

from numbers import Integral, Real

import numpy as np

from kernattn._core.namespaces import in_caller_library
from kernattn._engine.inference import (
    INTERVAL_METHODS,
    NOISE_ESTIMATES,
    nadaraya_watson_gradient_weights,
    normal_quantile,
)

__all__ = ["GradientWeights", "SmootherInference", "check_inference_params"]


class GradientWeights:
    r"""The weights :math:`g_{ij}(x)` of the smoother's marginal effects,
    :math:`\partial \hat y / \partial x_j = \sum_i g_{ij}(x)\, y_i`, at a block of queries
    (called with the queries as the kernel sees them).

    For the local constant the derivative of the Nadaraya–Watson weights; for a local
    polynomial its slopes in the polynomial's columns, in units of the inputs (the other,
    discrete, columns have no derivative: 0 here, NaN once reported per feature).
    """

    def __init__(self, kernel, keys, degree, profile):
        self.kernel = kernel
        self.keys = keys
        self.degree = degree
        self.profile = profile
        # The kernel's scale of every input column: the bandwidths, or with discrete
        # features the scales of the encoded columns.
        self.scales = kernel.input_scale

    def __call__(self, queries):
        weights = self.kernel.weights(queries, 0).astype(np.float64)
        if not self.degree:
            return nadaraya_watson_gradient_weights(
                weights, queries, self.keys, self.scales, self.profile
            )
        polynomials = self.kernel.local[0]
        dims = polynomials.dims
        # The slopes in the polynomial's columns; the other (discrete) columns have no
        # derivative, and feature_gradient reports NaN for their features.
        slope = np.zeros(weights.shape + (self.keys.shape[1],))
        slope[:, :, dims] = polynomials.slopes(weights, self.kernel, queries, 0)[0]
        slope[:, :, dims] /= self.scales[dims]
        return slope


class SmootherInference:
    """``predict_interval`` and ``gradient`` of :class:`~kernattn.KernelSmoother`: the
    estimator supplies ``_inference()``, its fitted kernel and its units."""

    def _target_units(self, a, trailing=()):
        """Engine units (n_queries, *trailing, n_outputs) to the targets' units, shaped like
        ``predict``'s output with ``trailing`` axes after the query axis."""
        a = a * self._value_scale
        return a.reshape((len(a),) + trailing + self._target_shape).astype(self._dtype)

    @in_caller_library
    def predict_interval(
        self,
        X,
        alpha=0.05,
        *,
        method="analytic",
        noise="local",
        n_bootstrap=1000,
        random_state=None,
    ):
        r"""Pointwise confidence intervals for the smoothed mean :math:`\mathbb E\,\hat y(x)`.

        The estimate is linear in the targets, :math:`\hat y(x) = \sum_i l_i(x)\, y_i`
        (:math:`l` the Nadaraya–Watson weights, or the local-linear equivalent kernel), so
        with independent noise of variance :math:`\sigma^2(x_i)/s_i` (:math:`s_i` the sample
        weights, read as precision weights)

        .. math::

            \operatorname{Var} \hat y(x) = \sum_i l_i(x)^2\, \sigma^2(x_i) / s_i,

        and the analytic interval is :math:`\hat y(x) \pm z_{1-\alpha/2}
        \sqrt{\operatorname{Var} \hat y(x)}` with the normal quantile. The noise
        :math:`\sigma^2` is estimated from the training residuals :math:`e = y - Sy`,
        corrected for the shrinkage of residuals by the smoother: ``noise="global"`` pools
        them, :math:`\hat\sigma^2 = \mathrm{RSS} / (n - 2\operatorname{tr} S +
        \operatorname{tr} S^\top S)`; ``noise="local"`` (the default) smooths the squared
        residuals with the fit's kernel weights, and so follows a noise level that changes
        with :math:`x`.

        **The smoothing bias is not included.** These intervals cover the smoothed mean
        :math:`\mathbb E\,\hat y(x)` (the true function convolved with the kernel), not the
        true regression function :math:`m(x)`: where the bandwidth is large compared with the
        curvature of :math:`m` (peaks, valleys, the edges of the data for ``degree=0``), they
        are centred off :math:`m(x)` and cover it less often than nominal. A smaller bandwidth
        trades bias for width. Nor do they include the uncertainty of a data-driven bandwidth:
        the bandwidth is held at ``bandwidth_``.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        alpha : float, default=0.05
            One minus the nominal coverage of each interval (0.05: 95 % intervals).
        method : {"analytic", "bootstrap"}, default="analytic"
            ``"analytic"``: normal intervals from the variance above. ``"bootstrap"``: basic
            bootstrap intervals :math:`[\hat y - q_{1-\alpha/2}, \hat y - q_{\alpha/2}]`,
            with :math:`q` the quantiles of :math:`\sum_i l_i(x)\, e^*_i` over
            ``n_bootstrap`` draws of bootstrap errors :math:`e^*`, the bandwidth held fixed
            at ``bandwidth_`` (so no replicate is refitted: the smoother is linear).
        noise : {"local", "global"}, default="local"
            The noise model. With ``method="analytic"``, the noise estimate above. With
            ``method="bootstrap"``: ``"local"`` is the wild bootstrap (each rescaled
            residual keeps its row and gets a random sign), ``"global"`` the residual
            bootstrap (the pooled, centred, rescaled residuals are resampled).
        n_bootstrap : int, default=1000
            Bootstrap replicates (only with ``method="bootstrap"``).
        random_state : int, RandomState instance or None, default=None
            The bootstrap draws (only with ``method="bootstrap"``).

        Returns
        -------
        lower, upper : ndarray of shape (n_queries,) or (n_queries, n_outputs)
            The interval's ends, shaped like :meth:`predict`'s output.

        See Also
        --------
        predict : with ``return_std=True``, the spread of the targets around the estimate
            (how much the neighbours disagree), not the uncertainty of the estimate.
        gradient : marginal effects and their standard errors.

        Notes
        -----
        The noise estimate makes one pass of the training set against itself (two for
        ``noise="local"``), :math:`O(n^2 d)`, on every call: ask for many queries at once.
        A binned fit of over 20 000 rows takes it, the variances and the bootstrap (from its
        normal limit) from the gridded sums: see :mod:`kernattn.smoother._binned.kernel`.
        Residuals of a nearly interpolating fit carry no information about the noise; a
        fit whose residual degrees of freedom vanish raises a ``ValueError``.

        References
        ----------
        .. [1] L. Wasserman, "All of Nonparametric Statistics", Springer (2006), §5.7.
        .. [2] D. Ruppert, M. P. Wand, R. J. Carroll, "Semiparametric Regression",
           Cambridge University Press (2003), §6.4.
        .. [3] E. Mammen, "Bootstrap and wild bootstrap for high dimensional linear
           models", Ann. Statist. 21 (1993).

        Examples
        --------
        95 % intervals of a sine curve at its peak and at a zero, under noise of 0.1:

        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(0, 1, size=(200, 1))
        >>> y = np.sin(2 * np.pi * X[:, 0]) + 0.1 * rng.normal(size=200)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> lower, upper = model.predict_interval([[0.25], [0.5]])
        >>> bool(np.all(lower < model.predict([[0.25], [0.5]])))
        True
        >>> (upper - lower).round(2)
        array([0.08, 0.08])
        """
        check_inference_params(alpha=alpha, method=method, noise=noise, n_bootstrap=n_bootstrap)
        X = self._validate_queries(X)
        mean, _ = self._predict_centered(X, return_std=False)
        mean = mean.astype(np.float64)
        inference = self._inference()
        if method == "analytic":
            half = normal_quantile(alpha) * np.sqrt(inference.mean_variance(X, noise))
            low, high = -half, half
        else:
            q_low, q_high = inference.bootstrap_deviation_quantiles(
                X, alpha, noise, n_bootstrap, random_state
            )
            low, high = -q_high, -q_low  # the basic bootstrap interval
        lower, upper = (mean + low).astype(self._dtype), (mean + high).astype(self._dtype)
        return self._finish_prediction(lower, None), self._finish_prediction(upper, None)

    @in_caller_library
    def gradient(self, X, return_std=False, *, noise="local"):
        r"""Marginal effects :math:`\partial \hat y / \partial x_j` at each query.

        For ``degree=0`` the exact derivative of the Nadaraya–Watson estimate: with
        :math:`w_i = s_i\kappa_i / \sum_k s_k\kappa_k` and :math:`a_{ij} = \partial \log
        \kappa_i / \partial x_j`,

        .. math::

            \frac{\partial \hat y}{\partial x_j} = \sum_i w_i\, (a_{ij} - \bar a_j)\, y_i,
            \qquad \bar a_j = \sum_k w_k a_{kj};

        for the Gaussian kernel :math:`a_{ij} = (x_{ij} - x_j)/h_j^2` and this is
        :math:`\sum_i w_i (y_i - \hat y)(x_{ij} - x_j)/h_j^2`; the compact kernels use
        their own derivative (0 outside the support). For ``degree ≥ 1`` the slope at the
        query of the local weighted least-squares polynomial (for ``degree=1`` the marginal
        effect of local-linear regression, as in R's ``np`` and statsmodels' ``KernelReg``),
        solved as the fit is: a direction without local spread gets slope 0. The ridge of
        a held-back query is not applied to its slope: it bounds the variance of the
        estimate's level, and a line's slope does not depend on where the query lies (from
        degree 2 the slope outside the data extrapolates the polynomial's derivative, and
        its standard error says by how much).

        Both are linear in the targets, :math:`\sum_i g_{ij}(x)\, y_i`, so their variance
        is :math:`\sum_i g_{ij}(x)^2 \sigma^2(x_i)/s_i` with the noise estimate of
        :meth:`predict_interval`. As there, the smoothing bias (which is larger for
        derivatives than for the estimate) is not included.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        return_std : bool, default=False
            Also return the standard errors of the marginal effects.
        noise : {"local", "global"}, default="local"
            The noise estimate of the standard errors (see :meth:`predict_interval`).

        Returns
        -------
        gradient : ndarray of shape (n_queries, n_features) or (n_queries, n_features, n_outputs)
            In units of the targets per unit of each feature. NaN for categorical and ordinal
            features, which have no derivative (compare predictions at two levels instead).
        gradient_std : ndarray of the same shape
            Only when ``return_std=True``.

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> X = np.linspace(0, 1, 101)[:, None]
        >>> y = 3 * X[:, 0] ** 2
        >>> model = KernelSmoother(bandwidth=0.05, degree=1).fit(X, y)
        >>> model.gradient([[0.5]]).round(2)
        array([[3.]])
        """
        check_inference_params(noise=noise)
        if not isinstance(return_std, bool | np.bool_):
            raise TypeError(f"return_std must be a bool; got {return_std!r}")
        X = self._validate_queries(X)
        gradient_weights = GradientWeights(
            self.kernel_, self._training_inputs(), self.degree_, self.kernel
        )
        gradient, variance = self._inference().gradient(
            X, gradient_weights, noise if return_std else None
        )
        if self._encoding is not None:
            gradient, variance = self._encoding.feature_gradient(gradient, variance)
        trailing = (gradient.shape[1],)
        if not return_std:
            return self._target_units(gradient, trailing)
        return self._target_units(gradient, trailing), self._target_units(
            np.sqrt(variance), trailing
        )


def check_inference_params(*, alpha=0.05, method="analytic", noise="local", n_bootstrap=1):
    """Clear errors for the options of the inference methods."""
    if not isinstance(n_bootstrap, Integral) or isinstance(n_bootstrap, bool):
        raise TypeError(f"n_bootstrap must be a positive int; got {n_bootstrap!r}")
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive int; got {n_bootstrap!r}")
    if not isinstance(alpha, Real) or isinstance(alpha, bool) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be a float in (0, 1); got {alpha!r}")
    if not (isinstance(method, str) and method in INTERVAL_METHODS):
        raise ValueError(
            f"method must be one of {', '.join(map(repr, INTERVAL_METHODS))}; got {method!r}"
        )
    if not (isinstance(noise, str) and noise in NOISE_ESTIMATES):
        raise ValueError(
            f"noise must be one of {', '.join(map(repr, NOISE_ESTIMATES))}; got {noise!r}"
        )
