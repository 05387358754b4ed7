r"""The smoother's kernel sums on a grid, as a kernel-side object: what the estimator's binned
tier holds between ``fit`` and ``predict``.

:class:`BinnedKernel` bins the scaled, centered targets of the training rows and their
squares (:mod:`kernattn.smoother._binned.binning`) and keeps the gridded moments of a local
polynomial of
one degree,

.. math::

    S_e(g) = \sum_j s_j K(u_j)\, u_j^e, \qquad
    T_e(g) = \sum_j s_j K(u_j)\, [v_j, v_j^2]\, u_j^e, \qquad u_j = (x_j - g)/h,

for :math:`|e| \le 2p` and :math:`|e| \le p`. At a query they are interpolated and the
local polynomial is solved about the query from them (:func:`~kernattn.smoother._binned.solve.
solve_local_polynomial`): the weighted least-squares polynomial of the exact tier, up to
the binning error. The rule that holds back a query whose local design cannot support
its polynomial (:mod:`kernattn._local.polynomial`) needs the variance factor
:math:`\sum_j l_j^2 / s_j = r^\top M_2 r` (:math:`r` the first row of the inverse Gram
matrix, :math:`M_2` the Gram matrix of the squared kernel weights over the precision
weights, :math:`\sum_j s_j K(u_j)^2 u_j^e`); for the Gaussian :math:`K^2(u) = K(\sqrt2
u)`, so :math:`M_2` comes from the weight moments at the bandwidth :math:`h/\sqrt2`,
times :math:`2^{-|e|/2}` — a second, weights-only grid sum. For the training rows' own
left-out fits (``held_back_``) the same sums, a row's own share removed, go through the
exact tier's :func:`~kernattn._local.polynomial.polynomial_estimate` (keys about the
query, the query at the origin).

Rows the grid does not serve well are left to the exact kernel (:meth:`BinnedKernel.
moments` returns them): queries outside the data's range (where a local polynomial
extrapolates and the binning error grows with the distance) or with next to no kernel
mass on the grid (where the interpolated sums have lost their digits), and queries whose variance
factor :math:`\sum_j l_j^2` is not well below the bound (held back, or near it: there the
binning error could decide whether they are). A binned estimate therefore matches the
exact one within the binning tolerance wherever it is given, and equals it (to rounding)
on every row handed back.
"""

import dataclasses
import math
from functools import cached_property, lru_cache

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.blocks import iter_query_blocks, map_query_blocks
from kernattn._core.numerics import power_of_two_scale
from kernattn._engine.inference import LinearSmootherInference, local_noise
from kernattn._local.fits import LocalPolynomials
from kernattn._local.polynomial import (
    VARIANCE_BOUND,
    monomial_exponents,
    polynomial_estimate,
)
from kernattn.smoother._binned.binning import (
    Bins,
    bin_located,
    bin_targets,
    block_entries,
    coarsen,
    linear_binning,
)
from kernattn.smoother._binned.error import TOLERANCE, binning_error
from kernattn.smoother._binned.exponents import basis_exponents, moment_exponents
from kernattn.smoother._binned.grid import (
    Grid,
    interpolate,
    interpolate_columns,
    interpolate_points,
    locate,
    make_grid,
)
from kernattn.smoother._binned.left_out import own_moments
from kernattn.smoother._binned.moments import column_grid_sums, grid_sums, sums_fit
from kernattn.smoother._binned.solve import solve_local_polynomial

#: The most grid points the estimator's binned tier takes (beyond, the grid's cost
#: outgrows the rows' in any case).
MAX_GRID_POINTS = 2**24
#: Queries whose unregularized variance factor exceeds this share of the bound are
#: recomputed exactly: the binned factor is within a few per cent of the exact one, so a
#: query that the exact rule holds back is always among them.
NEAR_BOUND = 0.5
#: The check of the grid (:meth:`BinnedKernel._checked_cells`) measures the binned
#: estimate's error relative to the local spread of the targets, but not below this share
#: of their overall spread (where the targets are locally constant the binned estimate
#: reproduces them to rounding, and a relative error would only measure that rounding).
CHECK_FLOOR = 1e-6
#: The check leaves a cell to the exact kernel where the estimates on the grid and on the
#: grid coarsened by two differ by more than this multiple of ``binning_error`` (relative
#: to the local spread): second order in the spacing, the difference is about three to
#: four times the grid's own error, so the estimate served is within about half the
#: bound. (On a uniform design the largest errors, at its ends, are 0.2 to 0.4 of the
#: bound: no cell is left out there.)
CHECK_SHARE = 2.0
#: ... and where the kernel's mass at a point lies this far away, in squared bandwidths
#: (:math:`E_w[u_a^2] > 3` along some axis: about 1.4 bandwidths into a gap; 1 in the
#: interior and at the edge of a locally uniform design). There the kernel weights of
#: the nearest keys change by :math:`\tfrac18(\delta/h)^2 (u^2 - 1)` under binning,
#: beyond the bound, and a few keys carry the estimate, so that the comparison of two
#: grids (whose errors depend on the keys' positions in their cells) can miss it.
CHECK_OFFSET = 3.0
#: ... and queries whose local design has less than this share of the resolution it has
#: at the edge of dense data (:func:`edge_resolution`): the polynomial then rests on keys in
#: the kernel's far tail (few distinct inputs, a far cluster), where the grid's weights are
#: least accurate relative to themselves and beyond its reach they are cut: the exact
#: kernel computes them. (Over 600 random hostile designs, 4 exceeded the bound somewhere at
#: 0.3, among them 2-D gaps at 1.07 and 1.14 times it, and 1 at 0.6: a local cubic between
#: duplicated inputs three bandwidths apart, at 0.67 of the edge's resolution, 3.5 times
#: the bound off; none of 1 200 at 0.75. Dense data, whose resolution is 1, 0.67 and 0.4
#: for degrees 1 to 3, is far above it, and so is the edge itself.)
RESOLUTION_SHARE = 0.75
#: The noise estimate's factors :math:`\delta_i = 1 - 2 s_i r_0 + s_i r^\top M_2 r`
#: (:meth:`BinnedKernel.hat_values`) take :math:`M_2` from the squared weights' sums on the
#: grid coarsened by the largest power of two (two at the rows, up to the points' spacing
#: where they are taken at grid points) that moves no :math:`\delta_i` by more than this
#: share of ``binning_error``: the coarse grid's error bound at
#: :math:`h/\sqrt2` times :math:`s_i r^\top M_2 r \le s_i r_0` (:math:`K \le 1`), which is
#: of the order of the inverse of the rows in the kernel's reach.
SPREAD_SHARE = 0.1
#: Beyond as many rows as grid points, the noise estimate's fits, own weights and variance
#: factors (:meth:`BinnedKernel.hat_values`) are taken at every k-th point of the fit's
#: grid, at most this many bandwidths apart (k even, so that the points are on the grid
#: coarsened by two as well), and interpolated linearly at the rows. They are smooth at
#: the scale of the bandwidth; the residuals enter the noise estimate squared and
#: averaged, where an error Δ of the fit moves the mean square by Δ² (the cross term
#: averages out): at 0.15 bandwidths the interpolation moves the fit by at most 1/350 of
#: h² |ŷ''|. On 10⁶ rows in 2-D (h = 0.02, every fourth point of a 1485² grid) the fits
#: moved by 7e-5 (noise sd 0.2), the own weights and variance factors by 2 % and 1 % at
#: the data's edge (where they change fastest; they enter δ at 1e-5), and 4 columns are
#: gathered from a sixteenth of the points instead of 15 from all of them.
HAT_NODE_SPACING = 0.15
#: The local noise level (a ratio of kernel averages at h, :meth:`BinnedKernel.
#: node_averages`) and the interval's variance sums that bin it (at :math:`h/\sqrt2`,
#: :meth:`BinnedKernel.field_variance_sums`) are taken on the fit's grid coarsened by the
#: largest power of two whose binning error bound at :math:`h/\sqrt2` stays below this
#: (:meth:`BinnedKernel.noise_factor`). The bound is relative to the variance, whose
#: square root the width is; the noise level itself is an average of squared residuals
#: whose sampling error is :math:`\sqrt{2/n_h}` with :math:`n_h` the rows in the kernel's
#: reach (4 % at a thousand). The bound is a worst case over positions in a cell: on
#: 10⁶ rows in 2-D with a noise level that varies (h = 0.02, a 1485² grid, coarsened by
#: two: a bound of 1.6 %) the widths of 1 000 intervals moved by at most 0.15 %, and by
#: 0.65 % coarsened by four (a bound of 6.3 %). Where the local line extrapolates, half a
#: bandwidth to a bandwidth into a gap of the data, the error comes nearer the bound: on
#: 30 000 rows with a gap of ten bandwidths the widths there moved by up to 0.75 % in 2-D
#: and 0.27 % in 1-D (1.2e-4 and 1.8e-4 from the exact ones on the fit's own grid).
NOISE_TOLERANCE = 0.02
#: Residual degrees of freedom at or below this leave nothing to bootstrap (the exact
#: path's limit).
MIN_DOF = 1e-9


