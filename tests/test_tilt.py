"""Tilted kernel weights (``AttentionRegressor(tilt=True)``): the weights against the
conditions that define them, the estimator's Nadaraya–Watson properties, and what the
balance buys (a trend on an uneven design)."""

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from kernattn import AttentionRegressor
from kernattn._core.loo import DuplicateGroups
from kernattn._local.tilt import FLOOR, PENALTIES, PENALTY, key_spread, tilted_weights
from kernattn.learned._local import COARSE_GRID, leave_one_out_lines, tune_tilt
from kernattn.learned._objective import Layout, LeaveOneOutObjective


def gaussian_weights(queries, keys, width):
    logits = -0.5 * np.sum((queries[:, None, :] - keys[None, :, :]) ** 2, axis=2) / width**2
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_tilted_weights_are_an_exponential_tilt_at_the_penalized_balance(d):
    rng = np.random.default_rng(d)
    keys = rng.exponential(size=(300, d))  # denser on one side of every query
    queries = rng.uniform(0.2, 1.5, size=(20, d))
    w = gaussian_weights(queries, keys, 0.4)
    tilted = tilted_weights(w, keys, queries)
    np.testing.assert_allclose(tilted.sum(axis=1), 1.0, rtol=1e-12)
    design = np.hstack([np.ones((len(keys), 1)), keys])
    for i in range(len(queries)):
        # log(w̃/w) is affine in the keys: the tilt λᵀk plus a constant...
        support = w[i] > 1e-200
        log_ratio = np.log(tilted[i, support]) - np.log(w[i, support])
        coef, *_ = np.linalg.lstsq(design[support], log_ratio, rcond=None)
        np.testing.assert_allclose(design[support] @ coef, log_ratio, atol=1e-7)
        lam = coef[1:]
        # ...and λ is where the penalized objective's gradient vanishes:
        # Σ w̃_j k_j − q + ε (C₀ + f C) λ = 0, C₀ the untilted covariance of the keys, C
        # their covariance over all keys.
        mean0 = w[i] @ keys
        C0 = (w[i][:, None] * (keys - mean0)).T @ (keys - mean0)
        C = np.cov(keys, rowvar=False, bias=True).reshape(d, d)
        gap = tilted[i] @ keys - queries[i]
        np.testing.assert_allclose(gap, -PENALTY * (C0 + FLOOR * C) @ lam, atol=1e-7)
        # The balance is nearly reached: the centroid is far closer to the query.
        assert np.linalg.norm(gap) < 0.2 * np.linalg.norm(mean0 - queries[i])


def test_key_spread_counts_a_weight_of_two_as_a_repeated_row():
    rng = np.random.default_rng(7)
    keys = rng.normal(size=(20, 3))
    repeated = np.vstack([keys, keys[:5]])
    weights = np.ones(20)
    weights[:5] = 2.0
    np.testing.assert_allclose(key_spread(keys, weights), key_spread(repeated), rtol=1e-12)


def test_zero_weights_stay_zero_and_a_query_beyond_the_keys_stays_finite():
    rng = np.random.default_rng(4)
    keys = rng.uniform(0, 1, size=(50, 1))
    queries = np.array([[0.5], [3.0], [-2.0]])
    w = gaussian_weights(queries, keys, 0.2)
    w[:, :5] = 0.0  # left out
    w /= w.sum(axis=1, keepdims=True)
    tilted = tilted_weights(w, keys, queries)
    assert np.all(tilted[:, :5] == 0.0)
    assert np.all(np.isfinite(tilted))
    np.testing.assert_allclose(tilted.sum(axis=1), 1.0, rtol=1e-12)
    # Beyond the keys the centroid moves outwards, towards the query, but stays inside.
    right, left = tilted[1] @ keys[:, 0], tilted[2] @ keys[:, 0]
    assert w[1] @ keys[:, 0] <= right <= keys.max()
    assert keys.min() <= left <= w[2] @ keys[:, 0]


def test_a_direction_without_spread_is_not_tilted():
    # Keys constant in their first coordinate (exactly, or up to rounding noise): no tilt
    # can move the centroid there, so the balance is sought in the other coordinate only,
    # and the noise does not steer it.
    rng = np.random.default_rng(4)
    second = rng.normal(size=40)
    queries = np.array([[3.0, 0.3], [-2.0, 1.2]])
    exact = np.column_stack([np.zeros(40), second])
    noisy = exact + np.column_stack([1e-17 * rng.normal(size=40), np.zeros(40)])
    weights = gaussian_weights(queries, exact, 0.8)
    tilted = tilted_weights(weights, exact, queries)
    np.testing.assert_allclose(tilted_weights(weights, noisy, queries), tilted, atol=1e-12)
    alone = tilted_weights(weights, exact[:, 1:], queries[:, 1:])
    np.testing.assert_allclose(tilted, alone, atol=1e-12)
    # Balanced in the second coordinate up to the penalty's gap.
    gap, untilted = tilted @ second - queries[:, 1], weights @ second - queries[:, 1]
    assert np.all(np.abs(gap) < 0.25 * np.abs(untilted))


