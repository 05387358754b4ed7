"""Weights tilted along one direction (``AttentionRegressor(tilt="slope")`` and
``tilt="trend"``, the default's bias correction): the tilt against the conditions that
define it, the directions against direct least squares, and the default estimator's
Nadaraya–Watson contract in every dimension."""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from kernattn import AttentionRegressor
from kernattn._local.tilt import (
    FLOOR,
    directional_tilt,
    key_spread,
    slope_directions,
    tilt_weights,
    trend_direction,
)


def gaussian_weights(queries, keys, width):
    logits = -0.5 * np.sum((queries[:, None, :] - keys[None, :, :]) ** 2, axis=2) / width**2
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("penalty", [1e-3, 1.0 / 16.0, 1.0])
def test_directional_tilt_minimizes_its_penalized_objective(penalty):
    rng = np.random.default_rng(0)
    keys = rng.exponential(size=(200, 2))
    queries = rng.uniform(0.1, 2.0, size=(15, 2))
    w = gaussian_weights(queries, keys, 0.5)
    g = np.array([0.6, -0.8])
    scores, query_scores = keys @ g, queries @ g
    spread = float(np.var(scores))
    tilted = directional_tilt(w, scores, query_scores, spread, penalty)
    np.testing.assert_allclose(tilted.sum(axis=1), 1.0, rtol=1e-12)
    for i in range(len(queries)):
        mean = w[i] @ scores
        v = w[i] @ (scores - mean) ** 2 + FLOOR * spread

        def objective(lam, i=i, v=v):
            z = np.log(w[i]) + lam * (scores - query_scores[i])
            top = z.max()
            return top + np.log(np.exp(z - top).sum()) + 0.5 * penalty * lam**2 * v

        lam = minimize_scalar(objective, bracket=(-1.0, 1.0), tol=1e-12).x
        expected = w[i] * np.exp(lam * scores)
        np.testing.assert_allclose(tilted[i], expected / expected.sum(), rtol=1e-6, atol=1e-14)
        # At the minimum the centroid misses the query's score by the penalty's pull.
        centroid = tilted[i] @ scores
        assert centroid - query_scores[i] == pytest.approx(-penalty * v * lam, rel=1e-6, abs=1e-9)


def test_directional_tilt_is_the_same_for_shared_repeated_and_shifted_scores():
    # Scores shared by the queries, the same scores given per query, and each query's scores
    # shifted by its own constant (with its score): one tilt, since a shift within a row
    # cancels in the normalization.
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(300, 2))
    queries = rng.uniform(-1.5, 1.5, size=(20, 2))
    w = gaussian_weights(queries, keys, 0.4)
    g = np.array([0.8, 0.6])
    scores, query_scores = keys @ g, queries @ g
    spread = float(np.var(scores))
    shared = directional_tilt(w, scores, query_scores, spread, 1.0 / 16.0)
    repeated = directional_tilt(w, np.tile(scores, (20, 1)), query_scores, spread, 1.0 / 16.0)
    shift = 1e3 * np.arange(20)
    shifted = directional_tilt(
        w, scores + shift[:, None], query_scores + shift, spread, 1.0 / 16.0
    )
    np.testing.assert_allclose(repeated, shared, rtol=0, atol=1e-14)
    np.testing.assert_allclose(shifted, shared, rtol=0, atol=1e-9)
    assert not np.allclose(shared, w, atol=1e-3)  # the queries were tilted