def _positions(source, target):
    """Where each exponent of ``target`` (rows) sits among those of ``source``."""
    lookup = {tuple(e): k for k, e in enumerate(np.asarray(source).tolist())}
    return np.array([lookup[tuple(e)] for e in np.asarray(target).tolist()], dtype=int)


def _table_rows(sums, points):
    """The rows of the gridded ``sums`` at integer ``points`` of their data grid (n, d)."""
    extended = points + np.asarray(sums.offset())
    return sums.table[np.ravel_multi_index(tuple(extended.T), sums.grid.shape)]


def _coarsened(located, factor=2):
    """:func:`locate`'s answer on a grid whose cells ``factor`` divides, moved to that grid
    coarsened by ``factor`` (:func:`~kernattn.smoother._binned.binning.coarsen`)."""
    index, fraction, inside = located
    return index // factor, (index % factor + fraction) / factor, inside


def _coarse_spread(grid, h, degree, sample_weight, own, factor=2):
    """Whether the factors δ of the noise estimate at rows of ``sample_weight`` and
    ``own`` (:math:`r_0`) may take the squared weights' sums on ``grid`` coarsened by
    ``factor`` (:data:`SPREAD_SHARE`): only where no row comes near the variance rule's
    bound either (the factor is at most :math:`r_0`), so that the rule holds no row back
    whatever their error."""
    cells = np.array([n - 1 for n in grid.shape])
    if not np.all(cells % factor == 0) or not len(own):
        return False
    coarse_error = binning_error(factor * grid.spacing, h / math.sqrt(2.0), degree)
    with np.errstate(invalid="ignore"):
        largest = np.max(sample_weight * own)
        small = np.max(own) <= NEAR_BOUND * VARIANCE_BOUND
    return bool(
        small and largest * coarse_error <= SPREAD_SHARE * binning_error(grid.spacing, h, degree)
    )


@lru_cache
def edge_resolution(degree):
    """The local design's resolution (:func:`~kernattn.smoother._binned.solve.
    solve_local_polynomial`'s ``resolution``) at the edge of dense data, where the Gaussian
    kernel sees keys on one side only: 0.363, 0.0827 and 0.0167 for degrees 1 to 3 (the
    same at a corner in two dimensions)."""
    k = np.arange(2 * degree + 1)
    # E[u^k; u ≥ 0] of the standard normal, the half-line design's moments.
    moments = np.array([0.5 * 2 ** (j / 2) * math.gamma((j + 1) / 2) for j in k])
    moments /= math.sqrt(math.pi)
    values = np.zeros((1, degree + 1, 1))
    return float(
        solve_local_polynomial(moments[None], values, degree, 1, return_resolution=True)[2][0]
    )


