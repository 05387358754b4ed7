r"""A row's own share of the interpolated moments, and the in-sample and left-out fits
it gives.

**Leave-one-out.** Row :math:`i`'s own contribution to the interpolated sums at
:math:`x_i` is known in closed form (:func:`own_moments`): its two bins, through the
kernel taps at :math:`0` and :math:`\pm\delta`, interpolated back with the same
fractions. Subtracting it removes the row from the binned data exactly, so the left-out
fit at every row costs :math:`O(1)` after the :math:`O(G \log G)` sums:
:math:`O(G \log G + n)` per bandwidth, not :math:`O(n^2)`
(:func:`~kernattn.smoother._binned.statistics.row_statistics`). The trace of the smoother
matrix comes from the same own moments.
"""

import math

import numpy as np

from kernattn.smoother._binned.solve import solve_columns


def own_moments(fraction, ratio, exponents):
    r"""A row's own contribution to the interpolated moments at its own position, per unit
    weight (and per unit target for the value moments).

    Binned to :math:`g_k, g_{k+1}` with fractions :math:`1-t, t`, passed through the taps
    at :math:`0, \pm\delta` and interpolated back with the same fractions, a row adds, per
    axis, :math:`o_0 = (1-t)^2 + t^2 + 2t(1-t)K(\rho)` to :math:`S_0` and
    :math:`o_r = 2t(1-t)K(\rho)\rho^r` to the even moments (:math:`\rho = \delta/h`; odd
    moments cancel); in 2-D the product over the axes. At a grid point (:math:`t = 0`) it
    is the kernel's value at 0 times the row's moments, as without binning.

    Parameters
    ----------
    fraction : ndarray of shape (d, n)
        The rows' fractional positions in their cells, per axis.
    ratio : ndarray of shape (d,)
        :math:`\delta_a / h_a`.
    exponents : ndarray of shape (Q, d)

    Returns
    -------
    ndarray of shape (Q, n)

    Examples
    --------
    >>> from kernattn.smoother._binned.exponents import moment_exponents
    >>> own_moments(np.array([[0.0, 0.5]]), np.array([0.1]), moment_exponents(1, 1))
    array([[1.        , 0.99750624],
           [0.        , 0.        ],
           [0.        , 0.00497506]])
    """
    d, n = fraction.shape
    out = np.ones((len(exponents), n))
    for a in range(d):
        t = fraction[a]
        cross = 2.0 * t * (1.0 - t) * math.exp(-0.5 * ratio[a] ** 2)
        per_power = {}
        for r in np.unique(exponents[:, a]):
            if r % 2:
                per_power[r] = np.zeros(n)
            elif r == 0:
                per_power[r] = (1.0 - t) ** 2 + t**2 + cross
            else:
                per_power[r] = cross * ratio[a] ** r
        for k, e in enumerate(exponents):
            out[k] *= per_power[e[a]]
    return out


def in_sample_fit(sums, S, T, own_basis):
    """The in-sample estimate (t, b) and the trace term first_row · o (b,) at points."""
    coef, first = solve_columns(S, T, sums.degree, sums.grid.n_dims)
    return coef[0], np.einsum("pb,pb->b", first, own_basis)


def left_out_fit(sums, S_out, T, own_basis, weight):
    r"""The left-out fit at points whose own moments are already removed from ``S_out``
    (but not from ``T``): :math:`\hat y_{-i} = \alpha - \gamma\,y_i` (centered targets),
    returned as α (t, b), γ (b,) and the points resolved (elsewhere α = γ = 0)."""
    d = sums.grid.n_dims
    resolved = S_out[0] > sums.resolution
    alpha = np.zeros((T.shape[1], S_out.shape[1]))
    gamma = np.zeros(S_out.shape[1])
    coef, first = solve_columns(S_out[:, resolved], T[..., resolved], sums.degree, d)
    alpha[:, resolved] = coef[0]
    gamma[resolved] = weight[resolved] * np.einsum("pb,pb->b", first, own_basis[:, resolved])
    return alpha, gamma, resolved
