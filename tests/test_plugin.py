"""The direct plug-in bandwidth (kernattn.smoother._binned.plugin) against R KernSmooth's dpill."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernattn.smoother._binned.plugin import blocked_quartic_fits, mallows_blocks, plugin_bandwidth


def quasi_data(n, kind="sine"):
    """Deterministic data (quasi-random sequences, no RNG), as in tests/test_binned.py."""
    i = np.arange(1, n + 1)
    u1 = (i * 0.6180339887498949) % 1.0
    u2 = (i * 0.7548776662466927) % 1.0
    u3 = (i * 0.5698402909980532) % 1.0
    z = np.sqrt(-2.0 * np.log(1.0 - u2)) * np.cos(2.0 * np.pi * u3)
    if kind == "sine":
        return u1, np.sin(2 * np.pi * u1) + 0.3 * z
    if kind == "skewed":
        x = u1**2
        return x, x * np.cos(6 * x) + 0.2 * z
    x = np.round(u1, 2)  # "ties"
    return x, np.sin(2 * np.pi * x) + 0.3 * z


# R 4.2.2, KernSmooth 2.23-20 (Debian r-cran-kernsmooth): dpill(x, y) with its defaults
# (blockmax = 5, divisor = 20, trim = 0.01, proptrun = 0.05, gridsize = 401) on these rows.
DPILL = {
    ("sine", 500): 0.0374010879868227,
    ("skewed", 2000): 0.0328416265790237,
    ("ties", 1000): 0.0318578543232609,
}


@pytest.mark.parametrize("kind, n", list(DPILL))
def test_matches_kernsmooth_dpill(kind, n):
    x, y = quasi_data(n, kind)
    # The ridge of the binned solves (1e-8 relative) is the only difference.
    assert np.isclose(plugin_bandwidth(x, y), DPILL[kind, n], rtol=1e-6)


def _sorted_blocks(x, y, N):
    """KernSmooth's blocks: the rows in stable order of x, N blocks of n // N rows."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    step = len(x) // N
    return [
        (
            x[j * step : (j + 1) * step if j < N - 1 else len(x)],
            y[j * step : (j + 1) * step if j < N - 1 else len(x)],
        )
        for j in range(N)
    ]


@pytest.mark.parametrize("N", [1, 3, 5])
@pytest.mark.parametrize("ties", [False, True])
def test_blocked_fits_match_least_squares_on_sorted_blocks(N, ties):
    rng = np.random.default_rng(0)
    x = rng.uniform(size=301)
    x = np.round(x, 2) if ties else x
    y = np.cos(3 * x) + 0.1 * rng.normal(size=301)
    rss = s22 = s24 = 0.0
    for xb, yb in _sorted_blocks(x, y, N):
        coef = np.polynomial.polynomial.polyfit(xb, yb, 4)
        rss += np.sum((yb - np.polynomial.polynomial.polyval(xb, coef)) ** 2)
        d2 = np.polynomial.polynomial.polyval(xb, np.polynomial.polynomial.polyder(coef, 2))
        s22 += np.sum(d2**2)
        s24 += np.sum(d2) * 24 * coef[4]
    got = blocked_quartic_fits(x, y, N)
    assert np.allclose(got, [rss, rss / (301 - 5 * N), s22 / 301, s24 / 301], rtol=1e-7)


def test_mallows_picks_the_blocks_of_smallest_cp():
    x, y = quasi_data(400, "skewed")
    rss = [blocked_quartic_fits(x, y, N)[0] for N in range(1, 6)]
    cp = [r * (400 - 25) / rss[-1] - (400 - 10 * N) for N, r in enumerate(rss, 1)]
    assert mallows_blocks(x, y, 5) == int(np.argmin(cp)) + 1


def test_details_and_exact_quartic_blocks():
    x = np.linspace(-1, 1, 200)
    rss, sigma2, theta22, theta24 = blocked_quartic_fits(x, x**4, 1)
    assert rss < 1e-20 and sigma2 < 1e-20
    assert np.isclose(theta22, np.mean((12 * x**2) ** 2))
    assert np.isclose(theta24, np.mean(12 * x**2 * 24))
    details = plugin_bandwidth(*quasi_data(500), return_details=True)
    assert details.bandwidth == plugin_bandwidth(*quasi_data(500))
    assert details.n_rows == 500 - 2 * 5 and details.theta22 > 0 and details.sigma2 > 0


@settings(max_examples=10, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(0.01, 100.0), st.floats(-50.0, 50.0))
def test_bandwidth_scales_with_x_and_ignores_the_units_of_y(scale_x, scale_y, offset):
    x, y = quasi_data(400)
    h = plugin_bandwidth(x, y)
    assert np.isclose(plugin_bandwidth(scale_x * x + offset, y), scale_x * h, rtol=1e-6)
    assert np.isclose(plugin_bandwidth(x, scale_y * y + offset), h, rtol=1e-6)


def test_sparse_data_gets_a_finite_bandwidth():
    # Exponential x leaves grid points far from any row, where dpill's solves fail (NA).
    rng = np.random.default_rng(3)
    x = rng.exponential(size=300)
    y = np.exp(-x) * np.cos(4 * x) + rng.normal(scale=0.1, size=300)
    h = plugin_bandwidth(x, y)
    assert math.isfinite(h) and 0 < h < np.ptp(x)


def test_large_data_is_selected_in_one_pass():
    rng = np.random.default_rng(4)
    x = rng.uniform(size=200_000)
    y = np.sin(2 * np.pi * x) + rng.normal(scale=0.3, size=200_000)
    # RSW's rate n^(-1/5): from 2 000 to 200 000 rows the bandwidth shrinks about 2.5 times.
    small = plugin_bandwidth(x[:2000], y[:2000])
    assert 1.8 < small / plugin_bandwidth(x, y) < 3.5


@pytest.mark.parametrize(
    "x, y, kwargs, match",
    [
        (np.zeros((10, 2)), np.zeros(10), {}, "one input"),
        (np.arange(10.0), np.zeros(9), {}, "one output"),
        (np.array([0.0, np.nan, 1.0]), np.zeros(3), {}, "finite"),
        (np.arange(5.0), np.arange(5.0), {}, "more than 5 rows"),
        (np.arange(50.0), np.arange(50.0), {"trim": 0.6}, "trim"),
        (np.arange(50.0), np.arange(50.0), {"gridsize": 1}, "gridsize"),
        (np.arange(50.0), np.arange(50.0), {"block_max": 0}, "block_max"),
        (np.ones(50), np.arange(50.0), {}, "no spread"),
        (np.arange(50.0), np.arange(50.0), {}, "error variance is 0"),
    ],
)
def test_bad_input_is_rejected(x, y, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plugin_bandwidth(x, y, **kwargs)
