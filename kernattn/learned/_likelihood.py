r"""Likelihood cross-validation of the Gaussian product kernel's bandwidths for labels.

For one-hot codes :math:`y_i` of the labels and per-feature bandwidths :math:`h`, the
leave-one-out class probabilities of training row :math:`i` are the Nadaraya–Watson
estimate from the other rows (its exact duplicates left out),
:math:`\hat p_{-i} = \sum_{j \notin g(i)} w_{ij}(h)\, y_j`, and likelihood cross-validation
(Hall, Racine and Li 2004; R np's ``npcdensbw`` with ``bwmethod="cv.ml"``) minimizes

.. math::

    L(h) = -\frac{1}{\sum_i s_i} \sum_i s_i \log \hat p_{-i}(y_i).

The kernel is the smoother's (:class:`~kernattn.KernelSmoother`): continuous features as
they are, discrete ones through their encoded columns
(:class:`~kernattn.bandwidth._mixed.MixedEncoding`),
each encoded column :math:`c` a Gaussian of standard deviation :math:`\sigma_c`. As the
learned kernel's objective (:class:`~kernattn.learned._objective.LeaveOneOutObjective` with
``loss="log"``) with one tied head, scale 1 and the diagonal projection
:math:`W = \mathrm{diag}(1/\sigma)`, it gives :math:`L` and its gradient; the gradient in
:math:`\log\sigma_c` is :math:`-W_{cc}\, \partial L/\partial W_{cc}`, summed over the
columns a feature's bandwidth sets. L-BFGS-B searches the log-bandwidths from the
leave-one-out (squared-error) bandwidths of the smoother.

References
----------
.. [1] P. Hall, J. Racine, Q. Li, "Cross-validation and the estimation of conditional
   probability densities", J. Amer. Statist. Assoc. 99 (2004).
"""

import numpy as np
from scipy.optimize import brentq, minimize, minimize_scalar

from kernattn._core.loo import DuplicateGroups
from kernattn.bandwidth._mixed import CONTINUOUS
from kernattn.learned._objective import Layout, LeaveOneOutObjective

#: A continuous feature's bandwidth is searched within this factor below and above its
#: start (the smoother's leave-one-out bandwidth).
SEARCH_FACTOR = 1000.0
#: L-BFGS-B iterations of the search, at most.
MAX_ITER = 50


