r"""The bandwidth criterion's blocks for a local polynomial of degree ≥ 1: the fit of each
query (about the point its monomials are taken about), its leave-one-out or in-sample error,
and the analytic gradient in the log-bandwidths, with central differences for the rows the
local polynomial holds back.

:class:`PolynomialBlocks` is the part of :class:`~kernattn.bandwidth._criterion.Criterion`
that a local polynomial adds to the local constant's tiled sums. It reads the criterion's
training set (``X`` centered, ``Y`` in target units, ``sw``, ``n``, ``line``, ``degree``,
``loo``, ``precision``, ``profile``) and asks it for a block's kernel weights
(``_weights``, ``_kernel``, ``_shifted``, ``_log_kernel_slope``), the keys' columns
(``_columns``) and the residuals (``_residuals``). The mathematics of the fit itself is
:mod:`kernattn._local.polynomial`'s.
"""

import numpy as np

from kernattn._local.polynomial import (
    anchor_groups,
    anchor_order,
    key_residuals,
    weighted_polynomial_fit,
)

#: Entries per (queries × keys) array of a block of the criterion.
BLOCK_ENTRIES = 2**18
# The step (in log-bandwidth) of the central differences that give the gradient of the
# rows a local polynomial holds back: their ridge follows the weights, which the analytic
# formula does not see. Truncation error about 1e-6 of their share of the gradient, the
# rounding of a held-back fit (about 1e-6 of its shrinkage, SQUARED_FLOOR) about 1e-3.
HELD_BACK_STEP = 1e-3


def expanded_squares(Q, plain, first, second):
    r""":math:`\sum_j c_j (q - k_j)^2` per feature from the sums :math:`\sum_j c_j`,
    :math:`\sum_j c_j k_j` and :math:`\sum_j c_j k_j^2` (``plain``, ``first``, ``second``):
    :math:`q^2 \sum c - 2 q \sum c k + \sum c k^2`."""
    return Q**2 * plain - 2.0 * Q * first + second


def perturbed_distances(Q, K, factors):
    """Squared distances of the queries ``Q`` (k, d) to the keys ``K`` (n, d) with feature
    ``f``'s squared differences multiplied by ``1 + c`` for each ``c`` in ``factors``: rows
    (f, c, query), shape (d · len(factors) · k, n)."""
    k, d = Q.shape
    squares = (Q[:, None, :] - K[None, :, :]) ** 2  # (k, n, d)
    base = squares.sum(axis=2)
    r2 = base[None, None] + squares.transpose(2, 0, 1)[:, None] * factors[None, :, None, None]
    return r2.reshape(d * len(factors) * k, len(K))


