r"""Binned kernel sums: the smoother's sums on a regular grid, in one and two dimensions.

The exact smoother sums one kernel value per (query, key) pair. With one or two continuous
inputs and many rows, the keys can first be *binned* onto a regular grid, and the sums at
every grid point become a convolution of the binned columns with the kernel sampled on the
grid (Fan and Marron, 1994; Wand and Jones, 1995, appendix D; R's KernSmooth):

1. **Linear binning.** A row at :math:`x` between grid points :math:`g_k` and
   :math:`g_{k+1}` (spacing :math:`\delta`, :math:`x = g_k + t\delta`) gives the fraction
   :math:`1 - t` of its weighted columns to :math:`g_k` and :math:`t` to :math:`g_{k+1}`
   (in 2-D the four corners of its cell, by the products of the two axes' fractions). The
   split keeps each row's mass and its mean position.
2. **Gridded moments.** With the Gaussian kernel :math:`K(u) = e^{-u^2/2}` and bin counts
   :math:`c_k` (weights :math:`s_j`) and :math:`c^y_k` (weighted targets :math:`s_j y_j`),
   the local-polynomial moments at grid point :math:`g` are

   .. math::

       S_e(g) = \sum_k c_k K(u_k) u_k^e, \qquad T_e(g) = \sum_k c^y_k K(u_k) u_k^e,
       \qquad u_k = (g_k - g)/h,

   for :math:`|e| \le 2p` and :math:`|e| \le p` respectively (multi-indices in 2-D, where
   the Gaussian is a product and every sum is two 1-D convolutions). Each is a correlation
   of the bin counts with the taps :math:`K(m\delta/h)(m\delta/h)^e`, computed directly or
   by FFT, whichever the measured crossover :data:`FFT_CROSSOVER` says is faster.
3. **Queries.** The moments are smooth functions of the evaluation point, so at a query
   :math:`q` they are linearly (bilinearly) *interpolated* from the grid, and the local
   polynomial of degree :math:`p` is solved at :math:`q` from them
   (:func:`solve_local_polynomial`): interpolating the sums, not the gridded estimate.

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
the bound of a given grid; :func:`choose_algorithm` weighs the binned cost against the
exact one (``"auto"``).

**Truncation.** The kernel is sampled out to :data:`CUTOFF` bandwidths, where it falls
below the float64 epsilon, so truncation adds nothing to the binning error, and the sums
are kept on the grid extended by :data:`MARGIN` bandwidths on every side: a query just
outside the data is interpolated like any other.

**No data near.** Where the interpolated :math:`S_0` is below :data:`RESOLUTION` times the
total weight (beyond the extended grid, or where FFT rounding could dominate), the moments
are recomputed directly from the non-empty bins with the largest logit subtracted (the
log-sum-exp shift of the exact estimator), so a far query gets the limit of the estimator:
its nearest bins dominate and the ridge of the solve makes the fit their local constant.

**Leave-one-out.** Row :math:`i`'s own contribution to the interpolated sums at
:math:`x_i` is known in closed form (:func:`own_moments`): its two bins, through the
kernel taps at :math:`0` and :math:`\pm\delta`, interpolated back with the same
fractions. Subtracting it removes the row from the binned data exactly, so the left-out
fit at every row costs :math:`O(1)` after the :math:`O(G \log G)` sums:
:math:`O(G \log G + n)` per bandwidth, not :math:`O(n^2)` (:func:`row_statistics`). The
trace of the smoother matrix comes from the same own moments.

References
----------
Fan, J. and Marron, J. S. (1994). Fast implementations of nonparametric curve estimators.
*Journal of Computational and Graphical Statistics*, 3, 35–56.

Wand, M. P. (1994). Fast computation of multivariate kernel estimators. *Journal of
Computational and Graphical Statistics*, 3, 433–445.

Wand, M. P. and Jones, M. C. (1995). *Kernel Smoothing*. Chapman and Hall.
"""

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import NamedTuple

import numpy as np
from scipy import fft as sp_fft
from scipy import ndimage, signal
from scipy.spatial import cKDTree

from kernattn._core.blocks import (
    effective_n_jobs,
    iter_query_blocks,
    map_query_blocks,
    query_block_size,
)

__all__ = [
    "CRITERIA",
    "CUTOFF",
    "MAX_DIMS",
    "RIDGE",
    "TOLERANCE",
    "Bins",
    "CellMoments",
    "Grid",
    "GridSums",
    "NearestOther",
    "RowStatistics",
    "basis_exponents",
    "bin_targets",
    "binned_cost",
    "binning_error",
    "cell_moments",
    "choose_algorithm",
    "coarsen",
    "coarsen_cells",
    "criterion_value",
    "error_constant",
    "exact_cost",
    "grid_fits",
    "grid_sums",
    "interpolate",
    "kernel_taps",
    "linear_binning",
    "locate",
    "make_grid",
    "moment_exponents",
    "own_moments",
    "points_per_bandwidth",
    "predict",
    "query_moments",
    "row_statistics",
    "solve_local_polynomial",
    "sums_fit",
]

#: Inputs the binned sums support (the grid has G^d cells).
MAX_DIMS = 2
#: Default bound on the binning error, relative to the spread of the targets.
TOLERANCE = 1e-3
#: The kernel is sampled out to this many bandwidths: exp(−u²/2) is below the float64
#: epsilon beyond it, so truncating there changes no sum.
CUTOFF = math.sqrt(-2.0 * math.log(np.finfo(float).eps))
#: The sums are kept on the data grid extended by this many bandwidths per side; queries
#: farther out are computed directly from the bins.
MARGIN = 2.0
#: Ridge of the local-polynomial solve, relative to the diagonal a locally uniform design
#: would give (S_0 times the kernel's moment). Far above the rounding of FFT sums (about
#: 1e-13 of them), far below anything that carries information.
RIDGE = 1e-8
#: Interpolated sums S_0 below this fraction of the total weight are recomputed directly
#: from the bins: FFT rounding (about 1e-16 of the total) could dominate them.
RESOLUTION = 1e-10
#: Direct convolution beats the FFT while taps < FFT_CROSSOVER · log2(length + taps)
#: (measured with scipy 1.17 on one core: direct costs about 0.8 ns per tap and cell,
#: the FFT about half a direct tap per log2 of the padded length).
FFT_CROSSOVER = 2.0
# Costs behind binned_cost and exact_cost, measured (numpy 2.4, scipy 1.17, 2 cores) on
# 10⁶ uniform rows: linear binning 9–10 ns per row, column and cell corner; the sums 0.5 ns
# per padded cell, column and log2 of each axis's length, plus about 50 µs per column;
# interpolation and solve 6 (1-D) to 21 (2-D) ns per query and column; the exact
# smoother's prediction 2.1 ns (degree 0) and 8.4 ns (degree 1) per query-key pair.
_BIN_SECONDS = 1e-8
_FFT_SECONDS = 5e-10
_FFT_OVERHEAD = 5e-5
_QUERY_SECONDS = 2e-8
_PAIR_SECONDS = (2.1e-9, 8.4e-9)


# ---------------------------------------------------------------------------- validation


