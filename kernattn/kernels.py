r"""Smoothing kernels as log-kernels (logits) of the scaled distance.

Every kernel here is radial in the bandwidth-scaled inputs: with :math:`u = (x - x')/h`
(per-feature bandwidth :math:`h`) and :math:`r^2 = \|u\|^2`,

====================  =============================================  ==================
kernel                :math:`\kappa(r)` (unnormalized)               support
====================  =============================================  ==================
``"gaussian"``        :math:`\exp(-r^2/2)`                           all of R^d
``"epanechnikov"``    :math:`1 - r^2`                                :math:`r < 1`
``"tricube"``         :math:`(1 - r^3)^3`                            :math:`r < 1`
====================  =============================================  ==================

Normalizing constants cancel in the Nadaraya–Watson ratio, so only the logit
:math:`\log\kappa` matters. For the Gaussian kernel, :math:`h` is the kernel's standard
deviation in each feature's own units (the convention of statsmodels' ``KernelReg``).

**Outside the support.** A compact kernel gives a query with no key inside its support only
zeros, and the Nadaraya–Watson ratio would be 0/0. Here the logit outside the support is
:math:`-10^6\, r^2` instead of :math:`-\infty`: it is far below every logit inside the
support (those are at least about −37 in float64), so it contributes exactly 0 whenever
some key is inside; when none is, the softmax over these logits puts all the weight on the
nearest key (the mean over exact ties). So a query outside the data's reach gets the target
of its nearest training point, the same limit the Gaussian kernel has for a far query.
"""

import numpy as np

__all__ = ["KERNELS", "squared_distances", "log_kernel", "kernel_logits"]

KERNELS = ("gaussian", "epanechnikov", "tricube")

# Logit slope outside a compact support, see the module docstring.
OUTSIDE_SLOPE = 1e6


def squared_distances(Q, K, *, K_sq=None):
    """Squared Euclidean distances ``‖q_i − k_j‖²`` as ``‖q‖² + ‖k‖² − 2 qᵀk``.

    The expansion costs one matrix product; it loses precision when the points are far from
    the origin compared with their distances, so callers center the data first. Rounding
    can make the expansion slightly negative; it is clipped at 0.

    Parameters
    ----------
    Q : ndarray of shape (m, d)
    K : ndarray of shape (n, d)
    K_sq : ndarray of shape (n,), optional
        Precomputed ``‖k_j‖²``.
    """
    if K_sq is None:
        K_sq = np.einsum("ij,ij->i", K, K)
    Q_sq = np.einsum("ij,ij->i", Q, Q)
    r2 = Q @ K.T
    r2 *= -2.0
    r2 += Q_sq[:, None]
    r2 += K_sq[None, :]
    np.maximum(r2, 0.0, out=r2)
    return r2


def _check_kernel(kernel):
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, KERNELS))}; got {kernel!r}")


def log_kernel(r2, kernel="gaussian"):
    r"""The logit :math:`\log\kappa` as a function of the scaled squared distance ``r2``.

    Finite everywhere: outside a compact support it is :math:`-10^6 r^2` (see the module
    docstring for why).

    Examples
    --------
    >>> log_kernel(np.array([1.0, 4.0]))
    array([-0.5, -2. ])
    >>> log_kernel(np.array([0.19, 4.0]), "epanechnikov")
    array([-2.10721031e-01, -4.00000000e+06])
    """
    r2 = np.asarray(r2, dtype=float)
    _check_kernel(kernel)
    if kernel == "gaussian":
        return -0.5 * r2
    inside = r2 < 1.0
    r2_in = np.where(inside, r2, 0.0)
    if kernel == "epanechnikov":
        log_in = np.log1p(-r2_in)
    else:
        log_in = 3.0 * np.log1p(-(r2_in**1.5))
    return np.where(inside, log_in, -OUTSIDE_SLOPE * r2)


def log_kernel_derivative(r2, kernel="gaussian"):
    r"""Derivative of :func:`log_kernel` with respect to ``r2`` (for bandwidth gradients)."""
    r2 = np.asarray(r2, dtype=float)
    _check_kernel(kernel)
    if kernel == "gaussian":
        return np.full_like(r2, -0.5)
    inside = r2 < 1.0
    r2_in = np.where(inside, r2, 0.0)
    if kernel == "epanechnikov":
        d_in = -1.0 / (1.0 - r2_in)
    else:
        r3 = r2_in**1.5
        d_in = -4.5 * np.sqrt(r2_in) / (1.0 - r3)
    return np.where(inside, d_in, -OUTSIDE_SLOPE)


def kernel_logits(X, Y, bandwidth, kernel="gaussian"):
    r"""Logits :math:`\log\kappa(x_i, y_j)` between the rows of ``X`` and ``Y``.

    Parameters
    ----------
    X : array_like of shape (m, d)
    Y : array_like of shape (n, d)
    bandwidth : float or array_like of shape (d,)
        Positive; one entry per feature, or one for all.
    kernel : {"gaussian", "epanechnikov", "tricube"}

    Returns
    -------
    logits : ndarray of shape (m, n)

    Examples
    --------
    >>> kernel_logits([[0.0, 0.0]], [[1.0, 0.0], [0.0, 2.0]], bandwidth=[1.0, 2.0])
    array([[-0.5, -0.5]])
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    h = np.broadcast_to(np.asarray(bandwidth, dtype=float), (X.shape[1],))
    if not np.all(h > 0):
        raise ValueError(f"bandwidth must be positive; got {bandwidth!r}")
    # Center on Y's mean: distances are translation invariant, the expansion is not.
    center = Y.mean(axis=0) if Y.shape[0] else 0.0
    return log_kernel(squared_distances((X - center) / h, (Y - center) / h), kernel)
