"""Binned kernel sums (kernattn.smoother._binned.grid) against direct sums and R KernSmooth."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernattn.smoother._binned.binning import bin_targets, coarsen, linear_binning
from kernattn.smoother._binned.cells import cell_moments, coarsen_cells
from kernattn.smoother._binned.cost import choose_algorithm
from kernattn.smoother._binned.error import binning_error, error_constant, points_per_bandwidth
from kernattn.smoother._binned.exponents import basis_exponents, moment_exponents
from kernattn.smoother._binned.grid import Grid, interpolate, make_grid
from kernattn.smoother._binned.moments import grid_sums, kernel_taps
from kernattn.smoother._binned.queries import predict, query_moments
from kernattn.smoother._binned.solve import solve_local_polynomial
from kernattn.smoother._binned.statistics import (
    CRITERIA,
    NearestOther,
    RowStatistics,
    criterion_value,
    row_statistics,
)

# ----------------------------------------------------------------------------- references


def quasi_data(n, kind="sine"):
    """Deterministic data (quasi-random sequences, no RNG): the R reference values below
    were computed on exactly these rows."""
    i = np.arange(1, n + 1)
    u1 = (i * 0.6180339887498949) % 1.0
    u2 = (i * 0.7548776662466927) % 1.0
    u3 = (i * 0.5698402909980532) % 1.0
    z = np.sqrt(-2.0 * np.log(1.0 - u2)) * np.cos(2.0 * np.pi * u3)
    return u1, np.sin(2 * np.pi * u1) + 0.3 * z


def direct_weights(X, q, h, s):
    u = (X - q) / h
    return u, np.exp(-0.5 * np.sum(u**2, axis=1)) * s


def direct_fit(X, Y, Q, h, degree, s=None, leave_out=False, coefficient=0):
    """The local polynomial at each query by weighted least squares over all rows
    (without row i at query i with ``leave_out``): its ``coefficient`` (0: the estimate)."""
    s = np.ones(len(X)) if s is None else s
    basis = basis_exponents(degree, X.shape[1])
    out = []
    for i, q in enumerate(Q):
        u, k = direct_weights(X, q, h, s)
        if leave_out:
            k[i] = 0.0
        U = np.stack([np.prod(u**e, axis=1) for e in basis], axis=1)
        M = (U * k[:, None]).T @ U
        out.append(np.linalg.solve(M, (U * k[:, None]).T @ Y)[coefficient])
    return np.array(out)


def direct_trace(X, h, degree, s):
    basis = basis_exponents(degree, X.shape[1])
    trace = 0.0
    for i, q in enumerate(X):
        u, k = direct_weights(X, q, h, s)
        U = np.stack([np.prod(u**e, axis=1) for e in basis], axis=1)
        trace += s[i] * np.linalg.inv((U * k[:, None]).T @ U)[0, 0]
    return trace


def local_spread(X, Y, Q, h, estimate):
    """Kernel-weighted root mean square of y_j − ŷ(q): the spread the bound is relative to."""
    out = []
    for q, e in zip(Q, estimate, strict=True):
        _, k = direct_weights(X, q, h, np.ones(len(X)))
        out.append(np.sqrt(np.sum(k[:, None] * (Y - e) ** 2) / k.sum()))
    return np.array(out)


def sine_rows(n, d, seed=0, outputs=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    signal = np.sin(2 * np.pi * X[:, 0]) + (np.cos(np.pi * X[:, 1]) if d > 1 else 0.0)
    Y = signal[:, None] + 0.3 * rng.normal(size=(n, outputs))
    if outputs > 1:
        Y[:, 1] = X.sum(axis=1) ** 2 + 0.1 * rng.normal(size=n)
    return X, Y


CASES = [(1, p) for p in range(4)] + [(2, 0), (2, 1)]

# ----------------------------------------------------------------------------- binning


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(0, 1), min_size=1, max_size=30),
    st.lists(st.floats(0, 1), min_size=30, max_size=30),
    st.integers(2, 9),
)
def test_linear_binning_keeps_mass_and_mean_position(xs, weights, points):
    x = np.array(xs)[:, None]
    w = np.array(weights[: len(xs)]) + 0.1
    grid = Grid(np.array([0.0]), np.array([1.0 / (points - 1)]), (points,))
    counts = linear_binning(x, np.ones((len(x), 1)), grid, w)[:, 0]
    assert np.isclose(counts.sum(), w.sum())
    assert np.isclose(counts @ grid.axis(0), w @ x[:, 0])
    assert np.all(counts >= 0)


def test_bilinear_binning_keeps_mass_and_mean_position():
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(200, 2))
    grid = make_grid(X, 0.2, tol=0.05)
    counts = linear_binning(X, np.ones((200, 1)), grid)[..., 0].ravel()
    assert np.isclose(counts.sum(), 200)
    assert np.allclose(counts @ grid.points(), X.sum(axis=0))


@pytest.mark.parametrize("d", [1, 2])
def test_coarsening_equals_binning_on_the_coarse_grid(d):
    rng = np.random.default_rng(2)
    X = rng.uniform(size=(500, d))
    Y = rng.normal(size=(500, 2))
    grid = make_grid(X, 0.1, tol=1e-2, levels=2)
    fine = bin_targets(X, Y, grid)
    counts, coarse_grid = coarsen(fine.counts, grid, 4)
    assert np.allclose(counts, bin_targets(X, Y, coarse_grid).counts)
    if d == 1:
        cells = coarsen_cells(cell_moments(X, Y, fine), 4)
        direct = cell_moments(X, Y, bin_targets(X, Y, coarse_grid))
        for name in ("power", "value", "square"):
            assert np.allclose(getattr(cells, name), getattr(direct, name))


def test_truncate_leaves_out_rows_outside_the_grid():
    grid = Grid(np.array([0.0]), np.array([0.5]), (3,))
    X = np.array([[0.25], [2.0], [-1.0]])
    with pytest.raises(ValueError, match="outside the grid"):
        linear_binning(X, np.ones((3, 1)), grid)
    counts = linear_binning(X, np.ones((3, 1)), grid, truncate=True)[:, 0]
    assert np.allclose(counts, [0.5, 0.5, 0.0])


# ----------------------------------------------------------------------------- sums


@pytest.mark.parametrize("d, degree", CASES + [(2, 2)])
@pytest.mark.parametrize("bandwidth", [0.0015, 0.05])  # 3 taps (direct), 85 taps (FFT)
def test_sums_on_the_grid_equal_direct_sums_for_rows_on_grid_points(d, degree, bandwidth):
    rng = np.random.default_rng(3)
    grid = Grid(np.zeros(d), np.full(d, 0.01), (31,) * d)
    X = rng.integers(0, 31, size=(150, d)) * 0.01
    Y = rng.normal(size=(150, 2))
    s = rng.uniform(0.5, 2.0, size=150)
    h = np.full(d, bandwidth)
    S, T = grid_sums(bin_targets(X, Y, grid, s), h, degree).on_data_grid()
    center = np.average(Y, axis=0, weights=s)
    for g, S_g, T_g in zip(grid.points(), S, T, strict=True):
        u, k = direct_weights(X, g, h, s)
        expected_S = [np.sum(k * np.prod(u**e, axis=1)) for e in moment_exponents(degree, d)]
        expected_T = [
            (k * np.prod(u**e, axis=1)) @ (Y - center) for e in basis_exponents(degree, d)
        ]
        assert np.allclose(S_g, expected_S, rtol=1e-10, atol=1e-12 * max(s.sum(), 1))
        assert np.allclose(T_g, expected_T, rtol=1e-10, atol=1e-10)


def test_taps_are_truncated_where_the_kernel_leaves_float64():
    taps = kernel_taps(0.1, 1.0)
    reach = len(taps) // 2
    assert taps[0] >= np.finfo(float).eps  # the last tap kept still counts ...
    assert math.exp(-0.5 * ((reach + 1) * 0.1) ** 2) < np.finfo(float).eps  # the next not


def test_interpolation_is_exact_for_bilinear_functions():
    grid = Grid(np.array([0.0, -1.0]), np.array([0.5, 0.25]), (5, 9))
    P = grid.points()
    values = (2 * P[:, 0] - P[:, 1] + 3 * P[:, 0] * P[:, 1]).reshape(5, 9, 1)
    Q = np.array([[0.3, -0.6], [1.9, 0.95], [0.0, -1.0]])
    expected = 2 * Q[:, 0] - Q[:, 1] + 3 * Q[:, 0] * Q[:, 1]
    assert np.allclose(interpolate(values, grid, Q)[:, 0], expected)


# ----------------------------------------------------------------------------- estimates


@pytest.mark.parametrize("d, degree", CASES)
def test_estimate_within_the_bound_on_held_out_queries(d, degree):
    X, Y = sine_rows(1500 if d == 1 else 2500, d, seed=4)
    h = np.full(d, 0.06 if d == 1 else 0.12)
    tol = 1e-3
    grid = make_grid(X, h, degree=degree, tol=tol)
    assert binning_error(grid.spacing, h, degree) <= tol
    # Held out, within the data's range.
    Q = np.random.default_rng(5).uniform(X.min(axis=0), X.max(axis=0), size=(60, d))
    estimate = predict(grid_sums(bin_targets(X, Y, grid), h, degree), Q)
    exact = direct_fit(X, Y, Q, h, degree)
    error = np.abs(estimate - exact)[:, 0]
    assert np.all(error <= tol * local_spread(X, Y, Q, h, exact))
    assert np.all(error <= tol * Y.std())


@pytest.mark.parametrize("d, degree", [(1, 1), (2, 1)])
def test_sample_weights_and_several_outputs(d, degree):
    X, Y = sine_rows(800, d, seed=6, outputs=2)
    s = np.random.default_rng(7).uniform(0.2, 3.0, size=len(X))
    h = np.full(d, 0.08 if d == 1 else 0.15)
    grid = make_grid(X, h, degree=degree)
    Q = np.random.default_rng(8).uniform(0.05, 0.95, size=(30, d))
    estimate = predict(grid_sums(bin_targets(X, Y, grid, s), h, degree), Q)
    exact = direct_fit(X, Y, Q, h, degree, s)
    assert estimate.shape == (30, 2)
    assert np.max(np.abs(estimate - exact)) <= 1e-3 * Y.std(axis=0).max()


def test_integer_weights_act_as_repeated_rows():
    X, Y = sine_rows(300, 1, seed=9)
    s = np.random.default_rng(10).integers(1, 4, size=300)
    h = 0.07
    repeated = np.repeat(np.arange(300), s)
    grid = make_grid(X, h, degree=1)
    weighted = grid_sums(bin_targets(X, Y, grid, s), h, 1)
    copies = grid_sums(bin_targets(X[repeated], Y[repeated], grid), h, 1)
    Q = np.linspace(0, 1, 17)[:, None]
    assert np.allclose(predict(weighted, Q), predict(copies, Q))


def test_far_query_gets_the_nearest_rows_target():
    X = np.concatenate([np.linspace(0, 1, 200), [5.0]])[:, None]
    Y = np.concatenate([np.sin(np.linspace(0, 1, 200)), [7.0]])
    for degree in (0, 1):
        sums = grid_sums(bin_targets(X, Y, make_grid(X, 0.05, degree=degree)), 0.05, degree)
        estimate = predict(sums, [[50.0], [-1e6], [5.0]])
        assert np.all(np.isfinite(estimate))
        assert np.allclose(estimate[[0, 2], 0], 7.0)
        assert np.isclose(estimate[1, 0], Y[0], atol=1e-3)


def test_query_moments_are_direct_beyond_the_grid():
    X, Y = sine_rows(300, 1, seed=11)
    sums = grid_sums(bin_targets(X, Y, make_grid(X, 0.05)), 0.05, 0)
    S, T = query_moments(sums, [[1.5]])
    assert S[0, 0] > 0 and np.isfinite(T).all()


def test_coefficients_are_the_local_polynomials():
    X, Y = sine_rows(1000, 1, seed=19)
    h = 0.05
    sums = grid_sums(bin_targets(X, Y, make_grid(X, h, degree=2)), h, 2)
    Q = np.array([[0.3], [0.55]])
    _, coef = predict(sums, Q, return_coefficients=True)
    slope = direct_fit(X, Y, Q, h, 2, coefficient=1)[:, 0]  # in units of h
    assert np.allclose(coef[:, 1, 0], slope, rtol=1e-3)
    assert np.allclose(coef[:, 1, 0] / h, 2 * np.pi * np.cos(2 * np.pi * Q[:, 0]), rtol=0.1)


# ----------------------------------------------------------------------------- solve


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 3), st.lists(st.floats(-3, 3), min_size=4, max_size=4))
def test_solve_reproduces_polynomials_of_its_degree(degree, coefficients):
    u = np.linspace(-2.0, 2.0, 9)
    k = np.exp(-0.5 * u**2)
    y = np.polyval(coefficients[: degree + 1][::-1], u)
    S = np.array([[np.sum(k * u**r) for r in range(2 * degree + 1)]])
    T = np.array([[[np.sum(k * u**r * y)] for r in range(degree + 1)]])
    coef, _ = solve_local_polynomial(S, T, degree, 1)
    assert np.allclose(coef[0, :, 0], coefficients[: degree + 1], atol=1e-6)


def test_solve_falls_back_to_the_local_constant_on_a_single_point():
    # All the weight on one point at u = 0.7 with target 2: no line fits one point.
    u, k, y = 0.7, 0.3, 2.0
    S = np.array([[k * u**r for r in range(5)]])
    T = np.array([[[k * u**r * y] for r in range(3)]])
    coef, first = solve_local_polynomial(S, T, 2, 1)
    assert np.all(np.isfinite(coef)) and np.all(np.isfinite(first))
    assert np.isclose(coef[0, 0, 0], y, rtol=1e-6)


def test_solve_without_weight_returns_zeros():
    coef, first = solve_local_polynomial(np.zeros((1, 3)), np.zeros((1, 2, 1)), 1, 1)
    assert np.all(coef == 0) and np.all(first == 0)


def test_first_row_gives_the_equivalent_weights():
    rng = np.random.default_rng(12)
    x, y = rng.uniform(-1, 1, 40), rng.normal(size=40)
    k = np.exp(-0.5 * x**2)
    U = np.vander(x, 2, increasing=True)
    S = np.array([[np.sum(k * x**r) for r in range(3)]])
    T = (U * k[:, None]).T @ y
    coef, first = solve_local_polynomial(S, T[None, :, None], 1, 1, ridge=0.0)
    weights = k * (U @ first[0])
    assert np.isclose(weights.sum(), 1.0)
    assert np.isclose(weights @ y, coef[0, 0, 0])


# ----------------------------------------------------------------------------- left out


@pytest.mark.parametrize("d, degree", CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_left_out_statistics_match_exact_left_out_fits(d, degree, weighted):
    X, Y = sine_rows(250, d, seed=13, outputs=2)
    s = np.random.default_rng(14).uniform(0.5, 2.0, size=250) if weighted else None
    weights = np.ones(250) if s is None else s
    h = np.full(d, 0.08 if d == 1 else 0.15)
    sums = grid_sums(bin_targets(X, Y, make_grid(X, h, degree=degree), s), h, degree)
    stats = row_statistics(sums, X, Y, s)
    loo = direct_fit(X, Y, X, h, degree, weights, leave_out=True)
    fit = direct_fit(X, Y, X, h, degree, weights)
    assert stats.n_unresolved == 0
    assert np.isclose(stats.loo_sse, np.sum(weights * np.sum((Y - loo) ** 2, axis=1)), rtol=1e-3)
    assert np.isclose(stats.rss, np.sum(weights * np.sum((Y - fit) ** 2, axis=1)), rtol=1e-3)
    assert np.isclose(stats.trace, direct_trace(X, h, degree, weights), rtol=2e-3)
    assert np.isclose(stats.total, weights.sum())


@pytest.mark.parametrize("degree", range(4))
def test_cell_sums_equal_the_per_row_statistics(degree):
    X, Y = sine_rows(3000, 1, seed=15, outputs=2)
    bins = bin_targets(X, Y, make_grid(X, 0.03, degree=degree))
    sums = grid_sums(bins, 0.03, degree)
    by_rows = row_statistics(sums, X, Y)
    by_cells = row_statistics(sums, X, Y, cells=cell_moments(X, Y, bins))
    for a, b in zip(by_rows[:3], by_cells[:3], strict=True):
        assert np.isclose(a, b, rtol=1e-8)


def test_duplicates_left_out_as_a_group_match_weights():
    X, Y = sine_rows(200, 1, seed=16)
    counts = np.random.default_rng(17).integers(1, 4, size=200)
    rows = np.repeat(np.arange(200), counts)
    h = 0.06
    grid = make_grid(X, h, degree=1)
    weighted = row_statistics(grid_sums(bin_targets(X, Y, grid, counts), h, 1), X, Y, counts)
    repeated = row_statistics(
        grid_sums(bin_targets(X[rows], Y[rows], grid), h, 1),
        X[rows],
        Y[rows],
        own_weight=counts[rows].astype(float),
        own_values=(counts[:, None] * Y)[rows],
    )
    assert np.isclose(weighted.rss, repeated.rss)
    assert np.isclose(weighted.trace, repeated.trace)
    # Each copy is left out with its group: the left-out error of the weighted rows.
    assert np.isclose(weighted.loo_sse, repeated.loo_sse)


def test_isolated_row_is_predicted_by_its_nearest_other_row():
    X = np.concatenate([np.linspace(0, 1, 100), [3.0]])[:, None]
    Y = np.concatenate([np.zeros(100), [5.0]])
    h = 0.02
    sums = grid_sums(bin_targets(X, Y, make_grid(X, h)), h, 0)
    stats = row_statistics(sums, X, Y)
    assert stats.n_unresolved == 1
    assert np.isclose(stats.loo_sse, 25.0, rtol=1e-6)
    assert np.allclose(NearestOther(X, Y[:, None]).targets(np.array([100, 0])), [[0.0], [0.0]])


def test_criteria_follow_their_formulas():
    stats = RowStatistics(loo_sse=3.0, rss=2.0, trace=4.0, total=20.0, n_unresolved=0)
    assert criterion_value("loo", stats) == 3.0 / 20
    assert np.isclose(criterion_value("gcv", stats), 0.1 / 0.8**2)
    assert np.isclose(criterion_value("aic", stats), math.log(0.1) + 1.2 / (1 - 0.3))
    assert criterion_value("gcv", stats._replace(trace=25.0)) == np.inf
    with pytest.raises(ValueError, match="criterion must be one of"):
        criterion_value("bic", stats)
    assert CRITERIA == ("loo", "gcv", "aic")


# ----------------------------------------------------------------------------- grid rule


def test_error_constants():
    assert np.isclose(error_constant(0, 1), math.sqrt(2) / 4)
    assert np.isclose(error_constant(0, 2), 0.5)
    # Local lines: the edge's equivalent kernel is the worst (interior √(2d)/4).
    assert error_constant(1, 1) > math.sqrt(2) / 4
    assert np.allclose(
        [error_constant(p, 1) for p in range(4)], [0.354, 0.973, 2.42, 6.02], rtol=5e-3
    )
    assert np.isclose(error_constant(1, 2), 1.76, rtol=5e-3)


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-3, 10.0), st.floats(1e-5, 0.1), st.integers(0, 3), st.floats(0.1, 100.0))
def test_grid_meets_its_tolerance(bandwidth, tol, degree, span):
    X = np.array([[0.0], [span]])
    grid = make_grid(X, bandwidth, degree=degree, tol=tol)
    assert binning_error(grid.spacing, bandwidth, degree) <= tol * (1 + 1e-12)
    assert np.isclose(grid.axis(0)[-1], span)
    assert bandwidth / grid.spacing[0] >= points_per_bandwidth(degree, 1, tol) * (1 - 1e-12)


def test_auto_picks_exact_where_binning_does_not_pay_or_cannot_hold():
    x = np.linspace(0, 1, 10**5)[:, None]
    assert choose_algorithm(x, 0.01, 10**5, degree=1) == "binned"
    assert choose_algorithm(x[:50], 0.01, 50) == "exact"
    assert choose_algorithm(np.zeros((10**5, 3)), 0.1, 10**5) == "exact"
    assert choose_algorithm(x, 0.01, 10**5, kernel="tricube") == "exact"
    # A bandwidth a billionth of the range needs a grid beyond working_memory.
    wide = np.random.default_rng(18).uniform(size=(10**5, 2))
    assert choose_algorithm(wide, 1e-9, 10**5) == "exact"


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "X, bandwidth, match",
    [
        (np.zeros((5, 3)), 0.1, "1 or 2 inputs"),
        (np.array([[0.0], [np.nan]]), 0.1, "NaN or infinity"),
        (np.array([[0.0], [1.0]]), 0.0, "positive"),
        (np.array([[0.0], [1.0]]), -1.0, "positive"),
        (np.array([[0.0], [1.0]]), [0.1, 0.2, 0.3], "positive"),
    ],
)
def test_make_grid_rejects_bad_input(X, bandwidth, match):
    with pytest.raises(ValueError, match=match):
        make_grid(X, bandwidth)


def test_bad_targets_weights_degree_and_queries_are_rejected():
    X = np.linspace(0, 1, 20)[:, None]
    grid = make_grid(X, 0.1)
    with pytest.raises(ValueError, match="NaN"):
        bin_targets(X, np.full(20, np.nan), grid)
    with pytest.raises(ValueError, match="sample_weight"):
        bin_targets(X, np.zeros(20), grid, -np.ones(20))
    with pytest.raises(ValueError, match="Y must have shape"):
        bin_targets(X, np.zeros(19), grid)
    sums = grid_sums(bin_targets(X, np.zeros(20), grid), 0.1)
    with pytest.raises(ValueError, match="degree"):
        grid_sums(sums.bins, 0.1, degree=-1)
    with pytest.raises(ValueError, match="queries has 2 columns"):
        predict(sums, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="queries contains NaN"):
        predict(sums, [[np.nan]])
    with pytest.raises(ValueError, match="tol"):
        points_per_bandwidth(1, 1, tol=0.0)


# ----------------------------------------------------------------------------- KernSmooth

# R 4.2.2, KernSmooth 2.23-20 (Debian r-cran-kernsmooth), on quasi_data(500):
#   locpoly(x, y, degree = 1, bandwidth = 0.05, gridsize = 11)$y
#   locpoly(x, y, degree = 0, bandwidth = 0.05, gridsize = 11)$y
#   locpoly(x, y, degree = 3, drv = 2, bandwidth = 0.08, gridsize = 11)$y
# (Gaussian kernel, h its standard deviation, truncated at 4h; grid over range(x)).
KERNSMOOTH_LOCPOLY = {
    (1, 0, 0.05): [
        0.208257917636493,
        0.559915922736218,
        0.886214728504708,
        0.89281036517608,
        0.531425069926861,
        2.87568962443599e-05,
        -0.531150667988989,
        -0.883530079040063,
        -0.882552730161393,
        -0.557258831712488,
        -0.186953091644163,
    ],
    (0, 0, 0.05): [
        0.281417666228648,
        0.579532703671434,
        0.886208901286425,
        0.892777668125043,
        0.531433290103359,
        2.49011605842169e-05,
        -0.531152704742182,
        -0.883530068096936,
        -0.882605363070559,
        -0.578007630413336,
        -0.266050948328307,
    ],
    (3, 2, 0.08): [
        38.7136273553243,
        1.00411490897209,
        -29.6961693037309,
        -34.0140628214313,
        -17.6659921017888,
        0.170511616192917,
        18.0469355965257,
        33.1802543760244,
        30.2131416896374,
        1.29840421380358,
        -34.7777160163474,
    ],
}


@pytest.mark.parametrize("degree, derivative, bandwidth", list(KERNSMOOTH_LOCPOLY))
def test_gridded_fit_matches_kernsmooth_locpoly(degree, derivative, bandwidth):
    x, y = quasi_data(500)
    grid = Grid(np.array([x.min()]), np.array([np.ptp(x) / 10]), (11,))
    bins = bin_targets(x[:, None], y, grid)
    S, T = grid_sums(bins, bandwidth, degree, cutoff=4.0).on_data_grid()
    coef, _ = solve_local_polynomial(S, T, degree, 1, ridge=0.0)
    estimate = coef[:, derivative, 0] * math.factorial(derivative) / bandwidth**derivative
    if derivative == 0:
        estimate = estimate + bins.center[0]
    expected = np.array(KERNSMOOTH_LOCPOLY[degree, derivative, bandwidth])
    assert np.allclose(estimate, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
