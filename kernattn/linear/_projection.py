r"""The leave-one-out objective of a learned input projection, evaluated through the features.

The kernel is the Gaussian :math:`\exp(-\tfrac12\|P^\top(x - x')\|^2)` of a linear input map
:math:`P` (shape (d, p)), estimated with positive random features of :math:`u = P^\top (x - c)`:
query features :math:`a_i \propto \exp(\Omega u_i)` and key features
:math:`b_i \propto s_i \exp(\Omega u_i - \|u_i\|^2)` (the FAVOR+ factor
:math:`e^{-\|u\|^2/2}` and the Gaussian key factor :math:`e^{-\|u\|^2/2}` of
:math:`-\tfrac12\|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2`; the query's own
factors cancel). The leave-one-out estimate at training point :math:`i` takes its own group
:math:`G_i` of identical inputs out of the sums,

.. math::

    \hat y_{-i} = \frac{a_i^\top (S - \sum_{k \in G_i} b_k y_k^\top)}
                       {a_i^\top (z - \sum_{k \in G_i} b_k)}, \qquad
    S = \sum_k b_k y_k^\top, \quad z = \sum_k b_k,

so the loss :math:`L = \sum_i s_i \|\hat y_{-i} - y_i\|^2 / \sum_i s_i` costs O(n r d), linear
in n. Identical inputs have proportional key features, :math:`b_k = (s_k/s_i)\, b_i`, so the
left-out sums are :math:`(a_i^\top b_i)\,[\sum_{G_i} s_k y_k,\ \sum_{G_i} s_k] / s_i`.

With :math:`e_i = \hat y_{-i} - y_i`, :math:`D_i` the left-out denominator,
:math:`g_i = 2 s_i e_i / (D_i \sum s)` and :math:`h_i = \hat y_i^\top g_i`, the differential is

.. math::

    dL = \sum_i da_i^\top (S g_i - h_i z) + \sum_k db_k^\top (M y_k - A^\top h)
         + \sum_i \rho_i\, d(a_i^\top b_i),

with :math:`M = A^\top G` and :math:`\rho_i` the coefficient of the left-out group's sums;
:math:`d\log a_{ij} = \omega_j^\top du_i` (up to a per-query term that cancels),
:math:`d\log b_{ij} = (\omega_j - 2u_i)^\top du_i` and :math:`du_i = dP^\top (x_i - c)`. The
per-query maximum and the global key constant subtracted for stability leave :math:`L`
unchanged, so they are constants for the gradient. This is metric learning for kernel
regression (Weinberger & Tesauro, 2007) with the exact kernel sums replaced by feature sums.

References
----------
.. [1] K. Q. Weinberger, G. Tesauro, "Metric Learning for Kernel Regression", AISTATS 2007.
.. [2] K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
"""

import numpy as np
from scipy.optimize import minimize

from kernattn._core.loo import DuplicateGroups
from kernattn._core.sums import row_shift

# L-BFGS iterations for the projection; each costs a few O(n r d) passes.
MAX_ITER = 60