def uneven_trend(n=200, seed=0, noise=0.0):
    rng = np.random.default_rng(seed)
    X = rng.exponential(size=(n, 1))
    return X, 2.0 * X[:, 0] + 1.0 + noise * rng.normal(size=n)


def test_tilted_estimator_is_nadaraya_watson():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.2 * rng.normal(size=120)
    model = AttentionRegressor(tilt=True, warp=0, degree=0, n_heads=2, random_state=0).fit(X, y)
    queries = np.vstack([rng.normal(size=(30, 2)), 5 * rng.normal(size=(10, 2))])
    weights = model.attention_weights(queries)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-10)
    prediction = model.predict(queries)
    np.testing.assert_allclose(prediction, weights @ y, rtol=1e-9, atol=1e-12)
    assert np.all((prediction >= y.min() - 1e-12) & (prediction <= y.max() + 1e-12))
    for h in range(2):
        head = model.attention_weights(queries, head=h)
        assert np.all(head >= 0)
        np.testing.assert_allclose(head.sum(axis=1), 1.0, rtol=1e-10)


def test_tilt_removes_the_bias_of_an_uneven_design():
    X, y = uneven_trend()
    average = AttentionRegressor(tilt=False, warp=0, degree=0, random_state=0).fit(X, y)
    tilted = AttentionRegressor(tilt=True, warp=0, degree=0, random_state=0).fit(X, y)
    queries = np.linspace(0.1, 2.0, 12)[:, None]
    truth = 2.0 * queries[:, 0] + 1.0
    error_average = np.abs(average.predict(queries) - truth)
    error_tilted = np.abs(tilted.predict(queries) - truth)
    assert np.max(error_tilted) < 0.2 * np.max(error_average)


def test_width_and_penalty_are_tuned_by_the_leave_one_out_error_of_the_tilted_estimate():
    X, y = uneven_trend(n=150, noise=0.3)
    model = AttentionRegressor(tilt=True, warp=0, degree=0, random_state=0).fit(X, y)
    plain = AttentionRegressor(tilt=False, warp=0, degree=0, random_state=0).fit(X, y)
    np.testing.assert_allclose(model.scale_, plain.scale_ * model.width_factor_, rtol=1e-12)
    assert model.tilt_penalty_ in PENALTIES
    # The chosen pair beats the learned width (factor 1) at every penalty on the tilted
    # leave-one-out error, and every penalty at every width of the coarse grid.
    Z = (X - model.center_) / model.input_scale_
    Y = (y - y.mean())[:, None]
    layout = Layout(1, 1, 1, 1, True, False)
    objective = LeaveOneOutObjective(
        Z, Y, np.ones(len(X)), DuplicateGroups(X), layout, "gaussian", plain.scale_, 1.0
    )
    theta = layout.pack(plain.query_projection_, None, None, np.ones(1), np.zeros(1))
    queries = np.arange(len(X))

    def loss(log_factor, penalty):
        estimate, _ = leave_one_out_lines(
            objective, theta, log_factor, queries, tilt=("balance", penalty)
        )
        return np.mean((estimate - Y) ** 2)

    chosen, penalty = tune_tilt(objective, theta, np.random.RandomState(0), "balance")
    assert chosen == pytest.approx(np.log(model.width_factor_), abs=1e-12)
    assert penalty == model.tilt_penalty_
    best = loss(chosen, penalty)
    for other in PENALTIES:
        assert best <= loss(0.0, other)
        for log_factor in COARSE_GRID:
            assert best <= loss(log_factor, other) + 1e-15