def test_a_row_without_spread_keeps_its_kernel_weights():
    w = np.array([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    scores = np.array([0.0, 1.0, 2.0])
    tilted = directional_tilt(w, scores, np.array([1.5, 1.5]), 1.0)
    np.testing.assert_array_equal(tilted[0], w[0])  # one key: nothing to balance with
    assert tilted[1] @ scores > w[1] @ scores  # pulled toward the query's score
    constant = directional_tilt(w, np.zeros(3), np.array([1.0, 1.0]), 0.0)
    np.testing.assert_array_equal(constant, w)  # scores without spread: no direction


def test_slope_directions_are_the_local_weighted_least_squares_slopes():
    rng = np.random.default_rng(1)
    keys = rng.normal(size=(120, 3))
    values = (keys @ [1.0, -2.0, 0.5] + np.sin(keys[:, 0]) + 0.1 * rng.normal(size=120))[:, None]
    queries = rng.normal(size=(10, 3))
    w = gaussian_weights(queries, keys, 0.9)
    G = slope_directions(w, keys, queries, values)
    design = np.hstack([np.ones((len(keys), 1)), keys])
    for i in range(len(queries)):
        root = np.sqrt(w[i])[:, None]
        beta = np.linalg.lstsq(design * root, values * root, rcond=None)[0][1:, 0]
        np.testing.assert_allclose(G[i], beta / np.linalg.norm(beta), rtol=1e-6, atol=1e-9)


def test_trend_direction_is_the_least_squares_direction():
    rng = np.random.default_rng(2)
    keys = rng.normal(size=(300, 4)) * [1.0, 3.0, 0.5, 2.0]
    y = keys @ [2.0, 0.0, -1.0, 0.5] + 0.01 * rng.normal(size=300)
    g = trend_direction(keys, y)
    expected = np.array([2.0, 0.0, -1.0, 0.5])
    np.testing.assert_allclose(g, expected / np.linalg.norm(expected), atol=1e-3)
    assert np.all(trend_direction(keys, np.ones(300)) == 0.0)  # no trend: no direction
    # Several outputs: the slopes' direction that varies most over the keys.
    two = trend_direction(keys, np.column_stack([y, 0.001 * keys[:, 1]]))
    np.testing.assert_allclose(np.abs(two), np.abs(g), atol=1e-3)


@pytest.mark.parametrize("kind", ["slope", "trend"])
def test_a_tilt_along_the_slope_reproduces_a_linear_function_inside_the_data(kind):
    # An uneven design (denser on one side of every query): the kernel average is biased
    # along the slope; balanced along it, the weights reproduce the linear target.
    rng = np.random.default_rng(3)
    keys = rng.exponential(size=(400, 3))
    y = keys @ [1.0, 2.0, -1.0] + 3.0
    queries = rng.uniform(0.3, 1.2, size=(25, 3))
    w = gaussian_weights(queries, keys, 0.5)
    direction = trend_direction(keys, y) if kind == "trend" else None
    tilted, unreached = tilt_weights(
        kind,
        w,
        keys,
        queries,
        spread=key_spread(keys),
        penalty=1e-6,
        values=y[:, None],
        direction=direction,
    )
    truth = queries @ [1.0, 2.0, -1.0] + 3.0
    assert not np.any(unreached)
    np.testing.assert_allclose(tilted @ y, truth, atol=1e-4)
    assert np.max(np.abs(w @ y - truth)) > 0.3  # the kernel average is not


def test_a_query_beyond_the_data_is_unreached_and_stays_in_range():
    rng = np.random.default_rng(4)
    keys = rng.uniform(-1, 1, size=(100, 2))
    y = keys @ [1.0, 1.0]
    queries = np.array([[0.0, 0.1], [8.0, 8.0]])
    w = gaussian_weights(queries, keys, 3.0)
    tilted, unreached = tilt_weights(
        "slope",
        w,
        keys,
        queries,
        spread=key_spread(keys),
        penalty=1.0 / 16.0,
        values=y[:, None],
    )
    assert unreached.tolist() == [False, True]
    assert y.min() <= tilted[1] @ y <= y.max()


@pytest.mark.parametrize("d, n_heads", [(1, 1), (2, 1), (3, 2), (5, 1), (8, 3)])
def test_default_attention_regressor_is_nadaraya_watson(d, n_heads):
    rng = np.random.default_rng(d + 10 * n_heads)
    X = rng.normal(size=(90, d))
    y = np.sin(X[:, 0]) + X[:, -1] ** 2 + 0.2 * rng.normal(size=90)
    model = AttentionRegressor(n_heads=n_heads, max_iter=30, random_state=0).fit(X, y)
    assert model.degree_ == 0 and model.line_share_ == 0.0 and model.tilt_
    queries = np.vstack([X[:10], rng.normal(size=(20, d)), 50.0 * rng.normal(size=(5, d))])
    weights = model.attention_weights(queries)
    assert weights.shape == (len(queries), len(X))
    assert weights.min() >= 0.0
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    prediction = model.predict(queries)
    np.testing.assert_allclose(weights @ y, prediction, rtol=1e-9, atol=1e-12)
    rounding = 1e-12 * np.ptp(y)
    assert np.all((prediction >= y.min() - rounding) & (prediction <= y.max() + rounding))
    for h in range(n_heads):
        head = model.attention_weights(queries, head=h)
        assert head.min() >= 0.0
        np.testing.assert_allclose(head.sum(axis=1), 1.0, rtol=1e-12)
