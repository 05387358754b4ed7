r"""Pointwise inference for a linear smoother: noise, confidence intervals, marginal effects.

A fitted kernel smoother is linear in its targets: the estimate at a query is
:math:`\hat y(x) = \sum_i l_i(x)\, y_i` with the *effective weights* :math:`l_i(x)` (the
Nadaraya–Watson weights, or the equivalent kernel of a local polynomial), and its marginal
effects are linear too, :math:`\partial \hat y / \partial x_j = \sum_i g_{ij}(x)\, y_i`. So
under the model

.. math::

    y_i = m(x_i) + \varepsilon_i, \qquad \mathbb E\,\varepsilon_i = 0, \qquad
    \operatorname{Var} \varepsilon_i = \sigma^2(x_i) / s_i \quad\text{(independent)},

with :math:`s_i` the sample weights read as precision weights (a row of weight 2 is the
mean of two observations; multiplying every weight by a constant changes nothing),

.. math::

    \operatorname{Var} \hat y(x) = \sum_i l_i(x)^2\, \sigma^2(x_i) / s_i, \qquad
    \operatorname{Var} \frac{\partial \hat y}{\partial x_j} = \sum_i g_{ij}(x)^2\,
    \sigma^2(x_i) / s_i .

These are variances around :math:`\mathbb E\,\hat y(x)`, not around :math:`m(x)`: the
smoothing bias :math:`\mathbb E\,\hat y(x) - m(x)` is not included.

**Noise.** The residuals :math:`e = (I - S)\,y` of the smoother matrix :math:`S_{jk} =
l_k(x_j)` satisfy, for constant :math:`\sigma^2` and no bias,
:math:`\mathbb E[s_j e_j^2] = \sigma^2 \delta_j` with

.. math::

    \delta_j = 1 - 2 S_{jj} + s_j \sum_k S_{jk}^2 / s_k

(for equal weights :math:`\sum_j \delta_j = n - 2\operatorname{tr} S +
\operatorname{tr} S^\top S`, the residual degrees of freedom). The *global* estimate is
:math:`\hat\sigma^2 = \sum_j s_j e_j^2 / \sum_j \delta_j`; the *local* one smooths both sums
with the (non-negative) kernel weights :math:`w_j(x)` of the fit,
:math:`\hat\sigma^2(x) = \sum_j w_j(x)\, s_j e_j^2 / \sum_j w_j(x)\, \delta_j`, which follows
a noise level that changes with :math:`x`.

**Bootstrap.** With the bandwidth held fixed the smoother stays linear, so a bootstrap
replicate of the estimate needs no refit: :math:`\hat y^*(x) - S\hat y\,(x) = \sum_i l_i(x)\,
e^*_i` for bootstrap errors :math:`e^*`. The residual bootstrap draws them from the pooled,
rescaled residuals (constant noise); the wild bootstrap multiplies each rescaled residual by
an independent Rademacher sign (noise that may change with :math:`x`). The interval is the
basic bootstrap one, :math:`[\hat y - q_{1-\alpha/2},\ \hat y - q_{\alpha/2}]` with
:math:`q` the quantiles of :math:`\sum_i l_i(x) e^*_i`: like the analytic one, it leaves the
smoothing bias out.
"""

import numpy as np
from scipy.special import ndtri
from sklearn.utils import check_random_state

from kernattn._core.blocks import map_query_blocks
from kernattn._core.numerics import normalized_weights
from kernattn.kernels import log_kernel_derivative

NOISE_ESTIMATES = ("local", "global")
INTERVAL_METHODS = ("analytic", "bootstrap")
# Residual degrees of freedom (a count, at most n) below this leave nothing to estimate the
# noise from: the smoother reproduces its training targets.
_MIN_DOF = 1e-9
# Bootstrap errors drawn per chunk (rows × replicates × outputs).
_DRAW_ENTRIES = 2**20


def normal_quantile(alpha):
    """The two-sided normal critical value :math:`z_{1-\\alpha/2}`."""
    return float(ndtri(1.0 - alpha / 2.0))