def _check_points(X, n_dims=None, name="X"):
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 1-D or 2-D array of shape (n, d); got {X.ndim} dims")
    d = X.shape[1]
    if not 1 <= d <= MAX_DIMS:
        raise ValueError(
            f"binned sums support 1 or {MAX_DIMS} inputs; {name} has {d} columns "
            "(use the exact algorithm)"
        )
    if n_dims is not None and d != n_dims:
        raise ValueError(f"{name} has {d} columns; the grid has {n_dims}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinity")
    return X


def _check_bandwidth(bandwidth, n_dims):
    h = np.asarray(bandwidth, dtype=float)
    if h.ndim > 1 or h.size not in (1, n_dims) or not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(
            f"bandwidth must be a positive float or {n_dims} positive floats; got {bandwidth!r}"
        )
    return np.broadcast_to(h, (n_dims,)).astype(float)


def _check_degree(degree):
    if not isinstance(degree, (int, np.integer)) or degree < 0:
        raise ValueError(f"degree must be a non-negative integer; got {degree!r}")
    return int(degree)


def _check_targets(Y, n):
    Y = np.asarray(Y, dtype=float)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or len(Y) != n:
        raise ValueError(f"Y must have shape ({n},) or ({n}, n_outputs); got {Y.shape}")
    if not np.all(np.isfinite(Y)):
        raise ValueError("Y contains NaN or infinity")
    return Y


def _check_weights(sample_weight, n):
    if sample_weight is None:
        return None
    s = np.asarray(sample_weight, dtype=float)
    if s.shape != (n,) or not np.all(np.isfinite(s) & (s >= 0)) or not np.any(s > 0):
        raise ValueError(
            f"sample_weight must be {n} finite non-negative floats, not all 0; got shape {s.shape}"
        )
    return s


# ---------------------------------------------------------------------------- exponents


def basis_exponents(degree, n_dims):
    """Exponents of the local polynomial's monomials, by total degree (the constant first).

    Examples
    --------
    >>> basis_exponents(1, 2).tolist()
    [[0, 0], [1, 0], [0, 1]]
    """
    exps = [e for e in product(range(degree + 1), repeat=n_dims) if sum(e) <= degree]
    exps.sort(key=lambda e: (sum(e), tuple(-v for v in e)))
    return np.array(exps, dtype=int).reshape(-1, n_dims)


def moment_exponents(degree, n_dims):
    """Exponents of the weight moments a local polynomial of ``degree`` needs (total degree
    up to ``2 * degree``), in the order of :func:`basis_exponents` of twice the degree."""
    return basis_exponents(2 * degree, n_dims)


def _pair_index(degree, n_dims):
    """``index[i, j]``: the position of ``basis[i] + basis[j]`` among the moments."""
    basis = basis_exponents(degree, n_dims)
    lookup = {tuple(e): k for k, e in enumerate(moment_exponents(degree, n_dims))}
    return np.array([[lookup[tuple(a + b)] for b in basis] for a in basis], dtype=int)


def _basis_in_moments(degree, n_dims):
    """Positions of the basis exponents among the moment exponents."""
    return _pair_index(degree, n_dims)[0]


def _gaussian_moment(exponent):
    """E[Π Z_a^{e_a}] for independent standard normals (0 for an odd exponent)."""
    out = 1.0
    for e in np.atleast_1d(exponent):
        out *= 0.0 if e % 2 else float(np.prod(np.arange(e - 1, 0, -2), initial=1))
    return out


# ---------------------------------------------------------------------------- error and grid


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
    return _error_constant(_check_degree(degree), int(n_dims))


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
    h = _check_bandwidth(bandwidth, len(spacing))
    ratio = np.max(spacing / h)
    return error_constant(degree, len(spacing)) * float(ratio) ** 2