class LikelihoodCriterion:
    """The leave-one-out log-loss of the Gaussian product kernel's class probabilities.

    Parameters
    ----------
    encoding : MixedEncoding
        The features' kinds and the encoding of the discrete ones.
    X : ndarray of shape (n, n_features)
        Training inputs (positive weight only).
    Y : ndarray of shape (n, n_classes)
        One-hot codes of the labels.
    sample_weight : ndarray of shape (n,)
        Positive.
    queries : ndarray of int
        The rows whose leave-one-out probabilities are measured (against every row).
    n_jobs : int, optional
    """

    def __init__(self, encoding, X, Y, sample_weight, queries, n_jobs=None):
        self.encoding = encoding
        Z = encoding.transform(X)
        # Centered: the logits' expansion ‖q‖² + ‖k‖² − 2qᵀk loses digits far from 0.
        Z = Z - np.average(Z, axis=0, weights=sample_weight)
        self.n_columns = Z.shape[1]
        self.n_classes = Y.shape[1]
        self.layout = Layout(1, self.n_columns, self.n_columns, self.n_classes, True, False)
        self.objective = LeaveOneOutObjective(
            Z,
            Y,
            sample_weight,
            DuplicateGroups(Z),
            self.layout,
            "gaussian",
            np.ones(1),
            0.0,
            n_jobs=n_jobs,
            loss="log",
        )
        self.queries = queries

    def _theta(self, scales):
        W = np.diag(1.0 / scales)[None]
        return self.layout.pack(W, W, None, np.ones(1), np.zeros(self.n_classes))

    def probabilities(self, bandwidth):
        """The leave-one-out class probabilities of the query rows at ``bandwidth`` (``h``
        per continuous feature, ``λ`` per discrete one); ``nan`` for a row without any
        key outside its duplicate group."""
        theta = self._theta(self.encoding.column_scales(bandwidth))
        return self.objective.head_estimates(theta, queries=self.queries)[:, 0, :]

    def loss(self, bandwidth):
        """:math:`L` at ``bandwidth``."""
        theta = self._theta(self.encoding.column_scales(bandwidth))
        return self.objective.loss(theta, queries=self.queries)

    def common_factor(self, bandwidth):
        """``bandwidth`` with its continuous features' bandwidths multiplied by the one
        factor (between 1/1000 and 1000) that minimizes :math:`L` (Brent's search on its
        logarithm, to 1e-8, then the root of :math:`dL/dc` next to it: a search on values
        alone stops at points that move with the sums' rounding, so integer weights and
        repeated rows gave probabilities 1.3e-7 apart on some processors at scipy's
        default 1e-5, and 7e-8 apart at 1e-8 on another build; with the slope's root the
        bandwidths agree to 2e-16); the discrete features' λ as given."""
        bandwidth = np.asarray(bandwidth, dtype=float)
        continuous = self.encoding.kinds == CONTINUOUS
        if not np.any(continuous):
            return bandwidth

        def scaled(log_factor):
            out = bandwidth.copy()
            out[continuous] *= np.exp(log_factor)
            return out

        spread = np.log(SEARCH_FACTOR)
        result = minimize_scalar(
            lambda c: self.loss(scaled(c)),
            bounds=(-spread, spread),
            method="bounded",
            options={"xatol": 1e-8},
        )
        if not result.fun <= self.loss(bandwidth):
            return bandwidth
        return scaled(self._polished_factor(scaled, float(result.x), spread))

    def _slope(self, scaled, moving, log_factor):
        """:math:`dL/dc` at the log-factor ``c`` of :meth:`common_factor`: the gradient of
        :math:`L` in the projection's diagonal :math:`1/s_j`, through
        :math:`d(1/s_j)/dc = -1/s_j` on the columns the factor scales (``moving``,
        :meth:`_scaled_columns`)."""
        scales = self.encoding.column_scales(scaled(log_factor))
        grad = self.objective.loss_and_grad(self._theta(scales), queries=self.queries)[1]
        g_W = self.layout.unpack(grad)[0][0]
        return -float(np.sum(np.diagonal(g_W)[moving] / scales[moving]))

    def _polished_factor(self, scaled, log_factor, spread):
        """The root of :math:`dL/dc` near Brent's minimum ``log_factor``, where the slope
        changes sign within 1e-4 of it; else ``log_factor``. Function values settle the
        minimum only to about the square root of their rounding (near 1e-8: integer weights
        and repeated rows gave bandwidths 5e-8 apart and probabilities 7e-8 apart on some
        builds); the slope's root is settled to the rounding of the slope."""
        moving = self._scaled_columns(scaled)

        def slope(c):
            return self._slope(scaled, moving, c)

        low = max(log_factor - 1e-4, -spread)
        high = min(log_factor + 1e-4, spread)
        s_low, s_high = slope(low), slope(high)
        if not (np.isfinite(s_low) and np.isfinite(s_high) and s_low < 0.0 < s_high):
            return log_factor
        return float(brentq(slope, low, high, xtol=1e-15))

    def _scaled_columns(self, scaled):
        """The columns of the encoding whose scales the factor of ``scaled`` moves."""
        base = self.encoding.column_scales(scaled(0.0))
        return ~np.isclose(self.encoding.column_scales(scaled(1.0)), base, rtol=1e-3, atol=0)

    def minimize(self, bandwidth, features=None):
        """The bandwidths minimizing :math:`L` from ``bandwidth``: one log-scale per
        feature among ``features`` (all for ``None``; a discrete feature's λ within its
        range), the others held, by L-BFGS-B."""
        encoding = self.encoding
        base = encoding.column_scales(bandwidth)
        tied = encoding.tied_columns()
        features = range(len(tied)) if features is None else features
        free = [j for j in features if len(tied[j])]
        if not free:
            return np.asarray(bandwidth, dtype=float)
        x0, bounds = [], []
        for j in free:
            start = np.log(base[tied[j][0]])
            if encoding.kinds[j] == CONTINUOUS:
                spread = np.log(SEARCH_FACTOR)
                bounds.append((start - spread, start + spread))
            else:
                # σ = 1/√ρ(λ): λ = 0 is the largest rate (the smallest σ).
                lo, hi = encoding.lam_range(j)
                bounds.append(
                    (-0.5 * np.log(encoding.rho(j, lo)), -0.5 * np.log(encoding.rho(j, hi)))
                )
                start = float(np.clip(start, *bounds[-1]))
            x0.append(start)
        diagonal = np.arange(self.n_columns)
        query_part = self.layout.slices["query"]

        def scales_of(x):
            scales = base.copy()
            for value, j in zip(x, free, strict=True):
                scales[tied[j]] = np.exp(value)
            return scales

        def loss_and_grad(x):
            scales = scales_of(x)
            loss, grad = self.objective.loss_and_grad(self._theta(scales), queries=self.queries)
            g_W = grad[query_part].reshape(self.n_columns, self.n_columns)[diagonal, diagonal]
            g_columns = -g_W / scales
            return loss, np.array([g_columns[tied[j]].sum() for j in free])

        result = minimize(
            loss_and_grad,
            np.array(x0),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": MAX_ITER},
        )
        x = result.x if result.fun <= loss_and_grad(np.array(x0))[0] else np.array(x0)
        found = encoding.bandwidth_from_scales(scales_of(x))
        for j in range(len(found)):
            if encoding.kinds[j] != CONTINUOUS:
                found[j] = np.clip(found[j], *encoding.lam_range(j))
        return found
