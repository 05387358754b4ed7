"""Bandwidth search on binned sums (kernattn.smoother._binned.search)."""

import numpy as np
import pytest

from kernattn.smoother._binned.binning import bin_targets
from kernattn.smoother._binned.grid import make_grid
from kernattn.smoother._binned.moments import grid_sums
from kernattn.smoother._binned.search import FACTORS, BinnedCriterion, search_bandwidth
from kernattn.smoother._binned.statistics import criterion_value, row_statistics


def sine_rows(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    signal = np.sin(2 * np.pi * X[:, 0]) + (np.cos(np.pi * X[:, 1]) if d > 1 else 0.0)
    return X, signal + 0.3 * rng.normal(size=n)


def exact_loo(X, y, h, degree=1):
    """Brute-force leave-one-out error of the local polynomial."""
    n, d = X.shape
    sse = 0.0
    for i in range(n):
        u = (X - X[i]) / h
        k = np.exp(-0.5 * np.sum(u**2, axis=1))
        k[i] = 0.0
        U = np.column_stack([np.ones(n)] + [u[:, a] for a in range(d)][: degree * d])
        beta = np.linalg.solve((U * k[:, None]).T @ U, (U * k[:, None]).T @ y)
        sse += (y[i] - beta[0]) ** 2
    return sse / n


def test_finds_the_exact_leave_one_out_minimum():
    X, y = sine_rows(400, 1, seed=1)
    result = search_bandwidth(X, y)
    grid = np.geomspace(0.5, 2.0, 41) * result.bandwidth[0]
    exact = [exact_loo(X, y, h) for h in grid]
    best = grid[int(np.argmin(exact))]
    assert abs(np.log(result.bandwidth[0] / best)) < 0.05
    assert np.isclose(result.value, min(exact), rtol=1e-3)
    assert not result.at_edge and result.n_evaluations < 40


def test_minimum_is_below_the_whole_curve_in_two_dimensions():
    X, y = sine_rows(3000, 2, seed=2)
    result = search_bandwidth(X, y)
    assert result.bandwidth.shape == (2,)
    visited = result.curve[~np.isnan(result.curve)]
    assert len(visited) >= 3 and np.all(np.isfinite(visited))
    assert result.value <= np.min(visited) * (1 + 1e-3)
    # The first input carries the faster wave: it gets the smaller bandwidth.
    assert result.bandwidth[0] < result.bandwidth[1]


@pytest.mark.parametrize("criterion", ["gcv", "aic"])
def test_other_criteria_pick_a_similar_bandwidth(criterion):
    X, y = sine_rows(5000, 1, seed=3)
    loo = search_bandwidth(X, y).bandwidth[0]
    other = search_bandwidth(X, y, criterion=criterion).bandwidth[0]
    assert abs(np.log(other / loo)) < 0.3


@pytest.mark.parametrize("criterion", ["gcv", "aic"])
def test_integer_weights_act_as_repeated_rows(criterion):
    X, y = sine_rows(600, 1, seed=4)
    counts = np.random.default_rng(5).integers(1, 4, size=600)
    rows = np.repeat(np.arange(600), counts)
    settings = dict(
        degree=1, criterion=criterion, min_bandwidth=np.array([0.01]), levels=2, tol=1e-3
    )
    weighted = BinnedCriterion(X, y[:, None], counts.astype(float), **settings)
    repeated = BinnedCriterion(X[rows], y[rows, None], None, **settings)
    for h in (0.02, 0.05):
        assert np.isclose(weighted(np.array([h]), 1e-3), repeated(np.array([h]), 1e-3))


def test_coarser_levels_give_the_same_criterion():
    X, y = sine_rows(2000, 1, seed=6)
    evaluate = BinnedCriterion(
        X,
        y[:, None],
        None,
        degree=1,
        criterion="loo",
        min_bandwidth=np.array([0.002]),
        levels=4,
        tol=1e-3,
    )
    h = np.array([0.04])
    assert evaluate.level(h, 1e-3) > 0
    grid = make_grid(X, h, degree=1, tol=1e-3)
    direct = criterion_value("loo", row_statistics(grid_sums(bin_targets(X, y, grid), h, 1), X, y))
    assert np.isclose(evaluate(h, 1e-3), direct, rtol=1e-4)


def test_curve_walks_downhill_to_a_bracketed_minimum():
    X, y = sine_rows(5000, 1, seed=8)
    result = search_bandwidth(X, y)
    best = int(np.nanargmin(result.curve))
    assert not np.isnan(result.curve[best - 1]) and not np.isnan(result.curve[best + 1])
    assert result.curve[best - 1] >= result.curve[best] <= result.curve[best + 1]


def test_edge_of_the_curve_is_reported():
    X, y = sine_rows(2000, 1, seed=7)
    result = search_bandwidth(X, y, factors=FACTORS[:4])  # all far too small
    assert result.at_edge


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="1 or 2 inputs"):
        search_bandwidth(np.zeros((10, 3)), np.zeros(10))
    with pytest.raises(ValueError, match="finite"):
        search_bandwidth(np.array([0.0, np.nan]), np.zeros(2))
    with pytest.raises(ValueError, match="vary"):
        search_bandwidth(np.ones(10), np.arange(10.0))
    with pytest.raises(ValueError, match="criterion must be one of"):
        search_bandwidth(np.arange(10.0), np.arange(10.0), criterion="bic")