def nadaraya_watson_gradient_weights(weights, queries, keys, bandwidth, kernel):
    r"""Weights :math:`g_{ij}(x)` of the derivative of the Nadaraya–Watson estimate.

    With :math:`w_i = s_i \kappa_i / \sum_k s_k \kappa_k`, :math:`\kappa_i = \exp f(r_i^2)`
    and :math:`r_i^2 = \sum_j (x_j - x_{ij})^2 / h_j^2`,

    .. math::

        \frac{\partial w_i}{\partial x_j} = w_i\,(a_{ij} - \textstyle\sum_k w_k a_{kj}),
        \qquad a_{ij} = \frac{\partial \log\kappa_i}{\partial x_j}
        = -2 f'(r_i^2)\, \frac{x_{ij} - x_j}{h_j^2},

    so :math:`\partial\hat y/\partial x_j = \sum_i g_{ij} y_i` with
    :math:`g_{ij} = w_i (a_{ij} - \bar a_j)`. For the Gaussian, :math:`-2f' = 1` and
    :math:`\partial \hat y/\partial x_j = \sum_i w_i (y_i - \hat y)(x_{ij} - x_j)/h_j^2`,
    the local covariance of :math:`x_j` and :math:`y` over :math:`h_j^2`. Outside a compact
    support the kernel is 0 and so is its derivative (a query outside every support gets
    its nearest target, which is locally constant).

    Parameters
    ----------
    weights : ndarray of shape (m, n)
        The normalized kernel weights of the queries.
    queries : ndarray of shape (m, d)
    keys : ndarray of shape (n, d)
    bandwidth : ndarray of shape (d,)
    kernel : str
        A kernel of :mod:`kernattn.kernels`.

    Returns
    -------
    gradient_weights : ndarray of shape (m, n, d)
    """
    if kernel == "gaussian":
        # a_ij − ā_j = (x_ij − Σ_k w_k x_kj)/h_j²: the query itself cancels (and a distant query
        # cannot overflow the differences).
        centroid = weights @ keys
        difference = keys[None, :, :] - centroid[:, None, :]
        difference -= np.einsum("mn,mnd->md", weights, difference)[:, None, :]
        difference /= bandwidth**2
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            difference = (keys[None, :, :] - queries[:, None, :]) / bandwidth
            r2 = np.einsum("mnd,mnd->mn", difference, difference)
        inside = r2 < 1.0
        slope = -2.0 * log_kernel_derivative(np.where(inside, r2, 0.0), kernel)
        # Outside the support the kernel and its derivative are 0 (the differences there
        # may be huge, and are not used).
        difference = np.where(inside[:, :, None], difference, 0.0)
        difference *= (np.where(inside, slope, 0.0)[:, :, None]) / bandwidth
        difference -= np.einsum("mn,mnd->md", weights, difference)[:, None, :]
    difference *= weights[:, :, None]
    return difference


def local_noise(averages, pooled):
    """The local noise ``σ²`` from the kernel averages of :meth:`LinearSmootherInference.
    _noise_columns` (..., n_outputs + 1): the averaged ``s e²`` over the averaged ``δ``,
    and the ``pooled`` estimate where the averaged ``δ`` is too small to say anything."""
    local_dof = averages[..., -1:]
    # A neighbourhood whose rows all reproduce their own targets says nothing about its
    # noise: it gets the pooled estimate.
    enough = local_dof > _MIN_DOF
    return np.where(enough, averages[..., :-1] / np.where(enough, local_dof, 1.0), pooled)