def test_a_width_too_narrow_to_balance_is_not_chosen():
    # Five features and 60 rows: the narrowest kernels leave many queries with fewer keys
    # than a balance in five directions needs; those widths are excluded, as for lines.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 5))
    y = X @ [1.0, -1.0, 0.5, 0.0, 2.0] + 0.5 * rng.normal(size=60)
    model = AttentionRegressor(tilt=True, warp=0, degree=0, random_state=0).fit(X, y)
    keys = (X - model.center_) / model.input_scale_ @ model.query_projection_[0]
    logits = -0.5 * model.scale_[0] * np.sum((keys[:, None] - keys[None]) ** 2, axis=2)
    np.fill_diagonal(logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    support = (weights > 1e-12 * weights.max(axis=1, keepdims=True)).sum(axis=1)
    assert np.mean(support < 6) <= 0.01


def test_leave_one_out_tilted_estimates_leave_the_query_out():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(30, 2))
    X[3] = X[7]  # duplicates leave each other out
    Y = rng.normal(size=(30, 1))
    layout = Layout(1, 2, 2, 1, True, False)
    objective = LeaveOneOutObjective(
        X, Y, np.ones(30), DuplicateGroups(X), layout, "gaussian", np.array([0.7]), 0.0
    )
    theta = layout.pack(np.eye(2)[None], None, None, np.ones(1), np.zeros(1))
    estimate, fell_back = leave_one_out_lines(
        objective, theta, -0.3, np.arange(30), tilt=("balance", PENALTY)
    )
    assert not np.any(fell_back)
    width = 1.0 / np.sqrt(0.7 * np.exp(-0.3))
    for i in range(30):
        others = np.flatnonzero(np.any(X != X[i], axis=1))
        w = gaussian_weights(X[i : i + 1], X[others], width)
        expected = tilted_weights(w, X[others], X[i : i + 1], spread=key_spread(X)) @ Y[others, 0]
        assert estimate[i, 0] == pytest.approx(expected[0], rel=1e-9, abs=1e-12)
    # With a bound on the share of queries without a balance: the same estimates where the
    # bound holds; where it does not (a narrow kernel), the same mask and no estimates.
    bounded, mask = leave_one_out_lines(
        objective, theta, -0.3, np.arange(30), tilt=("balance", PENALTY), max_fallback=0.01
    )
    np.testing.assert_array_equal(bounded, estimate)
    np.testing.assert_array_equal(mask, fell_back)
    narrow, mask = leave_one_out_lines(
        objective, theta, 4.0, np.arange(30), tilt=("balance", PENALTY)
    )
    assert mask.mean() > 0.01
    skipped, same = leave_one_out_lines(
        objective, theta, 4.0, np.arange(30), tilt=("balance", PENALTY), max_fallback=0.01
    )
    assert skipped is None
    np.testing.assert_array_equal(same, mask)


def test_tilt_with_local_lines_is_rejected():
    X, y = uneven_trend(n=30)
    with pytest.raises(InvalidParameterError, match="tilt=True"):
        AttentionRegressor(tilt=True, degree=1).fit(X, y)
    with pytest.raises(InvalidParameterError, match="tilt"):
        AttentionRegressor(tilt="yes").fit(X, y)


def test_a_refit_without_the_tilt_drops_its_width():
    X, y = uneven_trend(n=60, noise=0.1)
    model = AttentionRegressor(tilt=True, warp=0, degree=0, random_state=0).fit(X, y)
    assert hasattr(model, "width_factor_")
    model.set_params(tilt=False).fit(X, y)
    assert not hasattr(model, "width_factor_")
    np.testing.assert_allclose(
        model.predict(X[:5]),
        AttentionRegressor(tilt=False, warp=0, degree=0, random_state=0).fit(X, y).predict(X[:5]),
    )


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_tilts_up_to_three_features_and_warps_one():
    rng = np.random.default_rng(0)

    def fitted(d, **params):
        X = rng.uniform(-1, 1, size=(60, d))
        y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=60)
        # The tilt "auto" resolves for the local constant (degree="auto" may choose a line).
        params = {"degree": 0, **params}
        return AttentionRegressor(max_iter=20, random_state=0, **params).fit(X, y), X, y

    # Up to three features along each query's local slope; beyond, along the targets' trend
    # unless the slope wins the leave-one-out comparison clearly.
    for d, tilts, warp in [
        (1, {"slope"}, 8),
        (2, {"slope"}, 0),
        (3, {"slope"}, 0),
        (4, {"trend", "slope"}, 0),
    ]:
        model, _, _ = fitted(d)
        assert model.tilt_ in tilts and model.warp_ == warp
        assert hasattr(model, "tilt_penalty_")
        assert hasattr(model, "warp_slopes_") is bool(warp)
    # Too few distinct inputs for a leave-one-out choice of the tilt: 9 < 5 · (1 + 1).
    X = np.repeat(np.linspace(-1, 1, 9), 4)[:, None]
    few = AttentionRegressor(max_iter=20, random_state=0, degree=0).fit(X, np.sin(3 * X[:, 0]))
    assert (few.tilt_, few.warp_) == (False, 8)
    # A local line is balanced already: "auto" does not tilt it, and still warps one input.
    line, _, _ = fitted(1, degree=1)
    assert (line.tilt_, line.warp_) == (False, 8)
    # Explicit values are kept, whatever the dimension.
    model, _, _ = fitted(1, tilt=False, warp=3)
    assert (model.tilt_, model.warp_) == (False, 3)
    model, _, _ = fitted(5, tilt=True)
    assert (model.tilt_, model.warp_) == ("balance", 0)
    # The default in one dimension is the explicit tilt along the slope with an 8-piece warp.
    auto, X, y = fitted(1)
    explicit = AttentionRegressor(tilt="slope", warp=8, degree=0, max_iter=20, random_state=0)
    explicit.fit(X, y)
    np.testing.assert_array_equal(auto.predict(X), explicit.predict(X))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_keeps_the_plain_softmax_beyond_the_exact_fit(monkeypatch):
    import kernattn.learned._regressor as regressor

    monkeypatch.setattr(regressor, "LARGE_N", 50)
    X, y = uneven_trend(n=80)
    model = AttentionRegressor(max_iter=2, random_state=0).fit(X, y)
    assert (model.tilt_, model.warp_) == (False, 0)
