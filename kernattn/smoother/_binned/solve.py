"""The local polynomial at a batch of points from its moment sums: the local fits' one solve
(:mod:`kernattn._local.cholesky`) of the normal equations, ridged."""

import numpy as np

from kernattn._local.cholesky import TINY, cholesky_factor, cholesky_solve
from kernattn.smoother._binned.exponents import basis_exponents, gaussian_moment, pair_index

#: Ridge of the local-polynomial solve, relative to the diagonal a locally uniform design
#: would give (S_0 times the kernel's moment). Far above the rounding of FFT sums (about
#: 1e-13 of them), far below anything that carries information.
RIDGE = 1e-8


def solve_columns(S, T, degree, n_dims, ridge=RIDGE, return_resolution=False):
    """:func:`solve_local_polynomial` on column-major moments: S (Q, b), T (P, t, b);
    returns coefficients (P, t, b) and first_row (P, b) (and, with ``return_resolution``, the
    design's resolution (b,), see there)."""
    basis = basis_exponents(degree, n_dims)
    P = len(basis)
    pair = pair_index(degree, n_dims)
    S0 = S[0]
    ok = S0 > 0
    scale = np.where(ok, S0, 1.0)
    inv_scale = 1.0 / scale
    mu = [gaussian_moment(2 * e) for e in basis]
    # M / S0: the pivots are O(1) wherever there is data (the first is 1).

    def entry(i, j):
        if i == j == 0:
            return None
        value = S[pair[i, j]] * inv_scale
        return value + ridge * mu[i] if i == j else value

    # Rounding (or FFT noise) can push a Schur complement below the ridge.
    floors = [TINY] + [ridge * mu[j] if ridge > 0 else TINY for j in range(1, P)]
    L = cholesky_factor(entry, P, floors)
    coefficients = cholesky_solve(L, T * inv_scale)  # (P, t, b)
    unit = [inv_scale * ok if i == 0 else np.zeros_like(S0) for i in range(P)]
    first_row = cholesky_solve(L, unit)  # (P, b)
    if not np.all(ok):
        coefficients[..., ~ok] = 0.0
        first_row[:, ~ok] = 0.0
    if not return_resolution:
        return coefficients, first_row
    # The squared pivots are the variances of each monomial about its fit on the ones before
    # (in units of a locally uniform design's).
    resolution = np.full(S0.shape, np.inf)
    for j in range(1, P):
        resolution = np.minimum(resolution, L[j][j] ** 2 / mu[j] - ridge)
    return coefficients, first_row, np.where(ok, resolution, np.inf)


def solve_local_polynomial(
    weight_moments, value_moments, degree, n_dims, *, ridge=RIDGE, return_resolution=False
):
    r"""The local polynomial at a batch of points, from its moment sums.

    Solves :math:`(M + \Lambda)\beta = T` per point, with
    :math:`M_{ij} = S_{e_i + e_j}` the weight moments in units of the bandwidth and
    :math:`\Lambda = \lambda S_0\,\mathrm{diag}(0, \mu_{2e_1}, \dots)`, where
    :math:`\mu_{2e} = E_K[u^{2e}]` is the diagonal a locally uniform design would give: a
    scale-invariant ridge that leaves the intercept free, so constants are reproduced
    exactly. Where the design cannot resolve a coefficient (all weight on one point, say)
    the ridge sets it to 0 and the fit falls back to the local constant. The solve is the
    local fits' Cholesky factorisation over the batch (:mod:`kernattn._local.cholesky`).

    Parameters
    ----------
    weight_moments : ndarray of shape (b, Q)
        :math:`S_e`, in :func:`moment_exponents` order.
    value_moments : ndarray of shape (b, P, t)
        :math:`T_e` per output, in :func:`basis_exponents` order.
    degree, n_dims : int
    ridge : float
        :math:`\lambda`.
    return_resolution : bool
        Also return the design's resolution.

    Returns
    -------
    coefficients : ndarray of shape (b, P, t)
        :math:`\beta_e`: the estimate is ``coefficients[:, 0]``; a derivative
        :math:`\partial^e m \approx e!\,\beta_e / h^e`. Rows with :math:`S_0 \le 0` (no
        weight at all) get 0.
    first_row : ndarray of shape (b, P)
        :math:`e_0^\top (M + \Lambda)^{-1}`: the equivalent weight of a key with kernel
        value :math:`k` and monomials :math:`U` is :math:`k\, \text{first\_row} \cdot U`.
    resolution : ndarray of shape (b,)
        With ``return_resolution``: the smallest squared pivot of the factorisation less the
        ridge, each divided by :math:`\mu_{2e}`: the variance of each monomial about its
        least-squares fit on the ones before it, in units of the variance a locally uniform
        design would give (1, 0.67 and 0.4 inside dense data for degrees 1 to 3; 0.36,
        0.083 and 0.017 at its edge; ``inf`` for the local constant and rows without
        weight). Near 0 the design rests on the
        kernel's far tail, where binning errors are largest relative to the weights.

    Examples
    --------
    Points 0 and 1 with targets 1 and 3, the line evaluated at 0:

    >>> S = np.array([[2.0, 1.0, 1.0]])   # Σ1, Σu, Σu²
    >>> T = np.array([[[4.0], [3.0]]])    # Σy, Σuy
    >>> coef, _ = solve_local_polynomial(S, T, 1, 1, ridge=0.0)
    >>> coef[:, :, 0]
    array([[1., 2.]])
    """
    S = np.ascontiguousarray(np.asarray(weight_moments, dtype=float).T)
    T = np.moveaxis(np.asarray(value_moments, dtype=float), 0, -1)
    solved = solve_columns(S, T, degree, n_dims, ridge, return_resolution)
    coefficients, first_row = np.moveaxis(solved[0], -1, 0), solved[1].T
    return (coefficients, first_row, solved[2]) if return_resolution else (coefficients, first_row)