class LinearSmootherInference:
    """Noise estimates, pointwise variances, marginal effects and bootstrap intervals of a
    fitted linear smoother (see the module docstring for the formulas).

    Parameters
    ----------
    weights : callable
        ``weights(X)`` → (len(X), n) effective weights :math:`l(x)` (rows sum to 1).
    kernel_weights : callable
        ``kernel_weights(X)`` → (len(X), n) non-negative kernel weights (rows sum to 1),
        which smooth the squared residuals of the local noise estimate.
    keys : ndarray of shape (n, d)
        The training inputs the weights refer to.
    values : ndarray of shape (n, n_outputs)
        The training targets (any affine transform of them: the results are in their units
        and must be scaled back by the caller).
    sample_weight : ndarray of shape (n,)
        Positive.
    n_jobs : int or None
        Threads for the query blocks.
    """

    def __init__(self, *, weights, kernel_weights, keys, values, sample_weight, n_jobs=None):
        self.weights = weights
        self.kernel_weights = kernel_weights
        self.keys = keys
        self.values = values
        self.sample_weight = normalized_weights(sample_weight)
        self.n_jobs = n_jobs

    def _map(self, function, n_queries, width, n_arrays=3):
        """``function(rows)`` over query blocks of ``n_queries`` × ``width`` entries."""
        return map_query_blocks(
            function, n_queries, width, n_jobs=self.n_jobs, n_arrays=n_arrays, cache=False
        )

    # ------------------------------------------------------------------ noise

    def residuals(self):
        """Training residuals ``e = y − S y`` and the factors ``δ`` with
        ``E[s_j e_j²] = σ² δ_j`` (constant noise, no bias).

        Returns
        -------
        residual : ndarray of shape (n, n_outputs)
        delta : ndarray of shape (n,)
        """
        return self._residuals_of(np.arange(len(self.keys)))

    def _residuals_of(self, rows):
        """:meth:`residuals` at the training ``rows`` (indices), from their exact weights."""
        s = self.sample_weight
        residual = np.empty((len(rows), self.values.shape[1]))
        delta = np.empty(len(rows))

        def block(part):
            index = rows[part]
            W = np.asarray(self.weights(self.keys[index]), dtype=np.float64)
            residual[part] = self.values[index] - W @ self.values
            own = W[np.arange(W.shape[0]), index]
            spread = (W * W) @ (1.0 / s)
            # Rounding can leave a reproduced target's δ at −1e-17: it is 0.
            delta[part] = np.maximum(1.0 - 2.0 * own + s[index] * spread, 0.0)

        self._map(block, len(rows), len(self.keys))
        return residual, delta

    def noise_variance(self, noise="local"):
        """The noise variance ``σ²(x_j)`` of a unit-weight observation at every training
        row, from the residuals (see the module docstring).

        Returns
        -------
        variance : ndarray of shape (n, n_outputs)
        """
        columns, pooled = self._noise_columns()
        if noise == "global":
            return np.broadcast_to(pooled, (len(columns), len(pooled))).copy()
        return local_noise(self._kernel_averages(columns), pooled)

    def _noise_columns(self):
        """The columns the local noise averages, ``[s_j e_j², δ_j]`` (n, n_outputs + 1),
        and the pooled noise ``Σ s_j e_j² / Σ δ_j`` (n_outputs,)."""
        residual, delta = self.residuals()
        squared = self.sample_weight[:, None] * residual**2
        dof = delta.sum()
        if not dof > _MIN_DOF:
            raise ValueError(
                "the smoother reproduces its training targets (residual degrees of freedom "
                f"n − 2 tr S + tr SᵀS = {dof:.3g}): there are no residuals to estimate the "
                "noise from. Use a larger bandwidth."
            )
        return np.hstack([squared, delta[:, None]]), squared.sum(axis=0) / dof

    def _kernel_averages(self, columns):
        """The kernel averages of ``columns`` (one row per training row) at every training
        row, with the kernel weights."""
        n = len(self.keys)
        out = np.empty_like(columns)

        def block(rows):
            K = np.asarray(self.kernel_weights(self.keys[rows]), dtype=np.float64)
            out[rows] = K @ columns

        self._map(block, n, n)
        return out

    def _scaled_noise(self, noise):
        """``σ²(x_i) / s_i``: each training target's own noise variance."""
        return self.noise_variance(noise) / self.sample_weight[:, None]

    # -------------------------------------------------------------- estimates

    def mean_variance(self, X, noise="local"):
        """``Var ŷ(x) = Σ_i l_i(x)² σ²(x_i)/s_i`` for every query.

        Returns
        -------
        variance : ndarray of shape (n_queries, n_outputs)
        """
        target_noise = self._scaled_noise(noise)
        variance = np.empty((len(X), self.values.shape[1]))

        def block(rows):
            W = np.asarray(self.weights(X[rows]), dtype=np.float64)
            variance[rows] = (W * W) @ target_noise

        self._map(block, len(X), len(self.keys))
        return variance

    def gradient(self, X, gradient_weights, noise=None):
        """Marginal effects ``Σ_i g_ij(x) y_i`` and, with ``noise``, their variances
        ``Σ_i g_ij(x)² σ²(x_i)/s_i``.

        Parameters
        ----------
        X : ndarray of shape (n_queries, d)
        gradient_weights : callable
            ``gradient_weights(X)`` → (len(X), n, d).
        noise : {"local", "global"} or None

        Returns
        -------
        gradient : ndarray of shape (n_queries, d, n_outputs)
        variance : ndarray of the same shape, or None
        """
        n, d = self.keys.shape
        t = self.values.shape[1]
        target_noise = None if noise is None else self._scaled_noise(noise)
        gradient = np.empty((len(X), d, t))
        variance = None if noise is None else np.empty((len(X), d, t))

        def block(rows):
            G = gradient_weights(X[rows])
            gradient[rows] = np.einsum("mnd,nt->mdt", G, self.values)
            if variance is not None:
                variance[rows] = np.einsum("mnd,nt->mdt", G * G, target_noise)

        self._map(block, len(X), n * (d + 1), n_arrays=4)
        return gradient, variance

    def bootstrap_deviation_quantiles(self, X, alpha, noise, n_bootstrap, random_state):
        """Quantiles ``q_{α/2}`` and ``q_{1−α/2}`` of ``Σ_i l_i(x) e*_i`` over bootstrap
        errors ``e*``: residual bootstrap for ``noise="global"``, wild for ``"local"``.

        The errors are the residuals rescaled by ``√(s_i / δ̄) / √s_i``, where ``δ̄`` is the
        average of the ``δ_j`` (their expected shrinkage); the residual bootstrap centres
        the pooled ``√s_i e_i`` and resamples rows (all outputs of a row together), the wild
        bootstrap keeps each row's residual and flips its sign at random (the same sign for
        all outputs). The draws are made in chunks from seeds drawn once from
        ``random_state``, so the result does not depend on how the queries are blocked.

        Returns
        -------
        lower, upper : ndarray of shape (n_queries, n_outputs)
        """
        residual, delta = self.residuals()
        n, t = residual.shape
        dof = delta.sum()
        if not dof > _MIN_DOF:
            raise ValueError(
                "the smoother reproduces its training targets (residual degrees of freedom "
                f"n − 2 tr S + tr SᵀS = {dof:.3g}): there are no residuals to bootstrap. "
                "Use a larger bandwidth."
            )
        root_s = np.sqrt(self.sample_weight)[:, None]
        standardized = residual * root_s * np.sqrt(n / dof)
        if noise == "global":
            standardized -= standardized.mean(axis=0)
        # Chunks of draws of a fixed size (8 MB): the chunks carry the seeds, so their size is
        # part of the random stream, which must not depend on working_memory.
        chunk = max(1, min(n_bootstrap, _DRAW_ENTRIES // max(1, n * t)))
        starts = range(0, n_bootstrap, chunk)
        rng = check_random_state(random_state)
        seeds = rng.randint(np.iinfo(np.int32).max, size=len(starts))

        def draw(seed, size):
            generator = np.random.default_rng(seed)
            if noise == "global":
                rows = generator.integers(n, size=(size, n))
                errors = standardized[rows]  # (size, n, t)
            else:
                signs = generator.choice(np.array([-1.0, 1.0]), size=(size, n))
                errors = signs[:, :, None] * standardized[None]
            return errors / root_s[None]

        lower = np.empty((len(X), t))
        upper = np.empty((len(X), t))

        def block(rows):
            W = np.asarray(self.weights(X[rows]), dtype=np.float64)
            deviations = np.empty((W.shape[0], n_bootstrap, t))
            for seed, start in zip(seeds, starts, strict=True):
                size = min(chunk, n_bootstrap - start)
                errors = draw(seed, size)
                deviations[:, start : start + size] = np.einsum("mn,bnt->mbt", W, errors)
            lower[rows], upper[rows] = np.quantile(
                deviations, [alpha / 2.0, 1.0 - alpha / 2.0], axis=1
            )

        self._map(block, len(X), n + n_bootstrap * t)
        return lower, upper
