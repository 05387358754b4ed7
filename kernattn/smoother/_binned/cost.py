"""The cost model that chooses between the binned and the exact sums."""

import math

import numpy as np

from kernattn.smoother._binned.checks import MAX_DIMS, check_bandwidth
from kernattn.smoother._binned.error import TOLERANCE, points_per_bandwidth
from kernattn.smoother._binned.exponents import basis_exponents, moment_exponents
from kernattn.smoother._binned.grid import grid_fits, make_grid
from kernattn.smoother._binned.moments import CUTOFF

_BIN_SECONDS = 1e-8


_FFT_SECONDS = 5e-10


_FFT_OVERHEAD = 5e-5


_QUERY_SECONDS = 2e-8


_PAIR_SECONDS = (2.1e-9, 8.4e-9)


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
    reach = int(math.ceil(CUTOFF / float(np.min(grid.spacing / check_bandwidth(bandwidth, d)))))
    ext = int(np.prod(np.asarray(grid.shape) + 2 * reach))
    cols = len(moment_exponents(degree, d)) + len(basis_exponents(degree, d)) * n_outputs
    if not grid_fits(ext, cols):
        return "exact"
    binned = binned_cost(
        len(X), n_queries, grid.shape, degree=degree, n_outputs=n_outputs, reach=reach
    )
    return "binned" if binned < exact_cost(len(X), n_queries, degree=degree) else "exact"
