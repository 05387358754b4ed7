r"""The binning error bound and the grid rule it gives.

**Error bound and grid rule.** Binning moves each key by at most :math:`\delta`, keeping
its mean; interpolation does the same to the query. Each changes a key's contribution
:math:`F(x_j - q)` to a sum by :math:`\tfrac12 t(1-t)\delta^2 F'' \le \tfrac18\delta^2 F''`
(per axis). Writing the change of the estimate as :math:`\sum_j \Delta l_j r_j`, with
:math:`l_j` the equivalent weights and :math:`r_j` the residuals about the local fit
(both sets of weights reproduce constants), Cauchy–Schwarz against the kernel weights and
a locally uniform design (the equivalent kernel :math:`L_p = K P_p`) give

.. math::

    |\hat y_{\text{binned}}(q) - \hat y(q)| \;\lesssim\; C_{p,d}\,
    \max_a (\delta_a/h_a)^2\; s(q), \qquad
    C_{p,d} = \tfrac14 \sqrt{E_K\big[(\Delta L_p / K)^2\big]},

where :math:`s(q)` is the kernel-weighted root mean square of :math:`y_j - \hat y(q)`
(the local spread of :math:`y`, noise and signal; the standard deviation of :math:`y`
bounds it in practice) and :math:`\Delta` the Laplacian in :math:`u`. In the interior,
:math:`C = \sqrt{2d}/4` for :math:`p \le 1`; at the data's edge the equivalent kernel is
the boundary kernel and the constant grows, so :func:`error_constant` takes the worst of
interior, edge and corner: 0.354, 0.973, 2.42, 6.02 for :math:`p = 0..3` in 1-D, 0.5 and
1.76 for :math:`p = 0, 1` in 2-D. The bound is a first-order one (in
:math:`(\delta/h)^2`), worst-case in the positions within a cell; random positions and
noise average the binning part down (on held-out queries of the tests the largest error
is 0.1–0.75 of the bound and the median 0.01–0.13, by degree). Beyond the
data's range the local polynomial extrapolates and every error grows with the distance.
To keep the error below a tolerance :math:`\epsilon` relative to the spread of :math:`y`
the grid takes :math:`h/\delta \ge \sqrt{C_{p,d}/\epsilon}` points per bandwidth
(:func:`points_per_bandwidth`: 31 in 1-D and 42 in 2-D for local lines at the default
:data:`TOLERANCE` of 1e-3, 19 and 22 for local constants). :func:`binning_error` reports
the bound of a given grid; :func:`~kernattn.smoother._binned.cost.choose_algorithm`
weighs the binned cost against the exact one (``"auto"``).
"""

import math
from functools import lru_cache
from itertools import product

import numpy as np

from kernattn.smoother._binned.checks import check_bandwidth, check_degree
from kernattn.smoother._binned.exponents import basis_exponents

#: Default bound on the binning error, relative to the spread of the targets.
TOLERANCE = 1e-3


def _equivalent_kernel_constant(degree, n_dims, half):
    """¼ √E[(ΔL/K)²] for the design on the whole line (or the half-line u ≥ 0 along the
    axes in ``half``): Gauss–Legendre quadrature on [−12, 12] (or [0, 12]), where the
    Gaussian weight leaves nothing above rounding."""
    basis = basis_exponents(degree, n_dims)
    x, w = np.polynomial.legendre.leggauss(160)
    axes_nodes, axes_weights = [], []
    for a in range(n_dims):
        lo = 0.0 if half[a] else -12.0
        nodes = lo + (x + 1.0) * (12.0 - lo) / 2.0
        weights = w * np.exp(-0.5 * nodes**2)
        axes_nodes.append(nodes)
        axes_weights.append(weights / weights.sum())
    u = np.stack([m.ravel() for m in np.meshgrid(*axes_nodes, indexing="ij")], axis=1)
    weight = np.prod(np.meshgrid(*axes_weights, indexing="ij"), axis=0).ravel()

    def monomial(e):
        e = np.asarray(e)
        return np.zeros(len(u)) if np.any(e < 0) else np.prod(u**e, axis=1)

    U = np.stack([monomial(e) for e in basis], axis=1)
    coef = np.linalg.solve((U * weight[:, None]).T @ U, np.eye(len(basis))[:, 0])
    laplacian = np.zeros(len(u))  # ΔL/K for L = K·Σ coef_e u^e
    for c, e in zip(coef, basis, strict=True):
        for a in range(n_dims):
            unit = np.eye(n_dims, dtype=int)[a]
            d1 = e[a] * monomial(e - unit)
            d2 = e[a] * (e[a] - 1) * monomial(e - 2 * unit)
            laplacian += c * (d2 - 2.0 * u[:, a] * d1 + (u[:, a] ** 2 - 1.0) * monomial(e))
    return 0.25 * float(np.sqrt(np.sum(weight * laplacian**2)))


@lru_cache
def _error_constant(degree, n_dims):
    return max(
        _equivalent_kernel_constant(degree, n_dims, half)
        for half in product((False, True), repeat=n_dims)
    )


def error_constant(degree, n_dims):
    r"""The constant :math:`C_{p,d}` of the binning error bound (module docstring).

    :math:`C = \tfrac14\sqrt{E[(\Delta L_p/K)^2]}` under the Gaussian kernel, where
    :math:`L_p = K P_p` is the equivalent kernel of the local polynomial of degree
    :math:`p` (:math:`P_p(u) = e_0^\top M^{-1} U(u)`, :math:`M = E[U U^\top]`) and
    :math:`\Delta` the Laplacian, for a query in the interior of a locally uniform design
    and at its edge or corner (the design on a half-line along some axes); the largest of
    these, so that the bound holds anywhere within the data's range.

    ======  ==============  ==============  ==============  ==============
    d       p = 0           p = 1           p = 2           p = 3
    ======  ==============  ==============  ==============  ==============
    1       0.354           0.973 (edge)    2.42 (edge)     6.02 (edge)
    2       0.500           1.76 (corner)   5.08 (corner)   13.4 (corner)
    ======  ==============  ==============  ==============  ==============

    In the interior :math:`C = \sqrt{2d}/4` for :math:`p \le 1`.

    Examples
    --------
    >>> round(error_constant(0, 1), 4), round(error_constant(1, 1), 3)
    (0.3536, 0.973)
    """
    return _error_constant(check_degree(degree), int(n_dims))


def points_per_bandwidth(degree, n_dims, tol=TOLERANCE):
    r"""Grid points per bandwidth, :math:`h/\delta = \sqrt{C_{p,d}/\epsilon}`, that keep the
    binning error bound below ``tol`` (relative to the spread of the targets).

    Examples
    --------
    >>> round(points_per_bandwidth(1, 1), 1)
    31.2
    """
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive float; got {tol!r}")
    return math.sqrt(error_constant(degree, n_dims) / tol)


def binning_error(spacing, bandwidth, degree=0):
    r"""The bound :math:`C_{p,d}\max_a(\delta_a/h_a)^2` on the binned estimate's error,
    relative to the local spread of the targets (module docstring).

    Examples
    --------
    >>> float(binning_error([0.01], [0.2], degree=1))
    0.00243
    """
    spacing = np.atleast_1d(np.asarray(spacing, dtype=float))
    h = check_bandwidth(bandwidth, len(spacing))
    ratio = np.max(spacing / h)
    return error_constant(degree, len(spacing)) * float(ratio) ** 2
