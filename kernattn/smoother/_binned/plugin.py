r"""The direct plug-in bandwidth of local-linear regression (Ruppert, Sheather and Wand, 1995).

For a local-linear fit with the Gaussian kernel (:math:`h` its standard deviation), the
bandwidth that minimises the asymptotic mean integrated squared error over an interval of
length :math:`b - a` is

.. math::

    h_{\text{AMISE}} = \left(\frac{R(K)\,\sigma^2\,(b - a)}
                        {\mu_2(K)^2\,\theta_{22}\,n}\right)^{1/5},
    \qquad R(K) = \frac{1}{2\sqrt\pi},\ \mu_2(K) = 1,

with :math:`\sigma^2` the error variance and :math:`\theta_{22} = \frac1n \sum_i
m''(X_i)^2`. The *direct plug-in* replaces the unknowns by estimates, in stages (the
procedure of R KernSmooth's ``dpill``, with its defaults):

1. Trim the proportion ``trim`` of the rows from each end in :math:`x`.
2. Split the rows, in order of :math:`x`, into :math:`N` blocks of equal counts and fit a
   quartic by least squares in each; :math:`N \le \max(\min(\lfloor n/\text{divisor}
   \rfloor, \text{block\_max}), 1)` is chosen by Mallows' :math:`C_p`,
   :math:`C_p(N) = \mathrm{RSS}(N)\,(n - 5N_{\max})/\mathrm{RSS}(N_{\max}) - (n - 10N)`.
   The blocked fits give :math:`\hat\sigma^2_Q = \mathrm{RSS}/(n - 5N)` and
   :math:`\hat\theta_{24}^Q = \frac1n\sum_i \hat m''(X_i)\hat m^{(4)}(X_i)`.
3. :math:`\theta_{22}` by a binned local-cubic estimate of :math:`m''` with the pilot
   bandwidth :math:`g = \big(C\,\hat\sigma^2_Q (b - a)/(|\hat\theta_{24}^Q|\, n)\big)^{1/7}`,
   :math:`C = 3/(8\sqrt\pi)` if :math:`\hat\theta_{24}^Q < 0` and :math:`15/(16\sqrt\pi)`
   otherwise: :math:`\hat\theta_{22} = \frac1n \sum_k \hat m''(g_k)^2 c_k` over the grid
   points :math:`g_k` (bin counts :math:`c_k`) away from the ends (the proportion
   ``proptrun`` of the grid is dropped at each).
4. :math:`\sigma^2` by a binned local-linear fit with
   :math:`\lambda = C_3 \big(\hat\sigma_Q^4 (b - a)/(\hat\theta_{22} n)^2\big)^{1/9}`,
   :math:`C_3 = \big(4(\tfrac12 + 2\sqrt2 - \tfrac43\sqrt3)/\sqrt{2\pi}\big)^{1/9}`:
   :math:`\hat\sigma^2 = \mathrm{RSS}/(n - 2\,\mathrm{tr}\,S + \mathrm{tr}\,S^\top S)`,
   with the residual sum of squares and both traces evaluated on the bins.
5. :math:`\hat h = \big(\hat\sigma^2 (b - a)/(2\sqrt\pi\,\hat\theta_{22}\,n)\big)^{1/5}`.

Every binned smooth uses the kernel truncated at 4 bandwidths on a grid of ``gridsize``
points over the trimmed range, as KernSmooth does; the sums come from
:mod:`kernattn.smoother._binned.moments`, and the ridged solve of
:mod:`kernattn.smoother._binned.solve` keeps the smooths finite where KernSmooth's fail
(grid points with no data within reach). The rows are never sorted: the trimming
and the blocks need only order statistics (``np.partition``), and each block's quartic
fit follows from power sums over rank segments, re-centred to the block, so the selector
costs one pass over the rows. Rows tied across a block boundary are split in input order,
as KernSmooth's stable sort does.

References
----------
Ruppert, D., Sheather, S. J. and Wand, M. P. (1995). An effective bandwidth selector for
local least squares regression. *Journal of the American Statistical Association*, 90,
1257–1270.

Wand, M. P. and Jones, M. C. (1995). *Kernel Smoothing*. Chapman and Hall.
"""

import math
from typing import NamedTuple

import numpy as np

from kernattn.smoother._binned.binning import bin_targets
from kernattn.smoother._binned.grid import Grid
from kernattn.smoother._binned.moments import grid_sums
from kernattn.smoother._binned.solve import solve_local_polynomial

