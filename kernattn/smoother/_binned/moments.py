r"""The local-polynomial moments at every grid point: correlations of the bins with the
sampled kernel, direct or by FFT.

**Truncation.** The kernel is sampled out to :data:`CUTOFF` bandwidths, where it falls
below the float64 epsilon, so truncation adds nothing to the binning error, and the sums
are kept on the grid extended by :data:`MARGIN` bandwidths on every side: a query just
outside the data is interpolated like any other.
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy import fft as sp_fft
from scipy import ndimage, signal

from kernattn._core.blocks import effective_n_jobs
from kernattn.smoother._binned.binning import Bins
from kernattn.smoother._binned.checks import check_bandwidth, check_degree
from kernattn.smoother._binned.exponents import basis_exponents, moment_exponents
from kernattn.smoother._binned.grid import Grid, grid_fits

#: The kernel is sampled out to this many bandwidths: exp(−u²/2) is below the float64
#: epsilon beyond it, so truncating there changes no sum.
CUTOFF = math.sqrt(-2.0 * math.log(np.finfo(float).eps))


#: The sums are kept on the data grid extended by this many bandwidths per side; queries
#: farther out are computed directly from the bins.
MARGIN = 2.0


#: Interpolated sums S_0 below this fraction of the total weight are recomputed directly
#: from the bins: FFT rounding (about 1e-16 of the total) could dominate them.
RESOLUTION = 1e-10


#: Frequencies of the taps' spectrum below this share of its largest are dropped
#: (:func:`_kept_frequencies`).
SPECTRAL_FLOOR = 1e-14


#: Direct convolution beats the FFT while taps < FFT_CROSSOVER · log2(length + taps)
#: (measured with scipy 1.17 on one core: direct costs about 0.8 ns per tap and cell,
#: the FFT about half a direct tap per log2 of the padded length).
FFT_CROSSOVER = 2.0


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

    def on_data_nodes(self):
        """The table at the points of the data grid: a view of shape (data grid's shape)
        + (Q + P t,)."""
        index = tuple(
            slice(o, o + m) for o, m in zip(self.offset(), self.bins.grid.shape, strict=True)
        )
        return self.table.reshape(self.grid.shape + (-1,))[index]

    def on_data_grid(self):
        """(S (size, Q), T (size, P, t)) at the points of the data grid, row-major."""
        rows = self.on_data_nodes().reshape(self.bins.grid.size, -1)
        S, T = self.split(rows.T)
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
    h = check_bandwidth(bandwidth, d)
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
    h = check_bandwidth(bandwidth, d)
    degree = check_degree(degree)
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

    # Rows first (every query gathers one row of the table), each column written once.
    table = np.empty(ext_shape + (n_cols,))
    Q = len(moments)

    def destinations(e):
        """Where the weight column and the value columns of exponent ``e`` go."""
        k = next(i for i, m in enumerate(moments) if tuple(m) == tuple(e))
        if tuple(e) not in value_pos:
            return [k]
        start = Q + value_pos[tuple(e)] * t
        return [k] + list(range(start, start + t))

    targets = [(e, destinations(e)) for e in moments]
    if not any(_prefer_direct(grid.shape[a], 2 * reach[a] + 1) for a in range(d)):
        # The transforms are circular: a length of n + r + m keeps the wrapped tail of the
        # taps (reach r) off the kept points (m beyond the data on either side), which the
        # full correlation's n + 2r would keep off every point.
        lengths = [
            sp_fft.next_fast_len(n + r + m, real=True)
            for n, r, m in zip(grid.shape, reach, margin, strict=True)
        ]
        _fft_columns(counts, lengths, reversed_taps, targets, full, table)
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
                    table[..., k] = out[..., c]
    table = table.reshape(-1, n_cols)
    origin = grid.origin - np.array(margin) * grid.spacing
    ext = Grid(origin, grid.spacing, ext_shape)
    total = float(counts[..., 0].sum())
    return GridSums(ext, table, bins, h, degree, RESOLUTION * total)


def column_grid_sums(counts, grid, bandwidth, *, cutoff=CUTOFF):
    r"""The plain kernel sums :math:`\sum_k c_k K((g_k - g)/h)` of every column of
    ``counts`` (``grid.shape + (k,)``) at the points of the extended grid of
    :func:`grid_sums` (the same for the same grid and bandwidth): the local constant's
    sums, which treat the weight column and the value columns alike, of columns that need
    no weight column of their own.

    Returns
    -------
    GridSums
        Its ``table`` holds the sums (its weight column is the first column's sums).
    """
    bins = Bins(grid, counts, np.zeros(counts.shape[-1] - 1))
    return grid_sums(bins, bandwidth, 0, cutoff=cutoff)


def _fft_columns(counts, lengths, reversed_taps, targets, full, table):
    """The correlations by FFT, written into ``table`` (``ext_shape + (columns,)``).

    The kernel's spectrum is the product of the axes' (the Gaussian is a product), so the
    transforms go one axis at a time: the first axis's (real) transform of a column of
    counts, then the last axes' transforms, their inverse times their taps (shared by
    every exponent with the same last entries), and only the kept points (``full``) go on
    to the first axis's inverse. Along the first axis the taps' spectrum falls below
    :data:`SPECTRAL_FLOOR` beyond a few per cent of the frequencies (the Gaussian's
    spectrum is a Gaussian): the last axes' transforms take only the frequencies below
    (:func:`_kept_frequencies`), which spares most of their cost and moves the sums by
    less than 1e-14 of the largest weight sum.
    """
    d = len(lengths)
    workers = effective_n_jobs(None)
    first = {}
    for e, _ in targets:
        if int(e[0]) not in first:
            first[int(e[0])] = sp_fft.rfft(reversed_taps(0, e[0]), n=lengths[0])
    # The frequencies along the first axis that any exponent's taps leave above rounding.
    kept = max(_kept_frequencies(spectrum) for spectrum in first.values())
    spectra = []
    for c in range(counts.shape[-1]):
        spectrum = sp_fft.rfft(counts[..., c], n=lengths[0], axis=0, workers=workers)[:kept]
        if d > 1:
            spectrum = sp_fft.fftn(
                spectrum, s=lengths[1:], axes=tuple(range(1, d)), workers=workers
            )
        spectra.append(spectrum)
    padded = None
    for rest in sorted({tuple(int(v) for v in e[1:]) for e, _ in targets}):
        group = [(e, ks) for e, ks in targets if tuple(int(v) for v in e[1:]) == rest]
        spectrum = np.ones((1,) * d)
        for a in range(1, d):
            taps_a = sp_fft.fft(reversed_taps(a, rest[a - 1]), n=lengths[a])
            spectrum = spectrum * taps_a.reshape([-1 if b == a else 1 for b in range(d)])
        n_counts = max(len(ks) for _, ks in group)
        partial = []
        for c in range(n_counts):
            product = spectra[c] * spectrum
            if d > 1:
                product = sp_fft.ifftn(
                    product, axes=tuple(range(1, d)), overwrite_x=True, workers=workers
                )
                product = product[(slice(None),) + full[1:]]
            partial.append(product)
        if padded is None:
            # The first axis's inverse takes every frequency: those above `kept` are 0.
            padded = np.zeros((lengths[0] // 2 + 1,) + partial[0].shape[1:], dtype=complex)
        for e, ks in group:
            along = first[int(e[0])][:kept].reshape((-1,) + (1,) * (d - 1))
            for c, k in enumerate(ks):
                np.multiply(partial[c], along, out=padded[:kept])
                out = sp_fft.irfft(padded, n=lengths[0], axis=0, workers=workers)
                table[..., k] = out[full[0]]


def _kept_frequencies(spectrum):
    """How many of the first frequencies of ``spectrum`` (a column of taps' real
    transform) to keep: every later one is below :data:`SPECTRAL_FLOOR` times the
    largest. Each dropped term of an inverse transform is at most the counts' total times
    the taps' term over the transform's length, so together they move a sum by less than
    that share of the counts' total times the taps' sum (the transform's own rounding,
    about 1e-16 of it, leaves the taps' spectrum at 1e-17 to 1e-15 of its largest beyond
    the Gaussian's band)."""
    magnitude = np.abs(spectrum)
    above = np.flatnonzero(magnitude > SPECTRAL_FLOOR * magnitude.max())
    return int(above[-1]) + 1 if len(above) else 1