class PolynomialBlocks:
    """The local polynomial's blocks of a bandwidth criterion (see the module docstring)."""

    def _polynomial_fit(self, E, columns, Q):
        """The local polynomial of a block from its kernel weights ``E`` (rows × keys) and
        its normalizing sums (:func:`~kernattn._local.polynomial.weighted_polynomial_fit`)."""
        t = self.Y.shape[1]
        return weighted_polynomial_fit(E, columns, Q, t, self.degree, self.precision)

    def _polynomial_block(self, K, K_aug, columns, rows, factor, gradient, r2, powers, weights):
        """:meth:`_block` for a local polynomial of ``degree ≥ 1`` (whole rows of weights).

        The fit is the estimator's (held back where its local design cannot support it).
        The gradient is analytic, :math:`\\partial\\hat y_i/\\partial\theta_f = \\sum_j
        l_{ij}\\gamma_{ijf} e_{ij}` with :math:`e_{ij}` the residual of key :math:`j` from
        query :math:`i`'s fitted polynomial, except for the rows held back: their ridge
        follows the weights, and their share of the gradient is a central difference of
        their fits in the log-bandwidths (a few rows, each against every key).
        """
        d = K.shape[1]
        t = self.Y.shape[1]
        index = np.arange(self.n)[rows]
        r2, E, empty = self._weights(K, K_aug, rows, factor, r2, weights)
        b = len(E)
        # Each query's fit about its anchor (anchor_points), as the estimator takes it.
        mean, self_factor = np.empty((b, t)), np.empty(b)
        held_back, S0 = np.empty(b, dtype=bool), np.empty(b)
        fits = []
        Q = K[rows][:, self.line]
        for anchor, group, group_columns in self._anchored(K, Q, columns):
            fit, S0[group] = self._polynomial_fit(E[group], group_columns, Q[group] - anchor)
            mean[group], self_factor[group], held_back[group] = (
                fit.mean,
                fit.self_factor,
                fit.held_back,
            )
            fits.append((anchor, group, group_columns, fit))
        residual, rss = self._residuals(rows, mean)
        s = self.sw[rows]
        trace = 0.0
        own = None
        if not self.loo:
            own = E[np.arange(b), index] / S0
            trace = (own * self_factor).sum()
        if not gradient:
            return rss, trace
        # l_ij = w_ij A_ij, and P_ij = Σ_o r_io (y_jo − m̂_io(k_j)).
        A, P = np.empty_like(E), np.empty_like(E)
        for _, group, group_columns, fit in fits:
            A[group], P[group] = key_residuals(
                fit, group_columns, residual[group], self.Y, self.degree
            )
        P *= A
        P *= E
        # A query whose left-out kernel underflowed everywhere (S0 = 0) has no gradient.
        P *= np.divide(s, S0, out=np.zeros_like(S0), where=S0 > 0)[:, None]
        parts = [P]
        if not self.loo:
            # ∂S_ii/∂θ = −w_ii Σ_j w_ij a_ij² γ_ij.
            T = E * A * A
            T *= (own / S0)[:, None]
            parts.append(T)
        stacked = parts[0] if len(parts) == 1 else np.vstack(parts)
        if self.profile != "gaussian":
            stacked *= np.tile(self._log_kernel_slope(r2, factor), (len(parts), 1))
        # A row that no key reaches has its nearest keys, which no bandwidth moves; a row
        # held back gets its share below.
        held = np.flatnonzero(held_back & ~empty)
        stacked[np.tile(empty | held_back, len(parts))] = 0.0
        stacked[~np.isfinite(stacked)] = 0.0
        # Σ_j P_ij u_ijf² with u = (q − k)/factor: q² Σ P − 2q Σ P k + Σ P k².
        if powers is None:
            powers = np.hstack([np.ones((self.n, 1)), K, K**2])
        moments = stacked @ powers
        Qs = np.tile(K[rows], (len(parts), 1))
        du = expanded_squares(Qs, moments[:, :1], moments[:, 1 : 1 + d], moments[:, 1 + d :])
        du /= factor**2
        d_rss = -2.0 * du[:b].sum(axis=0)
        d_trace = -du[b:].sum(axis=0) if not self.loo else np.zeros(d)
        for anchor, group, group_columns, _ in fits:
            here = held if isinstance(group, slice) else held[np.isin(held, group)]
            if not len(here):
                continue
            d_fit, d_own = self._held_back_derivatives(
                K, group_columns, index[here], factor, anchor
            )
            d_rss -= 2.0 * np.einsum("i,it,ift->f", s[here], residual[here], d_fit)
            if not self.loo:
                d_trace += d_own.sum(axis=0)
        return rss, trace, d_rss, d_trace

    def _anchor_order(self, K, rows):
        """The query rows (``None``: all) in the order of the points their local
        polynomials take their monomials about (:meth:`_anchored`), so that a block meets
        few of them; ``rows`` as they are where every row takes the training center. The
        criterion's sums over rows do not depend on their order."""
        if self.degree < 1:
            return rows
        index = np.arange(self.n) if rows is None else np.asarray(rows)
        order = anchor_order(K[index][:, self.line], self.degree)
        return rows if order is None else index[order]

    def _anchored(self, K, Q, columns):
        """The queries ``Q`` (a block's, in the polynomial's columns) grouped by the point
        their monomials are taken about (:func:`~kernattn._local.polynomial.anchor_groups`):
        per point, the point, the rows of its queries and the keys' columns about it
        (``columns``, the criterion's, about the training center)."""
        groups = []
        for point, rows in anchor_groups(Q, self.degree):
            about = columns
            if np.any(point):
                shifted = K.copy()
                shifted[:, self.line] -= point
                about = self._columns(shifted)
            groups.append((point, rows, about))
        return groups

    def _held_back_derivatives(self, K, columns, index, factor=1.0, anchor=0.0):
        r"""Central differences, in each log-bandwidth, of the fits (and own weights
        :math:`S_{ii}`) of the training rows ``index``: shapes (k, d, t) and (k, d).

        Only the weights move: a local polynomial does not depend on the units of its keys
        (nor does the rule that holds it back), so the keys ``K`` and their ``columns``
        stay those of the current bandwidths, and a step in :math:`\log h_f` multiplies the
        squared differences in feature :math:`f` by :math:`e^{\mp 2\delta}`. The 2d
        perturbed fits of a chunk of rows are one call. ``columns`` are the keys' about
        ``anchor`` (:meth:`_anchored`)."""
        n, d = K.shape
        t = self.Y.shape[1]
        d_fit = np.zeros((len(index), d, t))
        d_own = np.zeros((len(index), d))
        factors = np.exp(-2.0 * HELD_BACK_STEP * np.array([1.0, -1.0])) - 1.0
        chunk = max(1, BLOCK_ENTRIES // max(n * d, 1))
        for start in range(0, len(index), chunk):
            rows = index[start : start + chunk]
            k = len(rows)
            stacked = np.tile(rows, 2 * d)
            r2 = self._shifted(perturbed_distances(K[rows], K, factors), stacked)
            E, _ = self._kernel(r2, factor)
            fit, S0 = self._polynomial_fit(E, columns, K[stacked][:, self.line] - anchor)
            own = E[np.arange(len(stacked)), stacked] / S0 * fit.self_factor
            mean = fit.mean.reshape(d, 2, k, t)
            own = own.reshape(d, 2, k)
            d_fit[start : start + k] = (
                (mean[:, 0] - mean[:, 1]) / (2.0 * HELD_BACK_STEP)
            ).transpose(1, 0, 2)
            d_own[start : start + k] = ((own[:, 0] - own[:, 1]) / (2.0 * HELD_BACK_STEP)).T
        return d_fit, d_own