__all__ = ["PluginBandwidth", "blocked_quartic_fits", "mallows_blocks", "plugin_bandwidth"]

#: KernSmooth truncates its binned kernels at this many bandwidths.
TRUNCATION = 4.0
# Rows per chunk of the power sums.
_CHUNK = 2**18


class PluginBandwidth(NamedTuple):
    """The plug-in bandwidth and its pilot estimates (:func:`plugin_bandwidth`)."""

    bandwidth: float
    n_blocks: int
    sigma2_blocks: float
    theta24_blocks: float
    curvature_pilot: float
    theta22: float
    variance_pilot: float
    sigma2: float
    n_rows: int
    range: tuple


def _check_xy(x, y):
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise ValueError(
            f"the plug-in bandwidth is for one input; x has shape {x.shape} (use a "
            "leave-one-out search for more)"
        )
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != x.shape:
        raise ValueError(f"y must have shape {x.shape} (one output); got {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("x and y must be finite (no NaN or infinity)")
    return x, y


# ---------------------------------------------------------------------------- blocks


def _segments(x, lo, hi, starts):
    """Rows grouped by rank, without sorting.

    ``starts`` are rank positions (``lo`` first); segment ``i`` holds the rows of ranks
    ``[starts[i], starts[i + 1])`` (the last up to ``hi``). Returns each row's segment
    (−1 for rows outside ``[lo, hi)``), the order statistics at the segments' first ranks
    and the one at ``hi − 1``. Rows tied across a boundary take consecutive ranks in
    input order (a stable sort's), so every segment holds exactly its ranks' count.
    """
    bounds = np.array(list(starts) + [hi])
    kth = sorted(set(starts) | {hi - 1})
    values = dict(zip(kth, np.partition(x, kth)[kth], strict=True))
    first = np.array([values[r] for r in starts])
    last = values[hi - 1]
    segment = np.searchsorted(first, x, side="right") - 1
    segment[x > last] = -1
    for v in np.unique(np.append(first, last)):
        tied = np.flatnonzero(x == v)
        if len(tied) > 1:
            ranks = np.count_nonzero(x < v) + np.arange(len(tied))
            seg = np.searchsorted(bounds, ranks, side="right") - 1
            seg[(ranks < lo) | (ranks >= hi)] = -1
            segment[tied] = seg
    return segment, first, last


def _power_sums(x, y, segment, center, half, n_segments):
    """Per segment, about its center and half-width: Σ u^k (k ≤ 8), Σ y u^k (k ≤ 4) and
    Σ y², with u = (x − center)/half."""
    P = np.zeros((n_segments, 9))
    Q = np.zeros((n_segments, 5))
    yy = np.zeros(n_segments)
    for start in range(0, len(x), _CHUNK):
        seg = segment[start : start + _CHUNK]
        keep = seg >= 0
        seg = seg[keep]
        xb = x[start : start + _CHUNK][keep]
        yb = y[start : start + _CHUNK][keep]
        u = (xb - center[seg]) / half[seg]
        power = np.ones_like(u)
        for k in range(9):
            P[:, k] += np.bincount(seg, weights=power, minlength=n_segments)
            if k < 5:
                Q[:, k] += np.bincount(seg, weights=power * yb, minlength=n_segments)
            power = power * u
        yy += np.bincount(seg, weights=yb * yb, minlength=n_segments)
    return P, Q, yy


def _recenter(sums, alpha, rho):
    r"""Power sums about a new center and scale: with :math:`u' = \alpha + \rho u`,
    :math:`\sum u'^k = \sum_j \binom{k}{j} \alpha^{k-j} \rho^j \sum u^j`. A segment
    inside its block has :math:`|\alpha| + \rho \le 1`, so no term cancels."""
    out = np.zeros(len(sums))
    for k in range(len(sums)):
        for j in range(k + 1):
            out[k] += math.comb(k, j) * alpha ** (k - j) * rho**j * sums[j]
    return out


def _quartic_from_sums(P, Q, yy, half):
    r"""The quartic least-squares fit from power sums in :math:`u = (x - c)/\text{half}`:
    the residual sum of squares, :math:`\sum m''^2` and :math:`\sum m'' m^{(4)}`
    (derivatives in :math:`x`)."""
    gram = P[np.add.outer(np.arange(5), np.arange(5))]
    beta = np.linalg.lstsq(gram, Q, rcond=None)[0]
    rss = max(float(yy - 2.0 * beta @ Q + beta @ gram @ beta), 0.0)
    d2 = np.array([2.0 * beta[2], 6.0 * beta[3], 12.0 * beta[4]]) / half**2
    d4 = 24.0 * beta[4] / half**4
    H = P[np.add.outer(np.arange(3), np.arange(3))]
    return rss, float(d2 @ H @ d2), float(d2 @ P[:3]) * d4


class _Blocks:
    """Power sums of the trimmed rows' rank segments; the quartic fit of any union of
    consecutive segments (a block) follows from them in O(1)."""

    def __init__(self, x, y, lo, hi, block_counts):
        self.lo, self.n = lo, hi - lo
        starts = {lo}
        for N in block_counts:
            step = self.n // N
            starts.update(lo + j * step for j in range(1, N))
        self.starts = sorted(starts)
        self.segment, first, last = _segments(x, lo, hi, self.starts)
        self.edges = np.append(first, last)  # the segments' value ranges
        self.center = (self.edges[:-1] + self.edges[1:]) / 2.0
        half = (self.edges[1:] - self.edges[:-1]) / 2.0
        self.half = np.where(half > 0, half, 1.0)
        self.P, self.Q, self.yy = _power_sums(
            x, y, self.segment, self.center, self.half, len(self.starts)
        )

    def _fit(self, i, j):
        """Quartic fit of segments ``i .. j − 1``."""
        lo_value, hi_value = self.edges[i], self.edges[j]
        center = (lo_value + hi_value) / 2.0
        half = (hi_value - lo_value) / 2.0 if hi_value > lo_value else 1.0
        P, Q = np.zeros(9), np.zeros(5)
        for k in range(i, j):
            alpha, rho = (self.center[k] - center) / half, self.half[k] / half
            P += _recenter(self.P[k], alpha, rho)
            Q += _recenter(self.Q[k], alpha, rho)
        return _quartic_from_sums(P, Q, float(self.yy[i:j].sum()), half)

    def blocked(self, N):
        """Residual sum of squares, σ², θ22 and θ24 of the quartic fits on N blocks."""
        step = self.n // N
        bounds = [self.starts.index(self.lo + j * step) for j in range(N)] + [len(self.starts)]
        rss = s22 = s24 = 0.0
        for i, j in zip(bounds[:-1], bounds[1:], strict=True):
            r, t22, t24 = self._fit(i, j)
            rss, s22, s24 = rss + r, s22 + t22, s24 + t24
        dof = self.n - 5 * N
        return rss, rss / dof if dof > 0 else np.inf, s22 / self.n, s24 / self.n


def blocked_quartic_fits(x, y, n_blocks):
    r"""Quartic least-squares fits on ``n_blocks`` blocks of equal counts (rows in order
    of ``x``, the last block taking the remainder).

    Returns
    -------
    rss : float
    sigma2 : float
        :math:`\mathrm{RSS}/(n - 5N)`.
    theta22, theta24 : float
        :math:`\frac1n\sum_i \hat m''(x_i)^2` and :math:`\frac1n\sum_i \hat m''(x_i)
        \hat m^{(4)}(x_i)` of the blocked fits.

    Examples
    --------
    >>> x = np.linspace(0, 1, 101)
    >>> [round(float(v), 6) + 0.0 for v in blocked_quartic_fits(x, x**2, 1)]
    [0.0, 0.0, 4.0, 0.0]
    """
    x, y = _check_xy(x, y)
    return _Blocks(x, y, 0, len(x), [n_blocks]).blocked(n_blocks)


def mallows_blocks(x, y, max_blocks):
    r"""The number of blocks :math:`N \le N_{\max}` minimising Mallows' :math:`C_p`,
    :math:`\mathrm{RSS}(N)(n - 5N_{\max})/\mathrm{RSS}(N_{\max}) - (n - 10N)`."""
    x, y = _check_xy(x, y)
    blocks = _Blocks(x, y, 0, len(x), range(1, max_blocks + 1))
    return _mallows([blocks.blocked(N)[0] for N in range(1, max_blocks + 1)], len(x))


def _mallows(rss, n):
    max_blocks = len(rss)
    if rss[-1] <= 0:
        return 1
    cp = [r * (n - 5 * max_blocks) / rss[-1] - (n - 10 * N) for N, r in enumerate(rss, 1)]
    return int(np.argmin(cp)) + 1


# ---------------------------------------------------------------------------- binned smooths


def _binned_fit(bins, bandwidth, degree):
    """The local polynomial at the grid points from the bins, with KernSmooth's
    truncation: coefficients (G, P) in units of the bandwidth."""
    spacing = float(bins.grid.spacing[0])
    if math.floor(TRUNCATION * bandwidth / spacing) == 0:
        raise ValueError(
            f"the pilot bandwidth {bandwidth:.3g} is below a quarter of the grid spacing "
            f"{spacing:.3g}: the binned estimate cannot resolve it; increase gridsize"
        )
    S, T = grid_sums(bins, bandwidth, degree, cutoff=TRUNCATION).on_data_grid()
    coef, _ = solve_local_polynomial(S, T, degree, 1)
    return coef[:, :, 0]


def _trace_terms(bins, bandwidth):
    r"""KernSmooth's binned diagonals of the local-linear smoother at the grid points:
    :math:`S_{gg} = [M^{-1}]_{00}` and :math:`(SS^\top)_{gg} = e_0^\top M^{-1} U M^{-1}
    e_0`, with :math:`U` the moments under the squared kernel :math:`K(u)^2 = e^{-u^2}`
    (the Gaussian of bandwidth :math:`h/\sqrt2`, rescaled)."""
    S, _ = grid_sums(bins, bandwidth, 1, cutoff=TRUNCATION).on_data_grid()
    root2 = math.sqrt(2.0)
    narrow, _ = grid_sums(bins, bandwidth / root2, 1, cutoff=TRUNCATION * root2).on_data_grid()
    U = narrow * 2.0 ** (-0.5 * np.arange(3))  # e^{-u²} u^r = e^{-v²/2} v^r / 2^{r/2}
    det = S[:, 0] * S[:, 2] - S[:, 1] ** 2
    # Grid points without data within reach have no line (KernSmooth fails there); their
    # bin counts are 0, so they add nothing to the traces.
    safe = np.where(det > 0, det, 1.0)
    a = np.where(det > 0, S[:, 2] / safe, 0.0)  # [M⁻¹]_00
    b = np.where(det > 0, -S[:, 1] / safe, 0.0)  # [M⁻¹]_01
    return a, a * a * U[:, 0] + 2.0 * a * b * U[:, 1] + b * b * U[:, 2]


def _check_options(block_max, divisor, trim, proptrun, gridsize):
    """Clear errors for the options of :func:`plugin_bandwidth`."""
    for name, value in (("block_max", block_max), ("divisor", divisor), ("gridsize", gridsize)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")
    if gridsize < 2:
        raise ValueError(f"gridsize must be at least 2; got {gridsize}")
    for name, value in (("trim", trim), ("proptrun", proptrun)):
        if not 0 <= value < 0.5:
            raise ValueError(f"{name} must be in [0, 0.5); got {value!r}")


def _quartic_pilot(blocks, max_blocks, n, y):
    """Stage 2: blocked quartic fits, the number of blocks ``N`` by Mallows' Cp; their
    error variance σ²_Q and curvature functional θ24."""
    fits = [blocks.blocked(N) for N in range(1, max_blocks + 1)]
    N = _mallows([f[0] for f in fits], n)
    _, sigma2_q, _, theta24_q = fits[N - 1]
    if theta24_q == 0 or not np.isfinite(sigma2_q):
        raise ValueError("the quartic pilot fits found no curvature; no plug-in bandwidth")
    # Residuals at the rounding of the targets: the quartic fits follow them exactly, and
    # the pilot bandwidths built on that variance would be 0.
    size = float(np.max(np.abs(y)))
    if size == 0 or not sigma2_q / size > (64.0 * np.finfo(float).eps) ** 2 * size * float(
        np.var(y / size)
    ):
        raise ValueError(
            "the estimated error variance is 0 (the targets follow x without noise); "
            "no plug-in bandwidth"
        )
    return N, sigma2_q, theta24_q


def plugin_bandwidth(
    x,
    y,
    *,
    block_max=5,
    divisor=20,
    trim=0.01,
    proptrun=0.05,
    gridsize=401,
    return_details=False,
):
    """The direct plug-in bandwidth for local-linear regression (module docstring).

    Parameters
    ----------
    x, y : array_like of shape (n,)
        One input and one output; no sample weights.
    block_max : int
        Largest number of blocks of the quartic pilot fits.
    divisor : int
        At most ``n // divisor`` blocks.
    trim : float
        Proportion of the rows trimmed from each end in ``x``.
    proptrun : float
        Proportion of the grid dropped at each end in the functional estimate.
    gridsize : int
        Grid points of the binned estimates.
    return_details : bool
        Return a :class:`PluginBandwidth` with the pilot estimates.

    Returns
    -------
    bandwidth : float
        The Gaussian kernel's standard deviation, in the units of ``x``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(size=2000)
    >>> y = np.sin(2 * np.pi * x) + rng.normal(scale=0.3, size=2000)
    >>> round(plugin_bandwidth(x, y), 4)
    0.0273
    """
    x, y = _check_xy(x, y)
    _check_options(block_max, divisor, trim, proptrun, gridsize)
    n_all = len(x)
    cut = int(math.floor(trim * n_all))
    n = n_all - 2 * cut
    max_blocks = max(min(n // divisor, block_max), 1)
    if n - 5 * max_blocks <= 0:
        raise ValueError(
            f"the plug-in bandwidth needs more than {5 * max_blocks} rows after trimming; got {n}"
        )
    blocks = _Blocks(x, y, cut, n_all - cut, range(1, max_blocks + 1))
    a, b = float(blocks.edges[0]), float(blocks.edges[-1])
    if not b > a:
        raise ValueError("x has no spread after trimming; no bandwidth fits it")
    span = b - a

    N, sigma2_q, theta24_q = _quartic_pilot(blocks, max_blocks, n, y)

    # Stage 3: θ22 from a binned local-cubic second derivative.
    # The trimmed rows: out of the grid, or (tied at its ends) weighted 0.
    kept = (blocks.segment >= 0).astype(float)
    grid = Grid(np.array([a]), np.array([span / (gridsize - 1)]), (gridsize,))
    bins = bin_targets(x[:, None], y, grid, kept, truncate=True)
    center = float(bins.center[0])
    counts = bins.counts[:, 0], bins.counts[:, 1] + center * bins.counts[:, 0]  # Σ1, Σy
    if theta24_q < 0:
        constant = 3.0 / (8.0 * math.sqrt(math.pi))
    else:
        constant = 15.0 / (16.0 * math.sqrt(math.pi))
    pilot = (constant * sigma2_q * span / (abs(theta24_q) * n)) ** (1.0 / 7.0)
    second = 2.0 * _binned_fit(bins, pilot, 3)[:, 2] / pilot**2
    drop = int(math.floor(proptrun * gridsize))
    keep = slice(drop, gridsize - drop)
    theta22 = float(np.sum(second[keep] ** 2 * counts[0][keep]) / n)
    if not theta22 > 0:
        raise ValueError("the estimated curvature functional θ22 is 0; no plug-in bandwidth")

    # Stage 4: σ² from a binned local-linear fit and the traces of its smoother.
    c3 = (
        4.0 * (0.5 + 2.0 * math.sqrt(2.0) - 4.0 / 3.0 * math.sqrt(3.0)) / math.sqrt(2.0 * math.pi)
    ) ** (1.0 / 9.0)
    lam = c3 * (sigma2_q**2 * span / (theta22 * n) ** 2) ** (1.0 / 9.0)
    fitted = _binned_fit(bins, lam, 1)[:, 0] + center
    diag, sst = _trace_terms(bins, lam)
    yy = float(blocks.yy.sum())
    rss = yy - 2.0 * float(fitted @ counts[1]) + float(fitted**2 @ counts[0])
    dof = n - 2.0 * float(diag @ counts[0]) + float(sst @ counts[0])
    sigma2 = rss / dof
    if not sigma2 > 0:
        raise ValueError(
            "the estimated error variance is 0 (the targets follow x without noise); "
            "no plug-in bandwidth"
        )

    bandwidth = float((sigma2 * span / (2.0 * math.sqrt(math.pi) * theta22 * n)) ** 0.2)
    if not return_details:
        return bandwidth
    return PluginBandwidth(
        bandwidth,
        N,
        float(sigma2_q),
        float(theta24_q),
        float(pilot),
        theta22,
        float(lam),
        float(sigma2),
        n,
        (a, b),
    )
