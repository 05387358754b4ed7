r"""A learned monotone warp of each input: a variable bandwidth for the attention kernel.

Each standardized feature :math:`z` is mapped through a continuous, increasing, piecewise
linear function with knots :math:`t_0 < \dots < t_P` (quantiles of the training inputs)
and one positive slope :math:`e^{\beta_p}` per piece,

.. math::

    \phi(z) = t_0 + \sum_{p=0}^{P-1} e^{\beta_p}\, \lambda_p(z), \qquad
    \lambda_p(z) = \min(\max(z, t_p), t_{p+1}) - t_p,

where the first piece extends to :math:`-\infty` and the last to :math:`+\infty` (their
:math:`\lambda` are unbounded on that side): outside the training range the warp continues
with the slope of its end piece. All slopes 1 (:math:`\beta = 0`) is the identity. A Gaussian
kernel of width :math:`h` on the warped input is, near :math:`z`, a Gaussian kernel of width
:math:`h / \phi'(z)` on the input itself: a bandwidth that varies along each feature (narrow
where the function changes fast, wide where it is flat) and is learned with the rest of the
kernel. The weights stay a softmax of the logits: the estimate is still Nadaraya–Watson.

:math:`\phi` is linear in the slopes, :math:`\phi(z) = t_0 + \Lambda(z)\, e^{\beta}`, so the
gradient of a loss with respect to :math:`\beta_p` is
:math:`e^{\beta_p} \sum_i \lambda_p(z_i)\, \partial L/\partial \phi(z_i)`.
"""

import numpy as np


def quantile_knots(Z, n_pieces):
    """Knots ``(n_features, n_pieces + 1)`` at evenly spaced quantiles of each column of
    ``Z`` (its distinct values, so that repeated inputs do not pile knots up)."""
    levels = np.linspace(0.0, 1.0, n_pieces + 1)
    return np.stack([np.quantile(np.unique(column), levels) for column in Z.T])


def warp_basis(Z, knots):
    r"""The lengths :math:`\lambda_p(z)`, shape (n, n_features, n_pieces): the warp is
    ``knots[:, 0] + basis @ slopes`` per feature."""
    Z = np.asarray(Z, dtype=float)
    lower, upper = knots[:, :-1], knots[:, 1:]
    clipped = np.minimum(np.maximum(Z[:, :, None], lower), upper)
    # The end pieces are unbounded outward: beyond the knots the warp keeps their slope.
    clipped[:, :, 0] = np.minimum(Z, upper[:, 0])
    clipped[:, :, -1] = np.maximum(Z, lower[:, -1]) if knots.shape[1] > 2 else Z
    return clipped - lower


#: Log-slopes are read within ± this: a trial step of the optimizer can reach log-slopes
#: whose exponential overflows, where a slope of e^20 (5e8, on standardized inputs) already
#: leaves every key alone in its kernel; the loss there is finite and the step is cut back
#: (a wider limit lets the weights of such a trial underflow at every key).
LOG_SLOPE_LIMIT = 20.0


def _slopes(log_slopes):
    return np.exp(np.clip(log_slopes, -LOG_SLOPE_LIMIT, LOG_SLOPE_LIMIT))


def apply_warp(basis, knots, log_slopes):
    """The warped inputs ``(n, n_features)`` from :func:`warp_basis` and the log-slopes
    ``(n_features, n_pieces)``."""
    return knots[:, 0] + np.einsum("idp,dp->id", basis, _slopes(log_slopes))


def warp_gradient(basis, log_slopes, grad_inputs):
    """The gradient with respect to the log-slopes from the one with respect to the warped
    inputs ``(n, n_features)``."""
    return _slopes(log_slopes) * np.einsum("idp,id->dp", basis, grad_inputs)


class InputWarp:
    """A fitted warp of the inputs, as a kernel applies it before comparing them: every
    feature standardized with the kernel's ``center`` and ``input_scale``, warped with
    ``knots`` and ``log_slopes`` (:func:`apply_warp`), and returned in the units of the
    inputs, ``c + σ φ((x − c)/σ)``."""

    def __init__(self, center, input_scale, knots, log_slopes):
        self.center = np.asarray(center, dtype=float)
        self.input_scale = np.asarray(input_scale, dtype=float)
        self.knots = np.asarray(knots, dtype=float)
        self.log_slopes = np.asarray(log_slopes, dtype=float)

    def transform(self, X):
        """The warped inputs of ``X`` (n, n_features), in the units of ``X``."""
        with np.errstate(over="ignore", invalid="ignore"):
            Z = (np.asarray(X, dtype=float) - self.center) / self.input_scale
            warped = apply_warp(warp_basis(Z, self.knots), self.knots, self.log_slopes)
            return self.center + self.input_scale * warped