@dataclass(frozen=True)
class Grid:
    """A regular grid: ``shape[a]`` points per axis, ``origin[a] + spacing[a] * k``."""

    origin: np.ndarray
    spacing: np.ndarray
    shape: tuple

    @property
    def n_dims(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    def axis(self, a):
        """The coordinates of the grid points along axis ``a``."""
        return self.origin[a] + self.spacing[a] * np.arange(self.shape[a])

    def points(self):
        """All grid points, (size, d), in row-major order of the grid."""
        mesh = np.meshgrid(*(self.axis(a) for a in range(self.n_dims)), indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)


def make_grid(X, bandwidth, *, degree=0, tol=TOLERANCE, levels=0):
    """The grid over the range of ``X`` whose spacing meets ``tol`` at ``bandwidth``.

    The spacing is at most ``bandwidth / points_per_bandwidth(degree, d, tol)`` per axis,
    and divides the data's range evenly. With ``levels``, the number of cells per axis is
    a multiple of ``2**levels``, so that :func:`coarsen` can halve the grid that often.

    Examples
    --------
    >>> grid = make_grid(np.array([[0.0], [1.0]]), 0.1, degree=1)
    >>> grid.shape, float(grid.spacing[0])
    ((313,), 0.00321)
    """
    X = _check_points(X)
    d = X.shape[1]
    h = _check_bandwidth(bandwidth, d)
    step = h / points_per_bandwidth(_check_degree(degree), d, tol)
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = hi - lo
    unit = 2**levels
    cells = np.maximum(np.ceil(span / step), 1).astype(int)
    cells = -(-cells // unit) * unit
    spacing = np.where(span > 0, span / cells, step)
    origin = np.where(span > 0, lo, lo - spacing * cells / 2)
    return Grid(origin=origin, spacing=spacing, shape=tuple(int(c) + 1 for c in cells))


def grid_fits(n_cells, n_columns):
    """Whether sums of ``n_columns`` columns over ``n_cells`` (extended) grid cells fit in
    the ``working_memory`` budget (a few arrays of that size live at once)."""
    return query_block_size(n_cells, max(n_columns, 1), n_arrays=4, cache=False) >= n_cells


# ---------------------------------------------------------------------------- binning


def locate(points, grid):
    """The cell of each point and its fractional position in it.

    Returns
    -------
    index : ndarray of int, shape (n, d)
        Lower corner of the cell (clipped to the grid's cells).
    fraction : ndarray of shape (n, d)
        ``(x − g_index)/δ``, in [0, 1] for points inside the grid.
    inside : ndarray of bool, shape (n,)
        Points within the grid (up to rounding of the range).
    """
    pos = (points - grid.origin) / grid.spacing
    top = np.asarray(grid.shape) - 1
    inside = np.all((pos >= -1e-9) & (pos <= top + 1e-9), axis=1)
    index = np.clip(np.floor(pos), 0, np.maximum(top - 1, 0)).astype(np.intp)
    fraction = pos - index
    return index, fraction, inside


def _same_grid(a, b):
    return (
        a.shape == b.shape
        and np.array_equal(a.origin, b.origin)
        and np.array_equal(a.spacing, b.spacing)
    )


def _strides(shape):
    return np.array([int(np.prod(shape[a + 1 :])) for a in range(len(shape))], dtype=np.intp)


def _corners(index, fraction, shape):
    """Flat indices and weights of the 2^d corners of each point's cell."""
    strides = _strides(shape)
    base = index[:, 0] * strides[0]
    for a in range(1, len(shape)):
        base = base + index[:, a] * strides[a]
    for corner in product((0, 1), repeat=len(shape)):
        weight = None
        for a, c in enumerate(corner):
            factor = fraction[:, a] if c else 1.0 - fraction[:, a]
            weight = factor if weight is None else weight * factor
        yield base + int(np.dot(corner, strides)), weight


def _accumulate(counts, X, values, grid, truncate=False):
    """Add the linear binning of one block of rows to ``counts`` (grid.size, m)."""
    index, fraction, inside = locate(X, grid)
    if not np.all(inside):
        if not truncate:
            raise ValueError("X has points outside the grid; make the grid from X")
        index, fraction, values = index[inside], fraction[inside], values[inside]
    for flat, weight in _corners(index, fraction, grid.shape):
        for j in range(values.shape[1]):
            counts[:, j] += np.bincount(flat, weights=weight * values[:, j], minlength=grid.size)


def linear_binning(X, columns, grid, sample_weight=None, *, truncate=False):
    r"""Linear binning of weighted columns onto ``grid`` (KernSmooth's ``linbin``/
    ``linbin2D``): :math:`c_k = \sum_j s_j\, \omega_k(x_j)\, z_j`, where
    :math:`\omega_k(x)` is the hat function of grid point :math:`k` (the product of the
    axes' hats in 2-D), so every row's mass and mean position are kept.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Inputs, inside the grid.
    columns : array_like of shape (n, m)
        What is binned (e.g. ``[1, y, y²]``).
    grid : Grid
    sample_weight : array_like of shape (n,), optional
        Multiplies every column.
    truncate : bool
        Leave out rows outside the grid (KernSmooth's ``truncate = TRUE``) instead of
        raising.

    Returns
    -------
    counts : ndarray of shape grid.shape + (m,)

    Examples
    --------
    >>> grid = Grid(np.array([0.0]), np.array([1.0]), (3,))
    >>> linear_binning([[0.25], [2.0]], np.ones((2, 1)), grid)[:, 0]
    array([0.75, 0.25, 1.  ])
    """
    X = _check_points(X, grid.n_dims)
    columns = np.asarray(columns, dtype=float)
    columns = columns[:, None] if columns.ndim == 1 else columns
    if len(columns) != len(X):
        raise ValueError(f"columns must have {len(X)} rows; got {len(columns)}")
    s = _check_weights(sample_weight, len(X))
    m = columns.shape[1]
    counts = np.zeros((grid.size, m))
    for rows in iter_query_blocks(len(X), m * 2**grid.n_dims, n_arrays=2, cache=2**20):
        values = columns[rows] if s is None else columns[rows] * s[rows, None]
        _accumulate(counts, X[rows], values, grid, truncate)
    return counts.reshape(grid.shape + (m,))


def coarsen(counts, grid, factor):
    """Linear binning onto the grid ``factor`` times coarser, from the counts of ``grid``.

    Exact: the coarse grid's hat functions are linear between the fine grid points, so
    re-binning the fine counts equals binning the rows onto the coarse grid directly.
    Needs ``(shape[a] − 1) % factor == 0`` on every axis (:func:`make_grid`'s ``levels``).

    Returns
    -------
    counts : ndarray
    grid : Grid
    """
    factor = int(factor)
    if factor == 1:
        return counts, grid
    if any((n - 1) % factor for n in grid.shape):
        raise ValueError(f"the grid's cells {grid.shape} are not divisible by {factor}")
    r = np.arange(factor) / factor
    for a in range(grid.n_dims):
        moved = np.moveaxis(counts, a, 0)
        n = moved.shape[0]
        coarse = np.zeros(((n - 1) // factor + 1,) + moved.shape[1:])
        body = moved[:-1].reshape((n - 1) // factor, factor, *moved.shape[1:])
        coarse[:-1] += np.tensordot(1.0 - r, body, axes=([0], [1]))
        coarse[1:] += np.tensordot(r, body, axes=([0], [1]))
        coarse[-1] += moved[-1]
        counts = np.moveaxis(coarse, 0, a)
    shape = tuple((n - 1) // factor + 1 for n in grid.shape)
    return counts, Grid(grid.origin, grid.spacing * factor, shape)


class Bins(NamedTuple):
    """Binned training data: ``counts[..., 0]`` the binned sample weights, ``counts[...,
    1:]`` the binned weighted targets minus ``shift`` (their weighted mean: FFT rounding is
    then relative to the targets' spread, not their magnitude)."""

    grid: Grid
    counts: np.ndarray
    shift: np.ndarray


def bin_targets(X, Y, grid, sample_weight=None, *, truncate=False):
    """:func:`linear_binning` of ``[1, Y − shift]`` times the sample weights: the
    :class:`Bins` every sum below is computed from (``truncate``: see there)."""
    X = _check_points(X, grid.n_dims)
    Y = _check_targets(Y, len(X))
    s = _check_weights(sample_weight, len(X))
    shift = np.average(Y, axis=0, weights=s)
    t = Y.shape[1]
    counts = np.zeros((grid.size, 1 + t))
    for rows in iter_query_blocks(len(X), (1 + t) * 2**grid.n_dims, n_arrays=2, cache=2**20):
        values = np.empty((rows.stop - rows.start, 1 + t))
        values[:, 0] = 1.0 if s is None else s[rows]
        values[:, 1:] = (Y[rows] - shift) * values[:, :1]
        _accumulate(counts, X[rows], values, grid, truncate)
    return Bins(grid, counts.reshape(grid.shape + (1 + t,)), shift)


# ---------------------------------------------------------------------------- sums


def kernel_taps(spacing, bandwidth, power=0, cutoff=CUTOFF):
    r"""The kernel sampled on the grid: :math:`K(m\delta/h)\,(m\delta/h)^e` for
    :math:`|m| \le \lfloor \text{cutoff}\cdot h/\delta \rfloor` (``cutoff = 4`` is
    KernSmooth's truncation).

    Examples
    --------
    >>> kernel_taps(0.5, 1.0, power=1, cutoff=1.0)
    array([-0.60653066, -0.44124845,  0.        ,  0.44124845,  0.60653066])
    """
    reach = int(math.floor(cutoff * bandwidth / spacing))
    u = np.arange(-reach, reach + 1) * spacing / bandwidth
    taps = np.exp(-0.5 * u * u)
    return taps * u**power if power else taps


def _prefer_direct(n, width):
    """Whether direct convolution of ``n`` points with ``width`` taps beats the FFT."""
    return width < FFT_CROSSOVER * math.log2(n + width)


def _convolve_full(a, taps, axis):
    """Full convolution of ``a`` with ``taps`` along ``axis``, direct or by FFT."""
    n, width = a.shape[axis], len(taps)
    if _prefer_direct(n, width):
        pad = [(0, 0)] * a.ndim
        pad[axis] = (width // 2, width // 2)
        return ndimage.convolve1d(np.pad(a, pad), taps, axis=axis, mode="constant")
    shape = [1] * a.ndim
    shape[axis] = width
    return signal.fftconvolve(a, taps.reshape(shape), mode="full", axes=axis)


def _locate_cells(points, grid):
    """Cell index (b, d), fractions (d, b) and whether inside the grid (b,)."""
    index, fraction, inside = locate(points, grid)
    return index, np.ascontiguousarray(fraction.T), inside


def _interpolate_columns(table, grid, index, fraction):
    """The (bi)linear interpolant of ``table`` (grid.size, k) at located points, as
    columns (k, b). Whole rows of the table are gathered: one cache line per corner."""
    out = None
    for flat, weight in _corners(index, fraction.T, grid.shape):
        term = np.take(table, flat, axis=0)
        term *= weight[:, None]
        if out is None:
            out = term
        else:
            out += term
    return np.ascontiguousarray(out.T)


@dataclass(frozen=True)
class GridSums:
    """The local-polynomial moments on the extended grid (:func:`grid_sums`).

    Attributes
    ----------
    grid : Grid
        The data grid extended by :data:`MARGIN` bandwidths on every side.
    table : ndarray of shape (grid.size, Q + P t)
        Per grid point (row-major order): the weight moments :math:`S_e`
        (``moment_exponents`` order), then the value moments :math:`T_e`
        (``basis_exponents`` order, outputs fastest).
    bins : Bins
    bandwidth : ndarray of shape (d,)
    degree : int
    resolution : float
        Interpolated :math:`S_0` below this is recomputed from the bins.
    """

    grid: Grid
    table: np.ndarray
    bins: Bins
    bandwidth: np.ndarray
    degree: int
    resolution: float

    @property
    def n_moments(self):
        return len(moment_exponents(self.degree, self.grid.n_dims))

    @property
    def n_outputs(self):
        return self.bins.counts.shape[-1] - 1

    def offset(self):
        """Index of the data grid's first point on the extended grid, per axis."""
        return tuple(
            (n - m) // 2 for n, m in zip(self.grid.shape, self.bins.grid.shape, strict=True)
        )

    def split(self, columns):
        """Columns (Q + P t, b) as S (Q, b) and T (P, t, b)."""
        Q, t = self.n_moments, self.n_outputs
        return columns[:Q], columns[Q:].reshape(-1, t, columns.shape[1])

    def on_data_grid(self):
        """(S (size, Q), T (size, P, t)) at the points of the data grid, row-major."""
        index = tuple(
            slice(o, o + m) for o, m in zip(self.offset(), self.bins.grid.shape, strict=True)
        )
        rows = self.table.reshape(self.grid.shape + (-1,))[index]
        S, T = self.split(rows.reshape(self.bins.grid.size, -1).T)
        return S.T, np.moveaxis(T, -1, 0)


def _reach(grid, h, cutoff):
    """Kernel reach and kept margin, in grid points per axis."""
    reach = [int(math.floor(cutoff * h[a] / grid.spacing[a])) for a in range(grid.n_dims)]
    margin = [min(r, int(math.ceil(MARGIN * h[a] / grid.spacing[a]))) for a, r in enumerate(reach)]
    return reach, margin


def sums_fit(bins, bandwidth, degree=0, *, cutoff=CUTOFF):
    """Whether :func:`grid_sums` of ``bins`` at ``bandwidth`` fits in ``working_memory``
    (the kept sums, and the FFT's padded transforms)."""
    grid = bins.grid
    d = grid.n_dims
    h = _check_bandwidth(bandwidth, d)
    reach, margin = _reach(grid, h, cutoff)
    t = bins.counts.shape[-1] - 1
    n_cols = len(moment_exponents(degree, d)) + len(basis_exponents(degree, d)) * t
    kept = int(np.prod([n + 2 * m for n, m in zip(grid.shape, margin, strict=True)]))
    padded = int(np.prod([n + 2 * r for n, r in zip(grid.shape, reach, strict=True)]))
    return grid_fits(kept, n_cols) and grid_fits(padded, 2 * (1 + t))


def grid_sums(bins, bandwidth, degree=0, *, cutoff=CUTOFF):
    r"""The moments :math:`S_e(g)` (:math:`|e| \le 2p`) and :math:`T_e(g)`
    (:math:`|e| \le p`) at every point of the data grid extended by :data:`MARGIN`
    bandwidths on every side.

    Each is a correlation of the counts with :func:`kernel_taps` (a convolution with the
    taps reversed, :math:`(-1)^e` times the taps), one axis after the other.

    Parameters
    ----------
    bins : Bins
    bandwidth : float or array_like of shape (d,)
        The Gaussian kernel's standard deviation per input.
    degree : int
        Of the local polynomial.
    cutoff : float
        Reach of the kernel, in bandwidths.

    Returns
    -------
    GridSums
    """
    grid = bins.grid
    d = grid.n_dims
    h = _check_bandwidth(bandwidth, d)
    degree = _check_degree(degree)
    moments = moment_exponents(degree, d)
    basis = basis_exponents(degree, d)
    value_pos = {tuple(e): k for k, e in enumerate(basis)}
    counts = bins.counts
    t = counts.shape[-1] - 1
    reach, margin = _reach(grid, h, cutoff)
    ext_shape = tuple(n + 2 * m for n, m in zip(grid.shape, margin, strict=True))
    full = tuple(slice(r - m, r - m + n) for r, m, n in zip(reach, margin, ext_shape, strict=True))
    n_cols = len(moments) + len(basis) * t
    if not sums_fit(bins, h, degree, cutoff=cutoff):
        raise ValueError(
            f"the binned sums need a grid of {ext_shape} points, more than working_memory "
            "allows; use the exact algorithm, a larger tol or a larger bandwidth"
        )
    taps = {}

    def reversed_taps(a, e):
        if (a, e) not in taps:
            taps[a, e] = (-1.0) ** e * kernel_taps(grid.spacing[a], h[a], e, cutoff)
        return taps[a, e]

    # Columns first while the sums are made (every write contiguous), rows first at the
    # end (every query gathers one row).
    columns = np.empty((n_cols,) + ext_shape)
    Q = len(moments)

    def destinations(e):
        """Where the weight column and the value columns of exponent ``e`` go."""
        k = next(i for i, m in enumerate(moments) if tuple(m) == tuple(e))
        if tuple(e) not in value_pos:
            return [k]
        start = Q + value_pos[tuple(e)] * t
        return [k] + list(range(start, start + t))

    if not any(_prefer_direct(grid.shape[a], 2 * reach[a] + 1) for a in range(d)):
        # One forward transform per column of counts, one inverse per moment column: the
        # kernel's spectrum is the product of the axes' (the Gaussian is a product).
        lengths = [
            sp_fft.next_fast_len(n + 2 * r, real=True)
            for n, r in zip(grid.shape, reach, strict=True)
        ]
        workers = effective_n_jobs(None)
        spectra_of_counts = [
            sp_fft.rfftn(counts[..., c], s=lengths, workers=workers) for c in range(1 + t)
        ]
        for e in moments:
            spectrum = np.ones((1,) * d)
            for a in range(d):
                transform = sp_fft.rfft if a == d - 1 else sp_fft.fft
                taps_a = transform(reversed_taps(a, e[a]), n=lengths[a])
                spectrum = spectrum * taps_a.reshape([-1 if b == a else 1 for b in range(d)])
            for c, k in enumerate(destinations(e)):
                product_ = spectra_of_counts[c] * spectrum
                columns[k] = sp_fft.irfftn(product_, s=lengths, workers=workers)[full]
    else:
        # Share the first axis's convolution among the exponents with the same first entry.
        for first in sorted({int(e[0]) for e in moments}):
            group = [e for e in moments if e[0] == first]
            needs_values = any(tuple(e) in value_pos for e in group)
            stage = _convolve_full(
                counts if needs_values else counts[..., :1], reversed_taps(0, first), axis=0
            )
            for e in group:
                out = stage if tuple(e) in value_pos else stage[..., :1]
                for a in range(1, d):
                    out = _convolve_full(out, reversed_taps(a, e[a]), axis=a)
                out = out[full]
                for c, k in enumerate(destinations(e)):
                    columns[k] = out[..., c]
    table = np.ascontiguousarray(columns.reshape(n_cols, -1).T)
    origin = grid.origin - np.array(margin) * grid.spacing
    ext = Grid(origin, grid.spacing, ext_shape)
    total = float(counts[..., 0].sum())
    return GridSums(ext, table, bins, h, degree, RESOLUTION * total)


def interpolate(values, grid, points):
    """Linear (bilinear in 2-D) interpolation of gridded ``values`` at ``points``.

    Parameters
    ----------
    values : ndarray of shape grid.shape + (k,)
    grid : Grid
    points : ndarray of shape (n, d)
        Points outside the grid get the nearest cell's interpolant, extrapolated.

    Returns
    -------
    ndarray of shape (n, k)

    Examples
    --------
    >>> grid = Grid(np.array([0.0, 0.0]), np.array([1.0, 1.0]), (2, 2))
    >>> values = np.array([[0.0, 1.0], [2.0, 3.0]])[..., None]   # 2 x + y
    >>> interpolate(values, grid, [[0.5, 0.25]])
    array([[1.25]])
    """
    points = _check_points(points, grid.n_dims, name="points")
    index, fraction, _ = _locate_cells(points, grid)
    table = np.asarray(values, dtype=float).reshape(grid.size, -1)
    return _interpolate_columns(table, grid, index, fraction).T


# ---------------------------------------------------------------------------- solve


def _solve_columns(S, T, degree, n_dims, ridge=RIDGE):
    """:func:`solve_local_polynomial` on column-major moments: S (Q, b), T (P, t, b);
    returns coefficients (P, t, b) and first_row (P, b)."""
    basis = basis_exponents(degree, n_dims)
    P = len(basis)
    pair = _pair_index(degree, n_dims)
    S0 = S[0]
    ok = S0 > 0
    scale = np.where(ok, S0, 1.0)
    inv_scale = 1.0 / scale
    mu = [_gaussian_moment(2 * e) for e in basis]
    # M / S0: the pivots are O(1) wherever there is data.
    L = [[None] * P for _ in range(P)]
    for j in range(P):
        if j == 0:
            L[0][0] = np.ones_like(S0)
            for i in range(1, P):
                L[i][0] = S[pair[i, 0]] * inv_scale
            continue
        s = S[pair[j, j]] * inv_scale + ridge * mu[j]
        for k in range(j):
            s -= L[j][k] ** 2
        # Rounding (or FFT noise) can push a Schur complement below the ridge.
        s = np.maximum(s, ridge * mu[j] if ridge > 0 else np.finfo(float).tiny)
        L[j][j] = np.sqrt(s)
        for i in range(j + 1, P):
            v = S[pair[i, j]] * inv_scale
            for k in range(j):
                v = v - L[i][k] * L[j][k]
            L[i][j] = v / L[j][j]

    def cholesky_solve(rhs):
        z = [None] * P
        for i in range(P):
            v = rhs[i]
            for k in range(i):
                v = v - L[i][k] * z[k]
            z[i] = v / L[i][i]
        x = [None] * P
        for i in reversed(range(P)):
            v = z[i]
            for k in range(i + 1, P):
                v = v - L[k][i] * x[k]
            x[i] = v / L[i][i]
        return np.stack(x)

    coefficients = cholesky_solve(T * inv_scale)  # (P, t, b)
    unit = [inv_scale * ok if i == 0 else np.zeros_like(S0) for i in range(P)]
    first_row = cholesky_solve(unit)  # (P, b)
    if not np.all(ok):
        coefficients[..., ~ok] = 0.0
        first_row[:, ~ok] = 0.0
    return coefficients, first_row


def solve_local_polynomial(weight_moments, value_moments, degree, n_dims, *, ridge=RIDGE):
    r"""The local polynomial at a batch of points, from its moment sums.

    Solves :math:`(M + \Lambda)\beta = T` per point, with
    :math:`M_{ij} = S_{e_i + e_j}` the weight moments in units of the bandwidth and
    :math:`\Lambda = \lambda S_0\,\mathrm{diag}(0, \mu_{2e_1}, \dots)`, where
    :math:`\mu_{2e} = E_K[u^{2e}]` is the diagonal a locally uniform design would give: a
    scale-invariant ridge that leaves the intercept free, so constants are reproduced
    exactly. Where the design cannot resolve a coefficient (all weight on one point, say)
    the ridge sets it to 0 and the fit falls back to the local constant. The solve is an
    unrolled Cholesky factorisation over the batch.

    Parameters
    ----------
    weight_moments : ndarray of shape (b, Q)
        :math:`S_e`, in :func:`moment_exponents` order.
    value_moments : ndarray of shape (b, P, t)
        :math:`T_e` per output, in :func:`basis_exponents` order.
    degree, n_dims : int
    ridge : float
        :math:`\lambda`.

    Returns
    -------
    coefficients : ndarray of shape (b, P, t)
        :math:`\beta_e`: the estimate is ``coefficients[:, 0]``; a derivative
        :math:`\partial^e m \approx e!\,\beta_e / h^e`. Rows with :math:`S_0 \le 0` (no
        weight at all) get 0.
    first_row : ndarray of shape (b, P)
        :math:`e_0^\top (M + \Lambda)^{-1}`: the equivalent weight of a key with kernel
        value :math:`k` and monomials :math:`U` is :math:`k\, \text{first\_row} \cdot U`.

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
    coefficients, first_row = _solve_columns(S, T, degree, n_dims, ridge)
    return np.moveaxis(coefficients, -1, 0), first_row.T


# ---------------------------------------------------------------------------- queries


def _direct_moments(bins, bandwidth, degree, queries):
    """The moments (S (Q, m), T (P, t, m)) at ``queries`` straight from the non-empty
    bins, with each query's largest logit subtracted (a per-query factor that cancels in
    the solve)."""
    grid = bins.grid
    d = grid.n_dims
    flat = bins.counts.reshape(grid.size, -1)
    keep = flat[:, 0] > 0
    points = grid.points()[keep] / bandwidth
    log_w = np.log(flat[keep, 0])
    means = flat[keep, 1:] / flat[keep, :1]
    moments = moment_exponents(degree, d)
    basis_pos = _basis_in_moments(degree, d)
    S = np.empty((len(moments), len(queries)))
    T = np.empty((len(basis_pos), means.shape[1], len(queries)))
    for rows in iter_query_blocks(len(queries), len(points), n_arrays=d + 3):
        q = queries[rows] / bandwidth
        u = [points[None, :, a] - q[:, a, None] for a in range(d)]
        logits = log_w - 0.5 * sum(v * v for v in u)
        logits -= logits.max(axis=1, keepdims=True)
        E = np.exp(logits)
        for k, e in enumerate(moments):
            term = E
            for a in range(d):
                if e[a]:
                    term = term * u[a] ** e[a]
            S[k, rows] = term.sum(axis=1)
            pos = np.flatnonzero(basis_pos == k)
            if len(pos):
                T[pos[0], :, rows] = (term @ means).T
    return S, T


def _query_columns(sums, queries):
    """Moments S (Q, m), T (P, t, m) at checked ``queries`` (see :func:`query_moments`)."""
    index, fraction, inside = _locate_cells(queries, sums.grid)
    S, T = sums.split(_interpolate_columns(sums.table, sums.grid, index, fraction))
    far = ~inside | (S[0] <= sums.resolution)
    if np.any(far):
        S[:, far], T[..., far] = _direct_moments(
            sums.bins, sums.bandwidth, sums.degree, queries[far]
        )
    return S, T


def query_moments(sums, queries):
    """The moments at ``queries``: interpolated from the grid, or, where the interpolated
    :math:`S_0` is below the sums' resolution (no data within reach, or beyond the
    extended grid), recomputed directly from the bins (module docstring).

    Returns
    -------
    S : ndarray of shape (m, Q)
    T : ndarray of shape (m, P, t)
    """
    queries = _check_points(queries, sums.grid.n_dims, name="queries")
    S, T = _query_columns(sums, queries)
    return S.T, np.moveaxis(T, -1, 0)


def predict(sums, queries, *, return_coefficients=False, n_jobs=None):
    r"""The binned local-polynomial estimate at ``queries``.

    Within the data's range the error against the exact estimate is below
    :func:`binning_error` of the grid, relative to the local spread of the targets.
    Beyond it the local polynomial extrapolates, and its error (binned or not) grows
    like the distance in bandwidths to the power of the degree.

    Parameters
    ----------
    sums : GridSums
    queries : array_like of shape (m, d)
    return_coefficients : bool
        Also return the local polynomial's coefficients (:func:`solve_local_polynomial`;
        the intercept there excludes the targets' shift).
    n_jobs : int, optional
        Threads over blocks of queries.

    Returns
    -------
    estimate : ndarray of shape (m, t)
    coefficients : ndarray of shape (m, P, t), if asked

    Examples
    --------
    >>> x = np.linspace(0, 1, 201)[:, None]
    >>> grid = make_grid(x, 0.1, degree=1)
    >>> sums = grid_sums(bin_targets(x, 2 * x[:, 0] + 1, grid), 0.1, degree=1)
    >>> predict(sums, [[0.25], [0.5], [0.75]])[:, 0]
    array([1.5, 2. , 2.5])
    """
    queries = _check_points(queries, sums.grid.n_dims, name="queries")
    d, t = sums.grid.n_dims, sums.n_outputs
    P = len(basis_exponents(sums.degree, d))
    estimate = np.empty((len(queries), t))
    coefficients = np.empty((len(queries), P, t)) if return_coefficients else None

    def block(rows):
        S, T = _query_columns(sums, queries[rows])
        coef, _ = _solve_columns(S, T, sums.degree, d)
        estimate[rows] = coef[0].T + sums.bins.shift
        if coefficients is not None:
            coefficients[rows] = np.moveaxis(coef, -1, 0)

    map_query_blocks(block, len(queries), 4 * sums.table.shape[1], n_jobs=n_jobs, cache=2**20)
    return (estimate, coefficients) if return_coefficients else estimate


# ---------------------------------------------------------------------------- left out


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


class NearestOther:
    """The target of each row's nearest other row (the tree is built on first use).

    The limit of the left-out estimate as the kernel sharpens: a row whose left-out sums
    fall below the resolution (no other row within the kernel's reach) is predicted by it.
    """

    def __init__(self, X, Y):
        self.X = X
        self.Y = Y
        self._tree = None

    def targets(self, rows):
        if self._tree is None:
            self._tree = cKDTree(self.X)
        _, nearest = self._tree.query(self.X[rows], k=2)
        other = np.where(nearest[:, 0] == rows, nearest[:, 1], nearest[:, 0])
        return self.Y[other]


class RowStatistics(NamedTuple):
    """What the criteria need, summed over the training rows (:func:`row_statistics`).

    ``loo_sse``: :math:`\\sum_i s_i \\|y_i - \\hat y_{-i}\\|^2`; ``rss``:
    :math:`\\sum_i s_i \\|y_i - \\hat y_i\\|^2`; ``trace``: :math:`\\mathrm{tr}\\,S`;
    ``total``: :math:`\\sum_i s_i`; ``n_unresolved``: rows predicted by their nearest
    other row (:class:`NearestOther`)."""

    loo_sse: float
    rss: float
    trace: float
    total: float
    n_unresolved: int


def _in_sample(sums, S, T, own_basis):
    """The in-sample estimate (t, b) and the trace term first_row · o (b,) at points."""
    coef, first = _solve_columns(S, T, sums.degree, sums.grid.n_dims)
    return coef[0], np.einsum("pb,pb->b", first, own_basis)


def _left_out(sums, S_out, T, own_basis, weight):
    r"""The left-out fit at points whose own moments are already removed from ``S_out``
    (but not from ``T``): :math:`\hat y_{-i} = \alpha - \gamma\,y_i` (centered targets),
    returned as α (t, b), γ (b,) and the points resolved (elsewhere α = γ = 0)."""
    d = sums.grid.n_dims
    resolved = S_out[0] > sums.resolution
    alpha = np.zeros((T.shape[1], S_out.shape[1]))
    gamma = np.zeros(S_out.shape[1])
    coef, first = _solve_columns(S_out[:, resolved], T[..., resolved], sums.degree, d)
    alpha[:, resolved] = coef[0]
    gamma[resolved] = weight[resolved] * np.einsum("pb,pb->b", first, own_basis[:, resolved])
    return alpha, gamma, resolved


def _row_block(sums, X, Y, s, own_w, own_v):
    """Per-row sums (loo_sse, rss, trace, unresolved rows) over one block of rows."""
    d = sums.grid.n_dims
    moments = moment_exponents(sums.degree, d)
    basis_pos = _basis_in_moments(sums.degree, d)
    ratio = sums.grid.spacing / sums.bandwidth
    shift = sums.bins.shift
    index, fraction, _ = _locate_cells(X, sums.grid)
    S, T = sums.split(_interpolate_columns(sums.table, sums.grid, index, fraction))
    own = own_moments(fraction, ratio, moments)
    own_basis = own[basis_pos]
    Yc = (Y - shift).T  # (t, b)
    f, g = _in_sample(sums, S, T, own_basis)
    rss = float(np.sum(s * np.sum((Yc - f) ** 2, axis=0)))
    trace = float(np.sum(s * g))
    # The left-out fit: the row's (or its group's) weight and weighted target removed.
    # ŷ₋ᵢ = α − γ·(own targets)/(own weight), so pass the group's mean target.
    alpha, gamma, resolved = _left_out(sums, S - own_w * own, T, own_basis, own_w)
    with np.errstate(divide="ignore", invalid="ignore"):
        own_mean = np.where(own_w > 0, (own_v.T - own_w * shift[:, None]) / own_w, 0.0)
    residual = (Yc - alpha + gamma * own_mean)[:, resolved]
    sse = float(np.sum(s[resolved] * np.sum(residual**2, axis=0)))
    return sse, rss, trace, np.flatnonzero(~resolved)


#: Chebyshev points of the per-cell polynomials of the criterion (degree 6 in the
#: fractional position t: the fits vary on the scale of h, about 20 cells).
_CELL_NODES = 0.5 * (1.0 - np.cos(np.pi * (2 * np.arange(7) + 1) / 14))
_CELL_FIT = np.linalg.inv(np.vander(_CELL_NODES, 7, increasing=True))


class CellMoments(NamedTuple):
    r"""Per cell of a 1-D grid, the power sums of the rows' fractional positions:
    ``power[m, k]`` :math:`= \sum s\,t^m`, ``value[m, o, k]`` :math:`= \sum s\,y_o t^m`,
    ``square[m, o, k]`` :math:`= \sum s\,y_o^2 t^m` (targets minus ``shift``, :math:`m
    \le 6`), and the common sample weight ``weight``: what :func:`row_statistics` needs to
    sum the criterion over the rows in :math:`O(G)` per bandwidth (:func:`cell_moments`).
    """

    grid: Grid
    shift: np.ndarray
    weight: float
    power: np.ndarray
    value: np.ndarray
    square: np.ndarray


def cell_moments(X, Y, bins):
    """:class:`CellMoments` of unweighted rows on ``bins.grid`` (1-D): :math:`O(n)` once
    per grid, after which every bandwidth's criterion costs :math:`O(G)`.

    The in-sample fit, the trace term and the left-out fit at a row depend on the row only
    through its fractional position in its cell (and its target, linearly); each is a
    smooth function of the position, replaced by its degree-6 interpolant at Chebyshev
    points of the cell, whose products with the power sums give the sums over the rows.
    """
    grid = bins.grid
    if grid.n_dims != 1:
        raise ValueError("cell moments are for one input; use the per-row statistics")
    X = _check_points(X, 1)
    Y = _check_targets(Y, len(X))
    n_cells = grid.shape[0] - 1
    t = Y.shape[1]
    power = np.zeros((7, n_cells))
    value = np.zeros((7, t, n_cells))
    square = np.zeros((7, t, n_cells))
    for rows in iter_query_blocks(len(X), 8 * (1 + 2 * t), n_arrays=2, cache=2**20):
        index, fraction, _ = _locate_cells(X[rows], grid)
        cell, frac = index[:, 0], fraction[0]
        Yc = Y[rows] - bins.shift
        tm = np.ones_like(frac)
        for m in range(7):
            power[m] += np.bincount(cell, weights=tm, minlength=n_cells)
            for o in range(t):
                value[m, o] += np.bincount(cell, weights=tm * Yc[:, o], minlength=n_cells)
                square[m, o] += np.bincount(cell, weights=tm * Yc[:, o] ** 2, minlength=n_cells)
            tm = tm * frac
    return CellMoments(grid, bins.shift, 1.0, power, value, square)


def coarsen_cells(cells, factor):
    r""":class:`CellMoments` on the grid ``factor`` times coarser (:func:`coarsen`'s),
    exactly: a row at fraction :math:`t` of fine cell :math:`fJ + r` is at
    :math:`(r + t)/f` of coarse cell :math:`J`, and
    :math:`\sum ((r + t)/f)^m = f^{-m}\sum_j \binom{m}{j} r^{m-j} \sum t^j`."""
    factor = int(factor)
    if factor == 1:
        return cells
    n_fine = cells.power.shape[-1]
    if n_fine % factor:
        raise ValueError(f"the grid's {n_fine} cells are not divisible by {factor}")
    r = np.arange(n_fine) % factor

    def convert(sums):  # (7, ..., n_fine) -> (7, ..., n_coarse)
        out = np.zeros_like(sums)
        for m in range(sums.shape[0]):
            for j in range(m + 1):
                out[m] += math.comb(m, j) * r ** (m - j) * sums[j]
            out[m] /= factor**m
        return out.reshape(out.shape[:-1] + (n_fine // factor, factor)).sum(axis=-1)

    grid = cells.grid
    coarse = Grid(grid.origin, grid.spacing * factor, ((grid.shape[0] - 1) // factor + 1,))
    return CellMoments(
        coarse,
        cells.shift,
        cells.weight,
        convert(cells.power),
        convert(cells.value),
        convert(cells.square),
    )


def _cell_statistics(sums, cells):
    """:class:`RowStatistics` from :class:`CellMoments`; also the cells whose left-out
    sums fall below the resolution somewhere (their rows need the per-row path)."""
    grid = sums.grid
    n_cells = cells.power.shape[1]
    offset = sums.offset()[0]
    ratio = grid.spacing / sums.bandwidth
    moments = moment_exponents(sums.degree, 1)
    nodes = len(_CELL_NODES)
    index = np.repeat(np.arange(n_cells) + offset, nodes)[:, None]
    fraction = np.tile(_CELL_NODES, n_cells)[None]
    S, T = sums.split(_interpolate_columns(sums.table, grid, index, fraction))
    own = own_moments(fraction, ratio, moments)
    own_basis = own[_basis_in_moments(sums.degree, 1)]
    weight = np.full(S.shape[1], cells.weight)
    f, g = _in_sample(sums, S, T, own_basis)
    alpha, gamma, resolved = _left_out(sums, S - weight * own, T, own_basis, weight)

    def poly(values):  # values (..., n_cells * nodes) -> coefficients (7, ..., n_cells)
        values = values.reshape(values.shape[:-1] + (n_cells, nodes))
        return np.moveaxis(np.einsum("mj,...kj->...mk", _CELL_FIT, values), -2, 0)

    def total(coef, sums_m):  # Σ_m coef_m · sums_m, summed over cells (and outputs)
        return float(np.sum(coef * sums_m))

    rss = (
        float(np.sum(cells.square[0]))
        - 2.0 * total(poly(f), cells.value)
        + total(poly(f * f), cells.power[:, None, :])
    )
    trace = total(poly(g), cells.power)
    one_plus = 1.0 + gamma
    loo = (
        total(poly(np.broadcast_to(one_plus**2, alpha.shape)), cells.square)
        - 2.0 * total(poly(alpha * one_plus), cells.value)
        + total(poly(alpha * alpha), cells.power[:, None, :])
    )
    bad = ~np.all(resolved.reshape(n_cells, nodes), axis=1) & (cells.power[0] > 0)
    if np.any(bad):
        # Drop those cells' share; the caller adds their rows one by one.
        fix = _cell_share(poly, f, g, alpha, one_plus, cells, bad)
        loo -= fix
    return loo, rss, trace, np.flatnonzero(bad)


def _cell_share(poly, f, g, alpha, one_plus, cells, bad):
    """The left-out error the cells ``bad`` contributed to the cell sums."""
    a2 = poly(np.broadcast_to(one_plus**2, alpha.shape))
    a1 = poly(alpha * one_plus)
    a0 = poly(alpha * alpha)
    return float(
        np.sum((a2 * cells.square)[..., bad])
        - 2.0 * np.sum((a1 * cells.value)[..., bad])
        + np.sum((a0 * cells.power[:, None, :])[..., bad])
    )


def row_statistics(
    sums,
    X,
    Y,
    sample_weight=None,
    *,
    own_weight=None,
    own_values=None,
    neighbours=None,
    cells=None,
    n_jobs=None,
):
    r"""Left-out and in-sample errors and the trace of the smoother at every training row.

    At row :math:`i` the moments are interpolated from the grid; the in-sample fit solves
    with them, the left-out fit with the row's own contribution removed
    (:func:`own_moments` times its weight, and times its target for the value moments);
    :math:`S_{ii} = s_i\, \text{first\_row} \cdot o_i`. Cost :math:`O(n)` per bandwidth,
    on threads; with ``cells`` (unweighted rows in 1-D) :math:`O(G)`.

    Parameters
    ----------
    sums : GridSums
        From the binned ``X, Y, sample_weight`` (the same rows).
    X, Y, sample_weight : array_like
    own_weight : ndarray of shape (n,), optional
        The weight to leave out for each row (default its own ``s_i``; the sum over its
        group of exact duplicates leaves the duplicates out too).
    own_values : ndarray of shape (n, t), optional
        :math:`\sum s_j y_j` over the same rows (default :math:`s_i y_i`).
    neighbours : NearestOther, optional
        Reused across bandwidths; made here when needed and not given.
    cells : CellMoments, optional
        Of these rows on the sums' data grid (:func:`cell_moments`); only without sample
        weights or own-weight overrides.
    n_jobs : int, optional
        Threads.

    Returns
    -------
    RowStatistics
    """
    grid = sums.grid
    d = grid.n_dims
    X = _check_points(X, d)
    Y = _check_targets(Y, len(X))
    s = _check_weights(sample_weight, len(X))
    if cells is not None:
        if s is not None or own_weight is not None or own_values is not None:
            raise ValueError("cells hold unweighted rows; pass no weights with them")
        if not (
            _same_grid(cells.grid, sums.bins.grid) and np.array_equal(cells.shift, sums.bins.shift)
        ):
            raise ValueError("cells were made on another grid than the sums")
    s = np.ones(len(X)) if s is None else s
    own_w = s if own_weight is None else np.asarray(own_weight, dtype=float)
    own_v = s[:, None] * Y if own_values is None else np.asarray(own_values, dtype=float)
    own_v = own_v.reshape(len(X), -1)

    def block(rows):
        sse, rss, trace, bad = _row_block(
            sums, X[rows], Y[rows], s[rows], own_w[rows], own_v[rows]
        )
        return sse, rss, trace, rows.start + bad

    if cells is not None:
        loo_sse, rss, trace, bad_cells = _cell_statistics(sums, cells)
        unresolved = np.empty(0, dtype=np.intp)
        if len(bad_cells):
            index, _, _ = _locate_cells(X, cells.grid)
            rows = np.flatnonzero(np.isin(index[:, 0], bad_cells))
            sse, _, _, bad = _row_block(sums, X[rows], Y[rows], s[rows], own_w[rows], own_v[rows])
            loo_sse += sse
            unresolved = rows[bad]
    else:
        parts = map_query_blocks(
            block, len(X), 4 * sums.table.shape[1], n_jobs=n_jobs, cache=2**20
        )
        loo_sse = sum(p[0] for p in parts)
        rss = sum(p[1] for p in parts)
        trace = sum(p[2] for p in parts)
        unresolved = np.concatenate([p[3] for p in parts])
    if len(unresolved):
        neighbours = NearestOther(X, Y) if neighbours is None else neighbours
        residual = Y[unresolved] - neighbours.targets(unresolved)
        loo_sse += float(np.sum(s[unresolved] * np.sum(residual**2, axis=1)))
    return RowStatistics(loo_sse, rss, trace, float(s.sum()), len(unresolved))


#: The criteria :func:`criterion_value` evaluates.
CRITERIA = ("loo", "gcv", "aic")


def criterion_value(criterion, stats):
    r"""A bandwidth-selection criterion from :class:`RowStatistics`, in the targets' units.

    ``"loo"``: :math:`\sum_i s_i\|y_i - \hat y_{-i}\|^2 / n`; ``"gcv"``:
    :math:`\hat\sigma^2/(1 - \mathrm{tr}\,S/n)^2`; ``"aic"`` (AICc of Hurvich, Simonoff
    and Tsai, 1998): :math:`\log\hat\sigma^2 + (1 + \mathrm{tr}\,S/n)/(1 - (\mathrm{tr}\,S
    + 2)/n)`; with :math:`\hat\sigma^2 = \mathrm{RSS}/n` and :math:`n = \sum_i s_i`. A
    trace that leaves no degrees of freedom gives ``inf``.

    Examples
    --------
    >>> stats = RowStatistics(loo_sse=12.0, rss=8.0, trace=2.0, total=10.0, n_unresolved=0)
    >>> [round(criterion_value(c, stats), 4) for c in CRITERIA]
    [1.2, 1.25, 1.7769]
    """
    n = stats.total
    if criterion == "loo":
        return stats.loo_sse / n
    sigma2 = stats.rss / n
    tau = stats.trace / n
    if criterion == "gcv":
        return sigma2 / (1.0 - tau) ** 2 if tau < 1.0 else np.inf
    if criterion == "aic":
        room = 1.0 - tau - 2.0 / n
        return math.log(max(sigma2, 1e-300)) + (1.0 + tau) / room if room > 0 else np.inf
    raise ValueError(
        f"criterion must be one of {', '.join(map(repr, CRITERIA))}; got {criterion!r}"
    )


# ---------------------------------------------------------------------------- cost


def binned_cost(n_keys, n_queries, grid_shape, *, degree=0, n_outputs=1, reach=None):
    """Estimated seconds of the binned path: binning the keys, the sums on the grid
    (extended by ``reach`` points per side, default the kernel's at the tolerance's
    spacing), and interpolating and solving at the queries."""
    d = len(grid_shape)
    Q = len(moment_exponents(degree, d))
    P = len(basis_exponents(degree, d))
    cols = Q + P * n_outputs
    if reach is None:
        reach = int(CUTOFF * points_per_bandwidth(degree, d))
    ext = np.asarray(grid_shape) + 2 * reach  # the FFT's padded length
    fft = np.prod(ext) * cols * sum(math.log2(ext[a]) for a in range(d))
    return (
        _BIN_SECONDS * n_keys * (1 + n_outputs) * 2**d
        + _FFT_SECONDS * fft
        + _FFT_OVERHEAD * cols
        + _QUERY_SECONDS * n_queries * cols
    )


def exact_cost(n_keys, n_queries, *, degree=0):
    """Estimated seconds of the exact sums: one kernel value per (query, key) pair."""
    return _PAIR_SECONDS[min(degree, 1)] * n_keys * n_queries


def choose_algorithm(
    X, bandwidth, n_queries, *, degree=0, n_outputs=1, tol=TOLERANCE, kernel="gaussian"
):
    """``"binned"`` where the binned sums meet ``tol`` within the memory budget and cost
    less than the exact ones, ``"exact"`` otherwise (more than two inputs, a kernel other
    than the Gaussian, a grid too large for ``working_memory``).

    Examples
    --------
    >>> x = np.linspace(0, 1, 10**5)[:, None]
    >>> choose_algorithm(x, 0.01, 10**5, degree=1), choose_algorithm(x[:50], 0.01, 50)
    ('binned', 'exact')
    """
    X = np.asarray(X, dtype=float)
    X = X[:, None] if X.ndim == 1 else X
    if kernel != "gaussian" or not 1 <= X.shape[1] <= MAX_DIMS or len(X) == 0:
        return "exact"
    grid = make_grid(X, bandwidth, degree=degree, tol=tol)
    d = grid.n_dims
    reach = int(math.ceil(CUTOFF / float(np.min(grid.spacing / _check_bandwidth(bandwidth, d)))))
    ext = int(np.prod(np.asarray(grid.shape) + 2 * reach))
    cols = len(moment_exponents(degree, d)) + len(basis_exponents(degree, d)) * n_outputs
    if not grid_fits(ext, cols):
        return "exact"
    binned = binned_cost(
        len(X), n_queries, grid.shape, degree=degree, n_outputs=n_outputs, reach=reach
    )
    return "binned" if binned < exact_cost(len(X), n_queries, degree=degree) else "exact"
