r"""Learning the input projection of ``LinearAttentionRegressor`` through its feature map.

The kernel is the Gaussian :math:`\exp(-\tfrac12\|P^\top(x - x')\|^2)`, estimated with positive
random features of :math:`u = P^\top (x - c)`: query features
:math:`a_i \propto \exp(\Omega u_i)` and key features
:math:`b_i \propto s_i \exp(\Omega u_i - \|u_i\|^2)` (the FAVOR+ factor and the Gaussian key
factor :math:`e^{-\|u\|^2/2}` each). The leave-one-out estimate at training point :math:`i`
removes its own key from the sums,

.. math::

    \hat y_{-i} = \frac{a_i^\top (S - b_i y_i^\top)}{a_i^\top (z - b_i)}, \qquad
    S = \sum_k b_k y_k^\top, \quad z = \sum_k b_k,

so the loss :math:`L = \sum_i s_i \|\hat y_{-i} - y_i\|^2 / \sum_i s_i` costs O(n r d), linear
in n. With :math:`e_i = \hat y_{-i} - y_i`, :math:`D_i = a_i^\top(z - b_i)`,
:math:`g_i = 2 s_i e_i / (D_i \sum s)`, the differential is

.. math::

    dL = \sum_i da_i^\top (S - z \hat y_i^\top) g_i
         + \sum_k db_k^\top \big(M y_k - A^\top h\big)
         + \sum_i (e_i^\top g_i)\, d(a_i^\top b_i),

with :math:`M = A^\top G`, :math:`h_i = \hat y_i^\top g_i`; and
:math:`d\log a_{ij} = \omega_j^\top du_i` (up to a per-query term that cancels),
:math:`d\log b_{ij} = (\omega_j - 2u_i)^\top du_i`, :math:`du_i = dP^\top (x_i - c)`. The
per-query maximum and the global key constant used for stability leave :math:`L` unchanged,
so they are constants for the gradient.
"""

import numpy as np
from scipy.optimize import minimize

# L-BFGS iterations for the projection; each costs a few O(n r d) passes.
_MAX_ITER = 60


class FeatureLeaveOneOut:
    """Leave-one-out loss and gradient of the projection ``P`` (shape (d, p)).

    Parameters
    ----------
    Z : ndarray of shape (n, d)
        Centred inputs.
    V : ndarray of shape (n, t)
        Targets.
    sample_weight : ndarray of shape (n,)
        Positive.
    omega : ndarray of shape (r, p)
        The frequencies of the positive features (``[Ω; −Ω]`` for hyperbolic ones; scaled
        by B for generalised ones).
    log_offset : ndarray of shape (r,), optional
        Per-feature log-offset of the features (generalised features).
    """

    def __init__(self, Z, V, sample_weight, omega, log_offset=None):
        self.Z = Z
        self.V = V - np.average(V, axis=0, weights=sample_weight)
        self.sw = sample_weight
        self.log_sw = np.log(sample_weight)
        self.omega = omega
        self.log_offset = np.zeros(len(omega)) if log_offset is None else log_offset
        self.total = sample_weight.sum()
        # Exact duplicates of a query are left out with it (as in the exact leave-one-out):
        # otherwise a repeated row would see its twin and integer weights would not act as
        # repeats. Identical inputs have proportional key features, b_k = (s_k/s_i) b_i, so
        # the left-out sums are (a_iᵀb_i)·[Σ_G s_k y_k, Σ_G s_k] / s_i over the group G.
        _, groups = np.unique(Z, axis=0, return_inverse=True)
        groups = groups.ravel()
        group_weight = np.bincount(groups, weights=sample_weight)
        group_values = np.zeros((groups.max() + 1, self.V.shape[1]))
        np.add.at(group_values, groups, sample_weight[:, None] * self.V)
        self.own_weight = group_weight[groups] / sample_weight
        self.own_values = group_values[groups] / sample_weight[:, None]

    def loss_and_grad(self, flat_projection):
        """Loss and gradient; ``(inf, 0)`` where a trial projection overflows the features."""
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
        log_a = logits - logits.max(axis=1, keepdims=True)
        log_b = logits - sq[:, None] + self.log_sw[:, None]
        log_b -= log_b.max()
        A, B = np.exp(log_a), np.exp(log_b)
        V = self.V
        S, z = B.T @ V, B.sum(axis=0)
        AB = A * B
        own = AB.sum(axis=1)
        full = A @ z
        # Positive features: the sum over the other keys is positive; guard the rounding
        # when the query's own key carries nearly all of its weight.
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


def learn_projection(Z, V, sample_weight, omega, initial, log_offset=None):
    """Minimise the feature leave-one-out loss over ``P`` from ``initial`` (L-BFGS).

    Returns
    -------
    projection : ndarray of shape (d, p)
    loss : float
        The leave-one-out mean squared error reached (never worse than at ``initial``).
    """
    objective = FeatureLeaveOneOut(Z, V, sample_weight, omega, log_offset)
    start_loss, _ = objective.loss_and_grad(initial.ravel())
    result = minimize(
        objective.loss_and_grad,
        initial.ravel(),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": _MAX_ITER},
    )
    if not np.isfinite(result.fun) or result.fun > start_loss:
        return initial.copy(), float(start_loss)
    return result.x.reshape(initial.shape), float(result.fun)