class BinnedKernel:
    """The binned local-polynomial sums of the training rows at one bandwidth.

    Parameters
    ----------
    X : ndarray of shape (n, d), d ≤ 2
        The training inputs (positive weight).
    values : ndarray of shape (n, t)
        The targets as the estimator sums them (centered and scaled).
    sample_weight : ndarray of shape (n,)
    bandwidth : ndarray of shape (d,)
        The Gaussian kernel's standard deviation per input.
    degree : int
    tol : float
        The binning tolerance, relative to the spread of the targets.

    Attributes
    ----------
    grid_shape : tuple
        Points per axis of the data's grid.
    binning_error : float
        The error bound of that grid (:func:`kernattn.smoother._binned.error.binning_error`).
    """

    def __init__(self, X, values, sample_weight, bandwidth, degree, tol=TOLERANCE, check=True):
        X = np.asarray(X, dtype=float)
        self.n_dims = X.shape[1]
        self.n_outputs = values.shape[1]
        self.degree = int(degree)
        self.bandwidth = np.asarray(bandwidth, dtype=float)
        # The grid lives in units of a power of two per input (exact): inputs near the
        # ends of the float range keep every digit and no sum overflows.
        self._unit = power_of_two_scale(X, axis=0)
        X = X / self._unit
        h = self._h = self.bandwidth / self._unit
        # An even number of cells per axis: the check below compares with the grid
        # coarsened by two.
        grid = make_grid(X, h, degree=self.degree, tol=tol, levels=1)
        self.grid_shape = grid.shape
        self.binning_error = float(binning_error(grid.spacing, h, self.degree))
        t = self.n_outputs
        # One pass over the rows bins the values and their squares; the squares' sums
        # (for return_std) and the squared weights' (for the variance rule) are taken
        # on first use, from these bins.
        self._weights = (
            np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        )
        both = bin_targets(X, np.hstack([values, values**2]), grid, sample_weight)
        self._bins = Bins(grid, both.counts[..., : 1 + t], both.center[:t])
        squares = np.concatenate([both.counts[..., :1], both.counts[..., 1 + t :]], axis=-1)
        self._square_bins = Bins(grid, squares, both.center[t:])
        self.sums = grid_sums(self._bins, h, self.degree)
        d, p = self.n_dims, self.degree
        moments = moment_exponents(p, d)
        basis = basis_exponents(p, d)
        design = monomial_exponents(d, 2 * p)
        fit = monomial_exponents(d, p)
        # polynomial_estimate's layout: [Σv, Σv², Σ1, Σφ_γ (1 ≤ |γ| ≤ 2p), Σ v φ_α (α ≠ 0)].
        self._design = _positions(moments, design)
        self._fit = _positions(basis, fit)
        self._basis_in_moments = _positions(moments, basis)
        self._n_moments = len(moments)
        self._n_basis = len(basis)
        self._halving = 2.0 ** (-0.5 * design.sum(axis=1))
        # The Gram matrix of the basis, as positions among the moments.
        pairs = basis[:, None, :] + basis[None, :, :]
        self._pairs = _positions(moments, pairs.reshape(-1, d)).reshape(len(basis), -1)
        self._pair_halving = 2.0 ** (-0.5 * pairs.sum(axis=2))
        self._center = self._bins.center  # (t,)
        self._t = t
        self._spread_floor = CHECK_FLOOR * np.sqrt(
            np.maximum(np.average(values**2, axis=0, weights=sample_weight) - self._center**2, 0)
        )
        self._exact_cells = self._checked_cells() if check else None
        #: Noise estimates of the fit's intervals, by kind (see BinnedInference).
        self.noise_cache = {}
        self._coarse_weights, self._coarse_squared = {}, {}
        self.exact_cells = 0 if self._exact_cells is None else int(self._exact_cells.sum())

    @cached_property
    def squared(self):
        r"""The weight moments at :math:`h/\sqrt2`: those of the squared kernel weights, up
        to :math:`2^{-|e|/2}` (for the local constant, the sum of the squared weights)."""
        # The weights alone: no value column, whose moments nothing reads.
        weights_only = Bins(self._bins.grid, self._bins.counts[..., :1], self._center[:0])
        return grid_sums(weights_only, self._h / math.sqrt(2.0), self.degree)

    @cached_property
    def weight_sums(self):
        """:attr:`sums` with its first column only, :math:`S_0`: the denominators of
        :meth:`kernel_averages` at 10⁶ rows gather one column, not all of the fit's."""
        return dataclasses.replace(self.sums, table=np.ascontiguousarray(self.sums.table[:, :1]))

    def coarse_weights(self, factor):
        """The binned weights on the data grid coarsened by ``factor`` (a power of two
        that divides every axis's cells; the binning is exact:
        :func:`~kernattn.smoother._binned.binning.coarsen`), and that grid; kept."""
        if factor == 1:
            return self._bins.counts[..., :1], self._bins.grid
        if factor not in self._coarse_weights:
            counts, grid = self.coarse_weights(factor // 2)
            self._coarse_weights[factor] = coarsen(counts, grid, 2)
        return self._coarse_weights[factor]

    def coarse_squared(self, factor):
        """:attr:`squared` on the data grid coarsened by ``factor`` (:meth:`coarse_weights`);
        kept."""
        if factor == 1:
            return self.squared
        if factor not in self._coarse_squared:
            counts, grid = self.coarse_weights(factor)
            self._coarse_squared[factor] = grid_sums(
                Bins(grid, counts, self._center[:0]), self._h / math.sqrt(2.0), self.degree
            )
        return self._coarse_squared[factor]

    @property
    def noise_squared(self):
        """:attr:`squared` on the noise grid (:attr:`noise_factor`): the interval's
        variance sums of a level that is the same everywhere."""
        return self.coarse_squared(self.noise_factor)

    def _spread_sums(self, sample_weight, own, largest=2):
        """The squared weights' sums for the factors δ at rows of ``sample_weight`` and
        ``own`` (:math:`r_0`): on the data grid coarsened by the largest power of two up to
        ``largest`` that divides ``largest`` where :func:`_coarse_spread` allows it, and
        that factor (1: the fit's own grid)."""
        factor = 2
        while largest % (2 * factor) == 0:
            factor *= 2
        while factor > 1:
            if _coarse_spread(self._bins.grid, self._h, self.degree, sample_weight, own, factor):
                return self.coarse_squared(factor), factor
            factor //= 2
        return self.squared, 1

    @cached_property
    def second(self):
        """The kernel sums of the squared values (local constant's), for ``return_std``."""
        return grid_sums(self._square_bins, self._h, 0)

    @staticmethod
    def fits(X, bandwidth, degree, n_outputs, tol=TOLERANCE):
        """Whether the sums of ``X`` at ``bandwidth`` (and those of the squared weights)
        fit in ``working_memory``."""
        unit = power_of_two_scale(X, axis=0)
        X, bandwidth = X / unit, np.asarray(bandwidth, dtype=float) / unit
        grid = make_grid(X, bandwidth, degree=degree, tol=tol, levels=1)
        if grid.size > MAX_GRID_POINTS:
            return False
        # Zero-length columns: only the shapes matter to sums_fit.
        counts = np.empty(grid.shape + (1 + n_outputs,))
        if not sums_fit(Bins(grid, counts, np.zeros(n_outputs)), bandwidth, degree):
            return False
        if not degree:
            return True
        squared = Bins(grid, counts[..., :1], np.zeros(0))
        return sums_fit(squared, bandwidth / math.sqrt(2.0), degree)

    def _estimate(self, sums, queries):
        """The unheld binned estimate at ``queries`` (m, t), and the rows whose interpolated
        sums are below the resolution (or outside the grid)."""
        columns, unserved = self._interpolated(sums, queries)
        Q = self._n_moments
        S = np.where(unserved[:, None], 1.0, columns[:, :Q])
        T = np.where(
            unserved[:, None, None], 0.0, columns[:, Q:].reshape(len(queries), -1, self._t)
        )
        if not self.degree:
            return T[:, 0] / S[:, :1] + self._center, T[:, 0] / S[:, :1] + self._center, unserved
        coefficients, _ = solve_local_polynomial(S, T, self.degree, self.n_dims)
        return coefficients[:, 0] + self._center, T[:, 0] / S[:, :1] + self._center, unserved

    def _checked_cells(self):
        r"""The cells of the data grid whose queries the exact kernel computes: those where
        the binned estimate may be farther from the exact one than ``binning_error``.

        The bound of :func:`~kernattn.smoother._binned.error.binning_error` is a first-order one
        for a
        locally uniform design. Between clusters of data (a gap several bandwidths wide)
        the kernel weights vary on the scale :math:`h/D` at a distance :math:`D` from the
        data, and near the edge of a sparse design the equivalent kernel of a high degree
        is far from the uniform design's: there the binning and interpolation errors grow
        beyond it. So the grid is checked a posteriori, at the centers of the cells of the
        grid coarsened by two (:func:`~kernattn.smoother._binned.binning.coarsen`): there the
        estimate from
        these sums is compared with the one from the coarse sums, whose error is about four
        times this grid's (it is second order in the spacing).
        Where they differ by more than ``CHECK_SHARE`` times ``binning_error`` (relative
        to the local spread of the targets), where the kernel's mass lies more than
        ``CHECK_OFFSET`` squared bandwidths away (into a gap), or where the sums are below
        their resolution, the coarse cells around the point are left to the exact kernel.
        Returns the boolean array over the cells, or ``None`` where none is left out.
        """
        grid = self._bins.grid
        counts, coarse_grid = coarsen(self._bins.counts, grid, 2)
        coarse = grid_sums(Bins(coarse_grid, counts, self._center), self._h, self.degree)
        # E_w[u_a²] = 1 + h_a² ∂²S₀/∂x_a² / S₀ (K'' = (u² − 1)K): the second difference of
        # the gridded S₀ along each axis at the nodes checked (δ ≪ h: its error is
        # (δ/h)² relative; S₀'s rounding, 1e-16 of the total, is far below the resolution).
        S0 = self.sums.table[:, 0].reshape(self.sums.grid.shape)
        offset = np.asarray(self.sums.offset())
        ratio2 = (self._h / grid.spacing) ** 2
        cells = np.array([n - 1 for n in grid.shape])
        exact = np.zeros(tuple(cells), dtype=bool)
        # The points checked: the centers of the coarse grid's cells (the nodes of odd
        # index along every axis), where the coarse estimate is interpolated and so carries
        # both the binning and the interpolation error; the coarse cells around a point
        # are left out together.
        lattices = [[np.arange(1, n, 2) for n in grid.shape]]
        flagged = []
        for axes in lattices:
            shape = tuple(len(a) for a in axes)
            size = int(np.prod(shape))
            for block in iter_query_blocks(size, 4 * self.n_columns, n_arrays=4):
                flat = np.arange(block.start, block.stop)
                position = np.column_stack(
                    [a[k] for a, k in zip(axes, np.unravel_index(flat, shape), strict=True)]
                )
                points = grid.origin + grid.spacing * position
                fine, ybar, unserved = self._estimate(self.sums, points)
                at = position + offset
                middle = S0[tuple(at.T)]
                curvature = []
                for a in range(self.n_dims):
                    step = np.eye(self.n_dims, dtype=int)[a]
                    second_difference = (
                        S0[tuple((at + step).T)] - 2.0 * middle + S0[tuple((at - step).T)]
                    )
                    with np.errstate(invalid="ignore", divide="ignore"):
                        curvature.append(1.0 + ratio2[a] * second_difference / middle)
                crude, _, unserved_coarse = self._estimate(coarse, points)
                squares, _ = self._interpolated(self.second, points)
                with np.errstate(invalid="ignore", divide="ignore"):
                    away = ~np.all(np.column_stack(curvature) <= CHECK_OFFSET, axis=1)
                    second = squares[:, 1:] / squares[:, :1] + self.second.bins.center
                    spread = np.sqrt(np.maximum(second - 2.0 * fine * ybar + fine**2, 0.0))
                    spread = np.maximum(spread, self._spread_floor)
                    error = np.abs(fine - crude) / spread
                    within = np.all(error <= CHECK_SHARE * self.binning_error, axis=1)
                bad = unserved | unserved_coarse | away | ~within
                flagged.append(position[bad])
        flagged = np.concatenate(flagged)
        if not len(flagged):
            return None
        # The cells of the coarse cells around a point: node k of this grid borders the
        # coarse cells spanning its cells k − 2 to k + 1.
        for step in np.ndindex(*(4,) * self.n_dims):
            index = np.clip(flagged - 2 + np.asarray(step), 0, cells - 1)
            exact[tuple(index.T)] = True
        return exact

    def _in_exact_cells(self, queries, located=None):
        """Whether each query lies in a cell :meth:`_checked_cells` left to the exact
        kernel (``located``: the queries' :func:`locate` on the data grid, if known)."""
        if self._exact_cells is None:
            return np.zeros(len(queries), dtype=bool)
        index, _, _ = locate(queries, self._bins.grid) if located is None else located
        cells = np.asarray(self._exact_cells.shape)
        return self._exact_cells[tuple(np.minimum(index, cells - 1).T)]

    @property
    def n_columns(self):
        """Columns of the gridded sums (for the size of query blocks)."""
        return self.sums.table.shape[1] + 2 * self.n_outputs

    def _interpolated(self, sums, queries, located=None):
        """The sums' columns at ``queries`` (m, k) and the rows the grid does not serve.

        ``located``, the queries' :func:`locate` on the data grid (of points within it:
        the training rows), spares locating them again for every table: the extended
        grid's cells are the data grid's, shifted by its offset."""
        # Beyond the data's range the local polynomial extrapolates and the binning error
        # grows with the distance (like its degree's power): those queries go exact.
        if located is None:
            _, _, inside = locate(queries, sums.bins.grid)
            table = sums.table.reshape(sums.grid.shape + (-1,))
            columns = interpolate(table, sums.grid, queries)
        else:
            index, fraction, inside = located
            index = index + np.asarray(sums.offset())
            fraction = np.ascontiguousarray(fraction.T)
            columns = interpolate_columns(sums.table, sums.grid, index, fraction).T
        with np.errstate(invalid="ignore"):
            unserved = ~inside | ~(columns[:, 0] > sums.resolution)
        return columns, unserved

    def _layout(self, columns, squared):
        """The interpolated columns in :func:`polynomial_estimate`'s layout, keys about
        the query (the squared values' column left 0: the variance rule does not read it)."""
        t, Q = self._t, self._n_moments
        S = columns[:, :Q]
        T = columns[:, Q:].reshape(len(columns), self._n_basis, t)
        # Undo the binning's centering of the targets: Σ s K y u^e = T_e + center S_e.
        T = T + self._center[None, None, :] * S[:, self._basis_in_moments][:, :, None]
        parts = [T[:, 0], np.zeros((len(columns), t)), S[:, :1], S[:, self._design[1:]]]
        if self.degree:
            parts.append(np.moveaxis(T[:, self._fit[1:]], 1, 2).reshape(len(columns), -1))
        sums = np.hstack(parts)
        return sums, squared[:, self._design] * self._halving

    def moments(self, queries, return_second=False):
        r"""The local fit at ``queries`` from the gridded sums.

        The polynomial is solved about each query (:func:`kernattn.smoother._binned.solve.
        solve_local_polynomial`); its variance factor is :math:`\sum_j l_j^2 / s_j =
        r^\top M_2 r`, with :math:`r` the first row of the inverse Gram matrix (the
        equivalent weights are :math:`l_j = s_j K_j\, r^\top U_j`) and :math:`M_2` the Gram
        matrix of the squared kernel weights.

        Returns
        -------
        mean : ndarray of shape (m, t)
            The estimate (engine units).
        second : ndarray of shape (m, t) or None
            The kernel average of the squared values (with ``return_second``).
        ybar : ndarray of shape (m, t)
            The kernel average of the values (the local constant).
        exact : ndarray of bool, shape (m,)
            The rows left to the exact kernel (their other entries are meaningless).
        """
        queries = np.asarray(queries, dtype=float) / self._unit
        columns, unserved = self._interpolated(self.sums, queries)
        unserved |= self._in_exact_cells(queries)
        t, Q = self._t, self._n_moments
        S = np.where(unserved[:, None], 1.0, columns[:, :Q])
        T = columns[:, Q:].reshape(len(columns), self._n_basis, t)
        ybar = T[:, 0] / S[:, :1] + self._center
        second = None
        if return_second:
            # The same bins and bandwidth: its S_0 is the sums' (to rounding).
            squares, _ = self._interpolated(self.second, queries)
            second = squares[:, 1:] / S[:, :1] + self.second.bins.center
        if not self.degree:
            return ybar, second, ybar, unserved
        coefficients, first_row, resolution = solve_local_polynomial(
            S,
            np.where(unserved[:, None, None], 0.0, T),
            self.degree,
            self.n_dims,
            return_resolution=True,
        )
        mean = coefficients[:, 0] + self._center
        # K ≤ 1, so M₂ ≼ M ≼ M + Λ and the variance factor is at most rᵀ(M + Λ)r = r₀:
        # only the rows where that bound is not already small need the squared sums.
        bound = NEAR_BOUND * VARIANCE_BOUND
        with np.errstate(invalid="ignore"):
            check = np.flatnonzero(~unserved & ~(first_row[:, 0] <= bound))
        exact = unserved | (resolution < RESOLUTION_SHARE * edge_resolution(self.degree))
        if len(check):
            variance, unserved_squared = self._variance_factor(queries[check], first_row[check])
            with np.errstate(invalid="ignore"):
                exact[check] |= unserved_squared | ~(variance <= bound)
        exact |= ~np.all(np.isfinite(mean), axis=1)
        return mean, second, ybar, exact

    def head_moments(self, queries, return_std, accurate_spread, exact_moments, n_keys):
        """The engine's head moments (mean, spread, held back) at ``queries``: the local
        fit from the gridded sums (:meth:`moments`), the spread refined by
        ``accurate_spread(queries, mean, spread, second)``, and the rows the grid does not
        serve (far from the data, held back or near the bound of the variance rule) from
        ``exact_moments(queries)``, in blocks against the ``n_keys`` keys."""
        mean, second, ybar, redo = self.moments(queries, return_second=return_std)
        spread = None
        if return_std:
            spread = np.maximum(second - ybar**2 + (ybar - mean) ** 2, 0.0)
            served = np.flatnonzero(~redo)
            if len(served):
                spread[served] = accurate_spread(
                    queries[served], mean[served], spread[served], second[served]
                )
        held_back = np.zeros(len(queries), dtype=bool)
        rows = np.flatnonzero(redo)
        for block in iter_query_blocks(len(rows), n_keys):
            part = rows[block]
            m, s, held = exact_moments(queries[part])
            mean[part] = m
            if return_std:
                spread[part] = s
            if held is not None:
                held_back[part] = held
        return mean, spread, held_back

    def hat_values(self, X, sample_weight=None):
        r"""What the noise estimate needs at the training rows ``X``: the fit there, the
        row's own equivalent weight per unit of its sample weight, :math:`l_i(x_i)/s_i =
        \text{first\_row}_0` (its kernel value is 1 and its monomials about itself are
        :math:`e_0`), and the variance factor :math:`\sum_j l_j(x_i)^2/s_j = r^\top M_2 r`
        (as in :meth:`moments`); ``sample_weight`` those of the rows (by default the
        weights the fit was binned with: ``X`` its rows). With more rows than the grid
        has points :data:`HAT_NODE_SPACING` bandwidths apart, from those points,
        interpolated (:meth:`_hat_values_at_nodes`); else at every row, in blocks of rows:
        every temporary stays a few MiB, reused, where whole columns of 10⁶ rows each took
        fresh memory (several times slower on a fit's first call).

        Returns
        -------
        mean : ndarray of shape (m, t)
            The estimate (engine units).
        own : ndarray of shape (m,)
        spread : ndarray of shape (m,)
        exact : ndarray of bool, shape (m,)
            The rows the grid does not serve (outside it, or whose variance factor is
            beyond the variance rule's reach: their fit may be held back): to be computed
            from the exact kernel.
        """
        X = np.asarray(X, dtype=float) / self._unit
        n = len(X)
        s = self._weights if sample_weight is None else np.asarray(sample_weight, dtype=float)
        at_nodes = self.hat_nodes(n)
        if at_nodes is not None:
            return self._hat_values_at_nodes(X, s, *at_nodes)
        mean, r = np.empty((n, self._t)), np.empty((n, self._n_basis))
        unserved, spread = np.empty(n, dtype=bool), np.empty(n)
        blocks = list(iter_query_blocks(n, self.n_columns, cache=2**20))
        located = {rows.start: locate(X[rows], self._bins.grid) for rows in blocks}
        for rows in blocks:
            mean[rows], r[rows], unserved[rows] = self._local_fit(X[rows], located[rows.start])
        own = r[:, 0]
        served = ~unserved & np.isfinite(own)
        squared, factor = self._spread_sums(s[served], own[served])
        exact = unserved.copy()
        for rows in blocks:
            cells = _coarsened(located[rows.start]) if factor == 2 else located[rows.start]
            spread[rows], unserved_squared = self._variance_factor(
                X[rows], r[rows], cells, squared
            )
            exact[rows] |= unserved_squared
        with np.errstate(invalid="ignore"):
            exact |= ~(spread <= NEAR_BOUND * VARIANCE_BOUND)
        exact |= ~np.all(np.isfinite(mean), axis=1) | ~np.isfinite(own)
        return mean, own, spread, exact

    def _hat_step(self):
        """Every how many grid points :meth:`hat_values` takes its nodes
        (:data:`HAT_NODE_SPACING`); 0 where the grid has too few points per bandwidth."""
        per_bandwidth = float(np.min(self._h / self._bins.grid.spacing))
        return 2 * int(HAT_NODE_SPACING * per_bandwidth / 2)

    def hat_nodes(self, n_rows):
        """The grid of every ``step``-th point of the data grid (:data:`HAT_NODE_SPACING`)
        and ``step``, where :meth:`hat_values` of ``n_rows`` rows takes its values there
        (more rows than those points); else ``None``."""
        step = self._hat_step()
        if not step:
            return None
        nodes = Grid(
            self._bins.grid.origin,
            self._bins.grid.spacing * step,
            tuple(-(-(k - 1) // step) + 1 for k in self.grid_shape),
        )
        return (nodes, step) if nodes.size < n_rows else None

    def hat_table(self, sample_weight, nodes, step):
        """The fits, own weights and variance factors at the ``nodes`` (:meth:`hat_nodes`)
        from the gridded sums' own rows, 0 where the grid does not serve the node, as a
        table (nodes.size, t + 2) to interpolate; where some node is not served, a last
        column says which (a row next to one is not served). ``sample_weight``: the
        rows'. Returns the table and whether it has that column."""
        mesh = np.meshgrid(*(np.arange(k) * step for k in nodes.shape), indexing="ij")
        points = np.stack([m.ravel() for m in mesh], axis=1)  # on the data grid
        # The last node along an axis can lie beyond the data, within the sums' margin.
        columns = _table_rows(self.sums, points)
        mean, r, unserved = self._fit_columns(columns, ~(columns[:, 0] > self.sums.resolution))
        own = r[:, 0]
        served = ~unserved & np.isfinite(own)
        # The largest weight against every node's own weight: at least every row's product.
        largest = np.full(int(served.sum()), np.max(sample_weight, initial=0.0))
        squared, factor = self._spread_sums(largest, own[served], largest=step)
        squared_columns = _table_rows(squared, points // factor)
        unserved |= ~(squared_columns[:, 0] > squared.resolution)
        spread = self._factor_of(squared_columns, r)
        table = np.column_stack([mean, own, spread])
        unserved |= ~np.all(np.isfinite(table), axis=1)
        table[unserved] = 0.0
        if unserved.any():
            return np.column_stack([table, unserved]), True
        return table, False

    def _hat_rows(self, values, inside, X, flagged):
        """:meth:`hat_values`'s answer from the table of :meth:`hat_table` interpolated at
        the scaled rows ``X`` (``values``, (m, k); ``inside`` the grid; ``flagged``: the
        table has the column of the nodes not served)."""
        t = self._t
        exact = ~inside | self._in_exact_cells(X)
        if flagged:
            exact |= values[:, t + 2] > 0
        with np.errstate(invalid="ignore"):
            exact |= ~(values[:, t + 1] <= NEAR_BOUND * VARIANCE_BOUND)
        return values[:, :t], values[:, t], values[:, t + 1], exact

    def _hat_values_at_nodes(self, X, sample_weight, nodes, step):
        """:meth:`hat_values` from the ``nodes`` (:meth:`hat_nodes`), interpolated at the
        rows ``X`` (scaled)."""
        table, flagged = self.hat_table(sample_weight, nodes, step)
        values, inside = interpolate_points(table, nodes, X)
        return self._hat_rows(values.T, inside, X, flagged)

    def residual_pass(self, X, values, sample_weight, noise_weight, n_jobs=None):
        r"""The noise estimate's pass over the training rows ``X`` (their ``values``
        (n, t), the binned ``sample_weight`` :math:`s`), where :meth:`hat_values` takes
        its values from grid points: the residuals :math:`e = y - \hat y`, the factors
        :math:`\delta_i = \max(1 - 2 l_i(x_i) + s_i \sum_j l_j(x_i)^2/s_j, 0)`, and the
        linear binning on the noise grid (:attr:`noise_weights`) of the columns
        :math:`[w e^2, \delta]` (``noise_weight`` :math:`w`, the weights in the unit of
        the noise estimate) times :math:`s`, which :meth:`node_averages` would bin. Block
        by block, each located once, on the noise grid: the points of :meth:`hat_nodes`
        are a coarsening of it; on ``n_jobs`` threads. ``None`` where the values are not
        taken from grid points.

        Returns
        -------
        residual : ndarray of shape (n, t)
        delta : ndarray of shape (n,)
        exact : ndarray of bool, shape (n,)
            As :meth:`hat_values`'s: their residuals and factors are placeholders, left
            out of the bins.
        bins : ndarray of shape noise_grid.shape + (t + 2,)
            The first column 0, for :meth:`node_averages`.
        """
        n = len(X)
        at_nodes = self.hat_nodes(n)
        if at_nodes is None or at_nodes[1] % self.noise_factor:
            return None
        nodes, step = at_nodes
        ratio = step // self.noise_factor
        grid = self.noise_weights[1]
        s = np.asarray(sample_weight, dtype=float)
        table, flagged = self.hat_table(s, nodes, step)
        t = self._t
        residual, delta = np.empty((n, t)), np.empty(n)
        exact = np.empty(n, dtype=bool)

        def block(rows):
            scaled = X[rows] / self._unit
            index, fraction, inside = located = locate(scaled, grid)
            at_index, at, _ = _coarsened(located, ratio)
            interpolated = interpolate_columns(
                table, nodes, at_index, np.ascontiguousarray(at.T)
            ).T
            mean, own, spread, exact[rows] = self._hat_rows(interpolated, inside, scaled, flagged)
            residual[rows] = values[rows] - mean
            with np.errstate(invalid="ignore"):
                delta[rows] = np.maximum(1.0 - 2.0 * s[rows] * own + s[rows] * spread, 0.0)
            columns = np.empty((rows.stop - rows.start, t + 1))
            columns[:, :t] = noise_weight[rows, None] * residual[rows] ** 2
            columns[:, t] = delta[rows]
            columns *= s[rows, None]
            columns[exact[rows]] = 0.0
            return bin_located(index, fraction, columns, grid)

        # Threads over blocks of rows (cache-sized: the same blocks for any number of
        # threads); their bins are added in the blocks' order.
        m = (t + 1) * 2**self.n_dims
        entries = block_entries(X, grid, t + 1)
        parts = map_query_blocks(block, n, m, n_jobs=n_jobs, n_arrays=2, cache=entries)
        counts = np.zeros((grid.size, t + 2))  # the first for node_averages' weights
        for lo, part in parts:
            counts[lo : lo + len(part), 1:] += part
        return residual, delta, exact, counts.reshape(grid.shape + (t + 2,))

    def add_to_noise_bins(self, bins, X, columns, sample_weight):
        """Add the linear binning of ``columns`` at the training rows ``X`` times their
        binned ``sample_weight`` to the noise grid's ``bins`` (:meth:`residual_pass`'s)."""
        grid = self.noise_weights[1]
        scaled = np.asarray(X, dtype=float) / self._unit
        bins[..., 1:] += linear_binning(scaled, columns, grid, sample_weight)

    def _local_fit(self, X, located):
        """The estimate, the first row of the inverse Gram matrix and the rows not served
        (:meth:`hat_values`) at scaled rows ``X`` (``located`` on the data grid)."""
        columns, unserved = self._interpolated(self.sums, X, located)
        unserved |= self._in_exact_cells(X, located)
        return self._fit_columns(columns, unserved)

    def _fit_columns(self, columns, unserved):
        """:meth:`_local_fit` from the gridded sums' ``columns`` at the points (the points
        ``unserved`` and those whose design is too weak not served)."""
        Q = self._n_moments
        S = np.where(unserved[:, None], 1.0, columns[:, :Q])
        T = np.where(
            unserved[:, None, None], 0.0, columns[:, Q:].reshape(len(columns), self._n_basis, -1)
        )
        if not self.degree:
            r = 1.0 / S[:, :1]
            return T[:, 0] * r + self._center, r, unserved
        coefficients, r, resolution = solve_local_polynomial(
            S, T, self.degree, self.n_dims, return_resolution=True
        )
        unserved |= resolution < RESOLUTION_SHARE * edge_resolution(self.degree)
        return coefficients[:, 0] + self._center, r, unserved

    def kernel_averages(self, X, columns):
        r"""The kernel averages :math:`\sum_j s_j K_j z_j / \sum_j s_j K_j` of ``columns``
        (one row per training row ``X``, with the sample weights the fit was binned with)
        at those rows, from their local-constant sums on the fit's own grid (one pass to
        bin them; the fit's grid is at least as fine as the local constant needs). The
        denominator is the fit's own :math:`S_0` (the same bins at the same bandwidth):
        only the columns are binned and summed.

        Returns
        -------
        averages : ndarray of shape (n, k)
        exact : ndarray of bool, shape (n,)
            The rows the grid does not serve (no weight within its resolution).
        """
        X = np.asarray(X, dtype=float) / self._unit
        grid = self._bins.grid
        sums, center = self._column_sums(X, columns)
        averages, exact = np.empty(columns.shape), np.empty(len(X), dtype=bool)
        for rows in iter_query_blocks(len(X), self.n_columns, cache=2**20):  # as hat_values
            located = locate(X[rows], grid)
            weights, exact[rows] = self._interpolated(self.weight_sums, X[rows], located)
            S = np.where(exact[rows], 1.0, weights[:, 0])
            averages[rows] = self._interpolated(sums, X[rows], located)[0] / S[:, None]
        return averages + center, exact

    def _column_sums(self, X, columns):
        """The local-constant sums of ``columns`` at the rows ``X`` (scaled) on the fit's
        grid, binned with the fit's weights, and the weighted mean they are centered on
        (as the bins of the values are: the FFT's rounding is then relative to the columns'
        spread, not their magnitude)."""
        center = np.average(columns, axis=0, weights=self._weights)
        grid = self._bins.grid
        bins = linear_binning(X, columns - center, grid, self._weights)
        return column_grid_sums(bins, grid, self._h), center

    @cached_property
    def noise_factor(self):
        """The coarsening of the data grid that the local noise level and its variance
        sums are taken on (:data:`NOISE_TOLERANCE`): a power of two that divides every
        axis's cells."""
        grid, h = self._bins.grid, self._h / math.sqrt(2.0)
        factor = 1
        while all((k - 1) % (2 * factor) == 0 for k in grid.shape) and (
            binning_error(2 * factor * grid.spacing, h, self.degree) <= NOISE_TOLERANCE
        ):
            factor *= 2
        return factor

    @property
    def noise_weights(self):
        """The binned weights on the noise grid (:attr:`noise_factor`; exactly those of
        binning the rows there: :func:`~kernattn.smoother._binned.binning.coarsen`), and
        that grid."""
        return self.coarse_weights(self.noise_factor)

    def node_averages(self, X, columns, binned=None):
        r""":meth:`kernel_averages` at the nodes of the noise grid (:attr:`noise_weights`)
        instead of at the rows ``X``: the gridded sums there need no interpolation, and a
        smooth average (a local noise level) is then binned as its value at the node times
        the node's weight (:meth:`field_variance_sums`), with no second pass over the rows.
        ``binned``: the columns' bins on the noise grid where they are known, after a
        first column left for the weights (:meth:`residual_pass`; overwritten).

        Returns
        -------
        averages : ndarray of shape noise_grid.shape + (k,)
        served : bool
            Whether every node that holds weight has its :math:`S_0` above the sums'
            resolution (where it does not, the average is left to the rows' exact sums).
        """
        weights, grid = self.noise_weights
        if binned is None:
            X = np.asarray(X, dtype=float) / self._unit
            binned = np.empty(grid.shape + (1 + columns.shape[1],))
            binned[..., 1:] = linear_binning(X, columns, grid, self._weights)
        binned[..., :1] = weights
        # Not centered, as the fit's values are: the columns are not negative (the
        # squared residuals and the factors δ of a noise level), and their averages are
        # read to NOISE_TOLERANCE, far above the FFT's rounding of their magnitude.
        sums = column_grid_sums(binned, grid, self._h)
        nodes = sums.on_data_nodes()  # a view of the table
        weight = nodes[..., 0]
        served = bool(np.all((weight > sums.resolution) | ~(weights[..., 0] > 0)))
        with np.errstate(divide="ignore", invalid="ignore"):
            averages = nodes[..., 1:] / weight[..., None]
        return averages, served

    def node_values(self, X, field):
        """A field given at the noise grid's nodes (noise_grid.shape + (k,)) at the rows
        ``X`` (linear interpolation)."""
        return interpolate(field, self.noise_weights[1], np.asarray(X, dtype=float) / self._unit)

    def field_variance_sums(self, field, weight_unit=1.0):
        r"""The squared kernel's weight moments of :math:`s_j^2 v_j` (what
        :meth:`variance` bins) for target variances :math:`v_j = \sigma^2(x_j)/s'_j`,
        with :math:`s' = s / u` the fit's weights in the unit ``weight_unit`` and a noise
        level :math:`\sigma^2` given at the noise grid's nodes (noise_grid.shape + (t,)):
        :math:`s_j^2 v_j = u\, s_j \sigma^2(x_j)`, binned as the node's binned weight
        times the field there, which equals binning the field's interpolation at the rows
        to second order in the grid's spacing. One list entry per output, the sums and
        their factor (1), as :meth:`variance` reads them (``None`` where it is all 0)."""
        counts, _ = self.noise_weights
        return self.binned_variance_sums(counts * weight_unit * field, 1.0)

    def binned_variance_sums(self, binned, factor):
        r"""The squared kernel's weight moments (as :meth:`variance` reads them) of columns
        :math:`s_j^2 v_j` already binned on the noise grid (``binned``, noise_grid.shape +
        (t,)), one list entry per output with its ``factor`` (``None`` where it is all
        0)."""
        grid = self.noise_weights[1]
        out = []
        for o in range(binned.shape[-1]):
            column = np.ascontiguousarray(binned[..., o : o + 1])
            if not np.any(column > 0):
                out.append(None)
                continue
            bins = Bins(grid, column, self._center[:0])
            out.append((grid_sums(bins, self._h / math.sqrt(2.0), self.degree), factor))
        return out

    def _variance_factor(self, queries, first_row, located=None, sums=None):
        r""":math:`\sum_j l_j^2 / s_j = r^\top M_2 r` at ``queries`` (``first_row`` is
        :math:`r`, (m, P)), with the rows the squared weights' grid does not serve
        (``sums``: those squared weights' sums, :attr:`squared` by default)."""
        sums = self.squared if sums is None else sums
        squared, unserved_squared = self._interpolated(sums, queries, located)
        return self._factor_of(squared, first_row), unserved_squared

    def _factor_of(self, squared, first_row):
        """:math:`r^\top M_2 r` from the squared weights' sums ``squared`` (m, Q)."""
        gram = squared[:, self._pairs] * self._pair_halving  # (m, P, P)
        return np.einsum("mp,mpq,mq->m", first_row, gram, first_row)

    def variance(self, queries, keys, target_variance, key=None):
        r"""The variance of the estimate, :math:`\sum_j l_j(x)^2\, v_j`, at ``queries``
        for targets of variance :math:`v_j` (``target_variance``, (n, t), at the training
        rows ``keys``), from gridded sums.

        With :math:`l_j = s_j K_j\, r^\top U_j` (:meth:`moments`), the sum is
        :math:`r^\top M_v r` with :math:`M_v = \sum_j s_j^2 v_j K_j^2 U_j U_j^\top`: the
        weight moments of the binned column :math:`s_j^2 v_j` at the bandwidth
        :math:`h/\sqrt2` (:math:`K^2(u) = K(\sqrt2 u)`), times :math:`2^{-|e|/2}`, as
        the variance rule's squared sums are, on the noise grid (:attr:`noise_factor`).
        :math:`O(n)` once per column, then :math:`O(1)` per query.

        With ``key``, the sums are kept in :attr:`noise_cache` under it (the same
        ``target_variance`` for every call with that key; ``None`` once they are there,
        as :meth:`field_variance_sums` puts them).

        Returns
        -------
        variance : ndarray of shape (m, t)
        exact : ndarray of bool, shape (m,)
            The rows the grid does not serve (as :meth:`moments`'s).
        """
        queries = np.asarray(queries, dtype=float) / self._unit
        keys = np.asarray(keys, dtype=float) / self._unit
        columns, unserved = self._interpolated(self.sums, queries)
        unserved |= self._in_exact_cells(queries)
        Q = self._n_moments
        S = np.where(unserved[:, None], 1.0, columns[:, :Q])
        T = np.zeros((len(queries), self._n_basis, 1))
        if self.degree:
            _, r = solve_local_polynomial(S, T, self.degree, self.n_dims)
        else:
            r = 1.0 / S[:, :1]
        cached = None if key is None else self.noise_cache.get(("variance", key))
        if cached is None:
            t = target_variance.shape[1]
            cached = [self._variance_sums(keys, target_variance[:, o]) for o in range(t)]
            if key is not None:
                self.noise_cache["variance", key] = cached
        out = np.zeros((len(queries), len(cached)))
        exact = unserved.copy()
        read = {}  # outputs of the same sums (a constant noise level) read them once
        for o, entry in enumerate(cached):
            if entry is None:
                continue
            sums, factor = entry
            if id(sums) not in read:
                squared, unserved_squared = self._interpolated(sums, queries)
                if self.degree:
                    gram = squared[:, self._pairs] * self._pair_halving
                    value = np.einsum("mp,mpq,mq->m", r, gram, r)
                else:
                    value = squared[:, 0] * r[:, 0] ** 2
                read[id(sums)] = value
                exact |= unserved_squared & ~(squared[:, 0] == 0)
            out[:, o] = factor * read[id(sums)]
        exact |= ~np.all(np.isfinite(out), axis=1)
        return np.maximum(out, 0.0), exact

    def _variance_sums(self, keys, target_variance):
        """The squared kernel's weight moments of the column ``s_j² v_j``, binned on the
        noise grid (:attr:`noise_factor`), and their factor 1 (``None`` where it is all
        0)."""
        weights = self._weights**2 * target_variance
        if not np.any(weights > 0):
            return None
        grid = self.noise_weights[1]
        bins = bin_targets(keys, np.zeros((len(keys), 0)), grid, weights)
        return grid_sums(bins, self._h / math.sqrt(2.0), self.degree), 1.0

    def level_variance_sums(self, level, weight_unit=1.0):
        r""":meth:`field_variance_sums` for a noise level that is the same everywhere
        (``level``, (t,)): :math:`s_j^2 v_j = u\,\sigma^2 s_j`, so the sums are those of
        the squared weights on the noise grid (:attr:`noise_squared`, shared with the
        noise estimate's factors where that grid is coarsened by two) times
        :math:`u\,\sigma^2`: no binning and no transform of their own."""
        factors = np.asarray(level, dtype=float) * weight_unit
        return [(self.noise_squared, float(f)) if f > 0 else None for f in factors]

    def held_back_rows(self, X, own_weight, own_values):
        """Whether the left-out local polynomial of each of the training rows ``X`` is
        held back (and which rows are alone: no other row within the kernel's reach).

        The row's own contribution to the interpolated sums is known in closed form
        (:func:`kernattn.smoother._binned.left_out.own_moments`): ``own_weight`` (the
        weights of the row and its exact duplicates) times it comes off the weight
        moments, times ``own_values`` (their weighted values, (m, t)) off the value
        moments, as the exact estimator leaves a row and its duplicates out.
        """
        held_back = np.zeros(len(X), dtype=bool)
        if not self.degree:
            return held_back, held_back.copy()
        X = np.asarray(X, dtype=float) / self._unit
        plain = self._left_out(self.sums, X, own_weight, own_values)
        alone = ~(plain[:, 0] > self.sums.resolution)
        # As in moments: the variance factor is at most r₀ (K ≤ 1); the squared weights'
        # sums only where that bound is not already small.
        Q = self._n_moments
        S = np.where(alone[:, None], 1.0, plain[:, :Q])
        T = np.zeros((len(X), self._n_basis, self._t))
        _, first_row = solve_local_polynomial(S, T, self.degree, self.n_dims)
        with np.errstate(invalid="ignore"):
            rows = np.flatnonzero(~alone & ~(first_row[:, 0] <= NEAR_BOUND * VARIANCE_BOUND))
        if len(rows):
            squared = self._left_out(self.squared, X[rows], own_weight[rows], None)
            sums, squared_sums = self._layout(plain[rows], squared)
            origin = np.zeros((len(rows), self.n_dims))
            fit = polynomial_estimate(
                sums, squared_sums, origin, self._t, self.n_dims, self.degree
            )
            held_back[rows] = fit.held_back
        return held_back, alone

    def held_back_share(self, X, values, sample_weight, n_rows):
        """The share of at most ``n_rows`` training rows (evenly spread in their canonical
        order, sorted by inputs) whose left-out local polynomial is held back, each row
        left out with its exact duplicates (:meth:`held_back_rows`); ``values`` the rows'
        values as binned."""
        n = len(X)
        if n < 2:
            return 0.0
        rows = np.unique(np.linspace(0, n - 1, min(n, n_rows)).round().astype(int))
        # Exact duplicates are adjacent: the rows are in canonical order, sorted by inputs.
        first = np.ones(n, dtype=bool)
        first[1:] = np.any(X[1:] != X[:-1], axis=1)
        group = np.cumsum(first) - 1
        own_weight = np.bincount(group, sample_weight)[group[rows]]
        own_values = np.column_stack(
            [
                np.bincount(group, sample_weight * values[:, o])[group[rows]]
                for o in range(values.shape[1])
            ]
        )
        held_back, alone = self.held_back_rows(X[rows], own_weight, own_values)
        counted = ~alone
        return float(held_back[counted].mean()) if np.any(counted) else 0.0

    def _left_out(self, sums, X, own_weight, own_values):
        """The interpolated columns of ``sums`` at training rows with their own share
        (``own_weight``; ``own_values`` for the value moments, if given) removed."""
        moments = moment_exponents(self.degree, self.n_dims)
        _, fraction, _ = locate(X, sums.grid)
        ratio = sums.grid.spacing / sums.bandwidth
        own = own_moments(np.ascontiguousarray(fraction.T), ratio, moments).T  # (m, Q)
        columns, _ = self._interpolated(sums, X)
        Q = self._n_moments
        columns[:, :Q] -= own_weight[:, None] * own
        if own_values is not None:
            # Value moments: own basis moments times the own (centered) values.
            t = self._t
            centered = own_values - own_weight[:, None] * self._center[None, :]
            T = columns[:, Q:].reshape(len(X), self._n_basis, t)
            T -= own[:, self._basis_in_moments][:, :, None] * centered[:, None, :]
            columns[:, Q:] = T.reshape(len(X), -1)
        return columns


class DeferredLocalPolynomials(LocalPolynomials):
    """:class:`~kernattn._local.fits.LocalPolynomials` of the exact kernel ``heads``'s
    keys, built on first use.

    On the binned tier the exact kernel's local polynomials serve only the rows handed
    back to the exact kernel and the methods that need every weight (``attention_weights``,
    ``gradient``, ``predict_interval``); their columns (several per training row), and the
    kernel's projected keys they are built from, would cost more to build at fit than the
    whole binned fit, so they wait until asked for. The build is the same object's, once
    (two threads that both build it build the same).

    Parameters
    ----------
    heads : SoftmaxHeads
        The exact kernel (one head); its keys are taken when the build needs them.
    value_columns : DeferredValueColumns
        The estimator's value columns, built when the build needs them.
    values, degree, dims, sample_weight
        As :class:`~kernattn._local.fits.LocalPolynomials`'s.
    """

    def __init__(self, heads, value_columns, values, degree, dims, sample_weight=None):
        self.dims = np.asarray(dims, dtype=int)
        self.degree = int(degree)
        self.total = 2 * values.shape[1]
        self._arguments = (heads, value_columns, values, sample_weight)

    @cached_property
    def _built(self):
        heads, value_columns, values, sample_weight = self._arguments
        return LocalPolynomials(
            heads.keys(0), value_columns.columns, values, self.degree, self.dims, sample_weight
        )

    @property
    def keys(self):
        return self._built.keys

    @property
    def columns(self):
        return self._built.columns

    @property
    def design_columns(self):
        return self._built.design_columns

    @property
    def squared_columns(self):
        return self._built.squared_columns

    @property
    def sample_weight(self):
        return self._built.sample_weight

    @property
    def value_columns(self):
        return self._built.value_columns

    @property
    def values(self):
        return self._built.values


class BinnedInference(LinearSmootherInference):
    r""":class:`~kernattn._engine.inference.LinearSmootherInference` of a fit on the binned tier.

    The noise estimate needs the residual and the factor :math:`\delta_i = 1 - 2 l_i(x_i)
    + s_i \sum_j l_j(x_i)^2 / s_j` at every training row, and for ``noise="local"`` their
    kernel averages: from every row's exact weights that is :math:`O(n^2)`, here
    :math:`O(n)` plus the grid (:meth:`BinnedKernel.hat_values` at the rows, and the
    averages at the grid's nodes, :meth:`noise_field`), within the binning tolerance. Per
    query, the variances
    (:meth:`BinnedKernel.variance`) and the bootstrap's quantiles
    (:meth:`bootstrap_deviation_quantiles`) come from gridded sums too, kept with the fit;
    rows the grid does not serve, and the gradients, read their exact weights
    (:math:`O(n)` per query).

    Parameters
    ----------
    binned : BinnedKernel
        The fit's gridded sums (of the same ``keys`` and ``values``).
    binned_weight : ndarray of shape (n,)
        The sample weights the grid was binned with.
    **kwargs
        As :class:`~kernattn._engine.inference.LinearSmootherInference`'s.
    """

    def __init__(self, *, binned, binned_weight, **kwargs):
        super().__init__(**kwargs)
        self.binned = binned
        self.binned_weight = np.asarray(binned_weight, dtype=float)

    def noise_field(self):
        r"""The local noise level :math:`\sigma^2` at the nodes of the fit's grid
        (grid.shape + (n_outputs,)), or ``None`` where some node with weight is beyond the
        sums' resolution (the rows then average their own exact sums).

        The local noise is a ratio of two kernel averages
        (:func:`~kernattn._engine.inference.local_noise`), a smooth function of
        :math:`x`: taken at the nodes from their gridded sums, it needs no gather at the
        rows, and the variance's sums bin it from the nodes
        (:meth:`BinnedKernel.field_variance_sums`). One pass over every training row (the
        residuals), kept with the fit's gridded sums."""
        cache = self.binned.noise_cache
        if "field" not in cache:
            columns, pooled = self._noise_columns()
            bins = cache.get("noise bins")
            averages, served = self.binned.node_averages(self.keys, columns, bins)
            cache["field"] = local_noise(averages, pooled) if served else None
        return cache["field"]

    def noise_variance(self, noise="local"):
        # The local noise: the field at the rows where it serves, else the rows' own
        # averages.
        cache = self.binned.noise_cache
        if noise not in cache:
            field = self.noise_field() if noise == "local" else None
            if field is None:
                cache[noise] = super().noise_variance(noise)
            else:
                cache[noise] = self.binned.node_values(self.keys, field)
        return cache[noise]

    def mean_variance(self, X, noise="local"):
        """``Var ŷ(x) = Σ_i l_i(x)² σ²(x_i)/s_i`` from the gridded sums
        (:meth:`BinnedKernel.variance`), with the rows the grid does not serve from their
        exact weights."""
        cache = self.binned.noise_cache
        if ("variance", noise) not in cache:
            _, unit = self._weight_unit()
            if noise == "global":  # the same level everywhere
                _, pooled = self._noise_columns()
                cache["variance", noise] = self.binned.level_variance_sums(pooled, unit)
            elif (field := self.noise_field()) is not None:
                cache["variance", noise] = self.binned.field_variance_sums(field, unit)
        # l_i in the grid's weights: v_i = σ²(x_i)/s_i is each target's own variance (the
        # rows' own, binned, where the sums are not yet there).
        target_noise = None if ("variance", noise) in cache else self._scaled_noise(noise)
        variance, exact = self.binned.variance(X, self.keys, target_noise, key=noise)
        rows = np.flatnonzero(exact)
        if len(rows):
            target_noise = self._scaled_noise(noise)
            W = np.asarray(self.weights(X[rows]), dtype=np.float64)
            variance[rows] = (W * W) @ target_noise
        return variance

    def _weight_unit(self):
        """The row of the largest weight and the unit of the weights the grid was binned
        with, in the normalized ones (``sample_weight``)."""
        top = int(np.argmax(self.sample_weight))
        return top, self.binned_weight[top] / self.sample_weight[top]

    def bootstrap_deviation_quantiles(self, X, alpha, noise, n_bootstrap, random_state):
        r"""The bootstrap's quantiles of :math:`D(x) = \sum_i l_i(x)\, e^*_i` from the
        gridded sums: :math:`D(x)` is a sum over every row in the kernel's reach (thousands
        where the binned tier serves), whose bootstrap distribution is normal to well within
        the Monte Carlo error of ``n_bootstrap`` draws, with the bootstrap's own variance
        :math:`\sum_i l_i(x)^2 \operatorname{Var} e^*_i` (:meth:`BinnedKernel.variance`):
        :math:`\operatorname{Var} e^*_i = e_i^2\, n/\bar\delta` for the wild bootstrap
        (the rescaled residual with a random sign), the pooled, centred rescaled residuals'
        variance over :math:`s_i` for the residual bootstrap. So ``n_bootstrap`` standard
        normal draws (from ``random_state``, shared by every query and output, as the
        replicates of the exact bootstrap are) are scaled by each query's standard
        deviation: :math:`O(n)` once per fit and noise model, then :math:`O(1)` per query
        and draw. The wild bootstrap's binned variances are the squared residuals that the
        noise estimate's pass bins (:meth:`BinnedKernel.residual_pass`), rescaled. Rows
        the grid does not serve take the variance from their exact weights.

        Returns
        -------
        lower, upper : ndarray of shape (n_queries, n_outputs)
        """
        cache = self.binned.noise_cache
        key = ("bootstrap", noise)
        if key not in cache:
            cache[key] = self._bootstrap_variance(noise)
        target_variance = cache[key]
        if noise != "global" and ("variance", key) not in cache and "noise bins" in cache:
            # The wild bootstrap's s_j² Var e*_j = (u n/Σδ) s_j w_j e_j²: the local noise's
            # first columns, binned with the residuals (w the weights in the unit u).
            residual, delta = self.residuals()
            _, unit = self._weight_unit()
            bins = cache["noise bins"][..., 1 : 1 + residual.shape[1]]
            factor = unit * len(residual) / delta.sum()
            cache["variance", key] = self.binned.binned_variance_sums(bins, factor)
        if noise == "global" and ("variance", key) not in cache:
            # The residual bootstrap's errors: one variance per unit of weight.
            top, unit = self._weight_unit()
            level = target_variance[top] * self.sample_weight[top]  # σ² of a unit weight
            cache["variance", key] = self.binned.level_variance_sums(level, unit)
        variance, exact = self.binned.variance(X, self.keys, target_variance, key=key)
        rows = np.flatnonzero(exact)
        if len(rows):
            W = np.asarray(self.weights(X[rows]), dtype=np.float64)
            variance[rows] = (W * W) @ target_variance
        rng = check_random_state(random_state)
        generator = np.random.default_rng(rng.randint(np.iinfo(np.int32).max))
        draws = generator.standard_normal(n_bootstrap)
        q_low, q_high = np.quantile(draws, [alpha / 2.0, 1.0 - alpha / 2.0])
        deviation = np.sqrt(variance)
        return q_low * deviation, q_high * deviation

    def _bootstrap_variance(self, noise):
        """Each bootstrap error's variance ``Var e*_i`` (n, t), as the exact bootstrap draws
        them (:meth:`LinearSmootherInference.bootstrap_deviation_quantiles`)."""
        residual, delta = self.residuals()
        n = len(residual)
        dof = delta.sum()
        if not dof > MIN_DOF:
            raise ValueError(
                "the smoother reproduces its training targets (residual degrees of freedom "
                f"n − 2 tr S + tr SᵀS = {dof:.3g}): there are no residuals to bootstrap. "
                "Use a larger bandwidth."
            )
        if noise != "global":
            return residual**2 * (n / dof)
        standardized = residual * np.sqrt(self.sample_weight * (n / dof))[:, None]
        pooled = np.var(standardized, axis=0)
        return pooled[None, :] / self.sample_weight[:, None]

    def residuals(self):
        if "residuals" in self.binned.noise_cache:
            return self.binned.noise_cache["residuals"]
        residual, delta = self._grid_residuals()
        self.binned.noise_cache["residuals"] = residual, delta
        return residual, delta

    def _grid_residuals(self):
        passed = self.binned.residual_pass(
            self.keys, self.values, self.binned_weight, self.sample_weight, self.n_jobs
        )
        if passed is not None:
            residual, delta, exact, bins = passed
            rows = np.flatnonzero(exact)
            if len(rows):
                residual[rows], delta[rows] = self._residuals_of(rows)
                columns = np.column_stack(
                    [self.sample_weight[rows, None] * residual[rows] ** 2, delta[rows]]
                )
                self.binned.add_to_noise_bins(
                    bins, self.keys[rows], columns, self.binned_weight[rows]
                )
            # The local noise's columns, binned in the same pass (noise_field).
            self.binned.noise_cache["noise bins"] = bins
            return residual, delta
        mean, own, spread, exact = self.binned.hat_values(self.keys, self.binned_weight)
        s = self.binned_weight
        residual = self.values - mean
        with np.errstate(invalid="ignore"):
            delta = np.maximum(1.0 - 2.0 * s * own + s * spread, 0.0)
        rows = np.flatnonzero(exact)
        if len(rows):
            residual[rows], delta[rows] = self._residuals_of(rows)
        return residual, delta

    def _kernel_averages(self, columns):
        out, exact = self.binned.kernel_averages(self.keys, columns)
        rows = np.flatnonzero(exact)
        if len(rows):
            K = np.asarray(self.kernel_weights(self.keys[rows]), dtype=np.float64)
            out[rows] = K @ columns
        return out