class FeatureLeaveOneOut:
    """Leave-one-out loss of the feature estimate, and its gradient, as functions of ``P``.

    Parameters
    ----------
    Z : ndarray of shape (n, d)
        Centered inputs :math:`x_i - c`.
    V : ndarray of shape (n, t)
        Targets (centered here on their weighted mean).
    sample_weight : ndarray of shape (n,)
        Positive.
    omega : ndarray of shape (r, p)
        The frequencies of the positive features as they multiply :math:`u` (``[Ω; −Ω]``
        for hyperbolic features, :math:`B\\Omega` for generalised ones: the map's
        ``scaled_omega_``).
    log_offset : ndarray of shape (r,), optional
        The per-feature constant of the log features (the map's ``log_offset_``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Z, V = rng.standard_normal((20, 2)), rng.standard_normal((20, 1))
    >>> objective = FeatureLeaveOneOut(Z, V, np.ones(20), rng.standard_normal((8, 2)))
    >>> loss, gradient = objective.loss_and_grad(np.eye(2).ravel())
    >>> bool(loss > 0), gradient.shape
    (True, (4,))
    """

    def __init__(self, Z, V, sample_weight, omega, log_offset=None):
        self.Z = Z
        self.V = V - np.average(V, axis=0, weights=sample_weight)
        self.sw = sample_weight
        self.log_sw = np.log(sample_weight)
        self.omega = omega
        self.log_offset = np.zeros(len(omega)) if log_offset is None else log_offset
        self.total = sample_weight.sum()
        # A query's exact duplicates are left out with it (as in the exact leave-one-out):
        # otherwise a repeated row would see its twin and integer weights would not act as
        # repeats.
        group_weight, group_values = DuplicateGroups(Z).own_sums(sample_weight, self.V)
        self.own_weight = group_weight / sample_weight
        self.own_values = group_values / sample_weight[:, None]

    def loss_and_grad(self, flat_projection):
        """Loss and gradient at ``P`` (flattened); ``(inf, 0)`` where a trial ``P``
        overflows the features, so that the line search backs off."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            loss, grad = self._loss_and_grad(flat_projection)
        if not (np.isfinite(loss) and np.all(np.isfinite(grad))):
            return np.inf, np.zeros_like(flat_projection)
        return loss, grad

    def _loss_and_grad(self, flat_projection):
        d = self.Z.shape[1]
        P = flat_projection.reshape(d, -1)
        U = self.Z @ P
        sq = np.einsum("ij,ij->i", U, U)
        logits = U @ self.omega.T + self.log_offset
        log_a = logits - row_shift(logits)[:, None]
        log_b = logits - sq[:, None] + self.log_sw[:, None]
        log_b -= row_shift(log_b, axis=None)
        A, B = np.exp(log_a), np.exp(log_b)
        V = self.V
        S, z = B.T @ V, B.sum(axis=0)
        AB = A * B
        own = AB.sum(axis=1)
        full = A @ z
        # Positive features: the sum over the other keys is positive; guard the rounding
        # when the query's own group carries nearly all of its weight.
        D = np.maximum(full - own * self.own_weight, np.maximum(1e-12 * full, 1e-300))
        Yhat = (A @ S - own[:, None] * self.own_values) / D[:, None]
        E = Yhat - V
        loss = self.sw @ np.einsum("ij,ij->i", E, E) / self.total
        G = (2.0 / self.total) * (self.sw / D)[:, None] * E
        h = np.einsum("ij,ij->i", Yhat, G)
        # Coefficient of d(a_iᵀb_i): (w_i ŷ_i − m_i)ᵀ g_i with the left-out group's sums.
        rho = np.einsum("ij,ij->i", self.own_weight[:, None] * Yhat - self.own_values, G)
        Ca = A * (G @ S.T - h[:, None] * z[None, :]) + AB * rho[:, None]
        Cb = B * (V @ (A.T @ G).T - (A.T @ h)[None, :]) + AB * rho[:, None]
        grad_U = (Ca + Cb) @ self.omega - 2.0 * U * Cb.sum(axis=1)[:, None]
        return float(loss), (self.Z.T @ grad_U).ravel()


def learn_projection(Z, V, sample_weight, omega, initial, log_offset=None, max_iter=MAX_ITER):
    """Minimize the feature leave-one-out loss over ``P`` from ``initial`` (L-BFGS).

    Parameters
    ----------
    Z, V, sample_weight, omega, log_offset
        As in :class:`FeatureLeaveOneOut`.
    initial : ndarray of shape (d, p)
        The starting projection (``diag(1/h)`` for the Gaussian kernel of bandwidth h).
    max_iter : int, default=60
        L-BFGS iterations.

    Returns
    -------
    projection : ndarray of shape (d, p)
    loss : float
        The leave-one-out mean squared error reached (never worse than at ``initial``: the
        start is kept if the optimizer does not improve on it).
    """
    objective = FeatureLeaveOneOut(Z, V, sample_weight, omega, log_offset)
    start_loss, _ = objective.loss_and_grad(initial.ravel())
    result = minimize(
        objective.loss_and_grad,
        initial.ravel(),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter},
    )
    if not np.isfinite(result.fun) or result.fun > start_loss:
        return initial.copy(), float(start_loss)
    return result.x.reshape(initial.shape), float(result.fun)
