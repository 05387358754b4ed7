"""The conditional distribution from the weights: predict_cdf, predict_quantiles and
conformal_interval, against direct formulas on the dense weights."""

import warnings

import numpy as np
import pytest
from scipy.stats import beta

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor
from kernattn._engine.distribution import (
    DenseWeights,
    TargetTiles,
    cdf_at_counts,
    quantile_ranks,
    upper_rank_quantile,
)


def heteroscedastic(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, 1))
    y = np.sin(2 * np.pi * X[:, 0]) + (0.05 + 0.5 * X[:, 0]) * rng.normal(size=n)
    return X, y


def queries():
    return np.linspace(-0.1, 1.1, 13)[:, None]


def models():
    return {
        "smoother": KernelSmoother(bandwidth=0.05),
        "attention": AttentionRegressor(
            n_heads=2,
            head_mixture="affine",
            degree=0,
            tilt=False,
            warp=0,
            max_iter=20,
            random_state=0,
        ),
        "linear": LinearAttentionRegressor(n_near_keys=0, n_components=32, random_state=0),
    }


@pytest.fixture(scope="module")
def fitted():
    X, y = heteroscedastic(150)
    return X, y, {name: model.fit(X, y) for name, model in models().items()}


def distribution_weights(model, X):
    """The heads' weights mixed in the shares |a_h| / Σ|a_g| (a dense reference)."""
    a = np.abs(model.kernel_.head_weights)
    a = a / a.sum()
    return sum(a[h] * model.attention_weights(X, head=h) for h in range(len(a)))


def reference_quantiles(weights, y, levels):
    """inf{t : Σ_i w_i 1{y_i ≤ t} ≥ τ}, one query and one level at a time."""
    order = np.argsort(y, kind="stable")
    out = np.empty((len(weights), len(levels)))
    for i, w in enumerate(weights):
        cdf = np.cumsum(w[order])
        cdf = cdf / cdf[-1]
        for j, tau in enumerate(levels):
            k = np.flatnonzero(cdf > 0)[0] if tau == 0 else np.flatnonzero(cdf >= tau)[0]
            out[i, j] = y[order][k]
    return out


@pytest.mark.parametrize("name", ["smoother", "attention", "linear"])
def test_cdf_is_the_weights_times_the_indicators(fitted, name):
    X, y, fits = fitted
    model = fits[name]
    weights = distribution_weights(model, queries())
    thresholds = np.quantile(y, [0.0, 0.1, 0.3, 0.5, 0.8, 1.0])
    thresholds = np.r_[y.min() - 1, thresholds, y.max() + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cdf = model.predict_cdf(queries(), thresholds)
    direct = weights @ (y[:, None] <= thresholds[None, :]).astype(float)
    if name == "linear" and np.any(weights < 0):
        # Signed implied weights: the rearranged, clipped CDF; the same at the ends.
        assert np.all(np.diff(cdf, axis=1) >= 0)
        np.testing.assert_allclose(cdf[:, -1], 1.0)
    else:
        np.testing.assert_allclose(cdf, direct, atol=1e-12)
    assert cdf.shape == (13, len(thresholds))
    assert np.all(cdf[:, 0] == 0) and np.all(cdf[:, -1] == 1)


@pytest.mark.parametrize("name", ["smoother", "attention", "linear"])
def test_quantiles_are_the_weighted_quantiles_of_the_targets(fitted, name):
    X, y, fits = fitted
    model = fits[name]
    levels = [0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0]
    weights = distribution_weights(model, queries())
    got = model.predict_quantiles(queries(), levels)
    if np.all(weights >= 0):
        np.testing.assert_array_equal(got, reference_quantiles(weights, y, levels))
    assert np.all(np.diff(got, axis=1) >= 0)
    assert np.all(np.isin(got, y))


@pytest.mark.parametrize("tile", [1, 3, 7, 64])
def test_tiles_of_sorted_targets_give_the_exact_cdf_and_quantiles(tile):
    rng = np.random.default_rng(tile)
    weights = rng.exponential(size=(6, 50)) * (rng.random((6, 50)) < 0.5)
    weights[0] = 0.0
    weights[0, 17] = 1.0  # all the weight on one row
    weights /= weights.sum(axis=1, keepdims=True)
    y = rng.normal(size=50).round(1)  # ties
    order = np.argsort(y, kind="stable")
    dense = DenseWeights(weights, TargetTiles(order, tile))
    counts = np.arange(51)
    cdf = cdf_at_counts(dense.masses, counts, dense.fractions, tile)
    direct = np.concatenate([np.zeros((6, 1)), np.cumsum(weights[:, order], axis=1)], axis=1)
    np.testing.assert_allclose(cdf, direct, atol=1e-12)
    levels = np.r_[0.0, np.linspace(0.01, 0.99, 23), 1.0]
    ranks = quantile_ranks(dense.masses, levels, dense.fractions, tile)
    np.testing.assert_array_equal(y[order][ranks], reference_quantiles(weights, y, levels))


@pytest.mark.parametrize("name", ["smoother", "attention"])
def test_many_tiles_through_the_reduction(name):
    X, y = heteroscedastic(1300, seed=11)
    model = models()[name].fit(X, y)
    Q = queries()
    weights = distribution_weights(model, Q)
    # (Level 1 is the largest target of positive weight: weights below the rounding of
    # the cumulative sums decide it, in either computation.)
    levels = np.linspace(0, 0.99, 21)
    np.testing.assert_array_equal(
        model.predict_quantiles(Q, levels), reference_quantiles(weights, y, levels)
    )
    ys = np.sort(y)
    thresholds = np.r_[ys[[0, 100, 511, 512, 513, 1023, 1024, 1299]], ys[-1] + 1]
    direct = weights @ (y[:, None] <= thresholds[None, :])
    np.testing.assert_allclose(model.predict_cdf(Q, thresholds), direct, atol=1e-12)


def test_quantile_at_a_tie_of_the_cumulative_weight_is_the_lower_target():
    # Uniform weights over four targets: F = 0.25, 0.5, …; τ = 0.5 is reached at the second.
    X = np.zeros((4, 1))
    y = np.array([3.0, 1.0, 4.0, 2.0])
    model = KernelSmoother(bandwidth=1.0).fit(X, y)
    np.testing.assert_array_equal(
        model.predict_quantiles([[0.0]], [0.0, 0.25, 0.5, 0.500001, 1.0]), [[1, 1, 2, 3, 4]]
    )


def test_signed_weights_give_a_monotone_cdf_in_the_unit_interval_and_say_how_many():
    X, y = heteroscedastic(120, seed=1)
    model = KernelSmoother(bandwidth=0.15, degree=1).fit(X, y)
    Q = np.array([[0.0], [0.02], [0.5], [1.0]])
    weights = model.attention_weights(Q)
    assert np.any(weights < 0)
    thresholds = np.sort(y)
    with pytest.warns(UserWarning, match=r"of 4 queries have signed weights"):
        cdf = model.predict_cdf(Q, thresholds)
    assert np.all(np.diff(cdf, axis=1) >= 0)
    assert np.all((cdf >= 0) & (cdf <= 1))
    # Where the signed CDF is already monotone in [0, 1] it is left as it is.
    direct = np.cumsum(weights[:, np.argsort(y, kind="stable")], axis=1)
    fine = np.all(np.diff(direct, axis=1) >= 0, axis=1) & np.all(
        (direct >= 0) & (direct <= 1 + 1e-12), axis=1
    )
    np.testing.assert_allclose(cdf[fine], direct[fine], atol=1e-12)


def test_integer_sample_weights_are_repeated_rows():
    X, y = heteroscedastic(60, seed=2)
    counts = np.random.default_rng(0).integers(0, 4, size=60)
    weighted = KernelSmoother(bandwidth=0.1).fit(X, y, sample_weight=counts)
    repeated = KernelSmoother(bandwidth=0.1).fit(np.repeat(X, counts, 0), np.repeat(y, counts))
    levels = np.linspace(0, 1, 11)
    np.testing.assert_array_equal(
        weighted.predict_quantiles(queries(), levels),
        repeated.predict_quantiles(queries(), levels),
    )
    thresholds = np.linspace(-2, 2, 9)
    np.testing.assert_allclose(
        weighted.predict_cdf(queries(), thresholds),
        repeated.predict_cdf(queries(), thresholds),
        atol=1e-12,
    )


def test_multi_output_has_a_leading_output_axis():
    X, y = heteroscedastic(80)
    Y = np.column_stack([y, -2 * y])
    model = KernelSmoother(bandwidth=0.1).fit(X, Y)
    quantiles = model.predict_quantiles(queries(), [0.1, 0.9])
    assert quantiles.shape == (2, 13, 2)
    np.testing.assert_allclose(quantiles[1][:, ::-1], -2 * quantiles[0], atol=1e-12)
    cdf = model.predict_cdf(queries(), [[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0]])
    assert cdf.shape == (2, 13, 3)
    lower, upper = model.conformal_interval(queries())
    assert lower.shape == upper.shape == (13, 2)


# --------------------------------------------------------------- conformal intervals


def leave_one_out_reference(model, X, y, Q):
    """Brute force: per head, the dense weights with each row's group of identical inputs
    zeroed and renormalized, averaging the centered targets; mixed as the model mixes its
    heads (weights a_h, bias b)."""
    a, b = model.kernel_.head_weights, model.kernel_.head_bias[0]
    offset = model._y_offset[0]
    centered = y - offset
    same = np.all(X[:, None, :] == X[None, :, :], axis=2)
    at_query = np.zeros((len(Q), len(X))) + b + offset
    train = np.zeros(len(X)) + b + offset
    for h in range(len(a)):
        W = np.where(same, 0.0, model.attention_weights(X, head=h))
        train += a[h] * (W @ centered) / W.sum(axis=1)
        V = model.attention_weights(Q, head=h)
        for i in range(len(X)):
            keep = ~same[i]
            at_query[:, i] += a[h] * (V[:, keep] @ centered[keep]) / V[:, keep].sum(axis=1)
    return np.abs(y - train), at_query


def pac_rank(n, alpha, confidence):
    """The smallest k whose k-th smallest of n residuals covers 1 − α of new observations
    with probability ``confidence``: coverage ~ Beta(k, n + 1 − k)."""
    k = np.arange(1, n + 1)
    return int(k[beta.cdf(1 - alpha, k, n + 1 - k) <= 1 - confidence][0])


@pytest.mark.parametrize("confidence", [None, 0.9])
@pytest.mark.parametrize("name", ["smoother", "attention"])
def test_jackknife_plus_from_the_leave_one_out_estimates(name, confidence):
    X, y = heteroscedastic(80, seed=3)
    X = np.vstack([X, X[:5]])  # exact duplicates are left out with their row
    y = np.r_[y, y[:5] + 0.1]
    model = models()[name].fit(X, y)
    Q = queries()
    residuals, at_query = leave_one_out_reference(model, X, y, Q)
    alpha = 0.2
    if confidence is None:
        k = int(np.ceil((1 - alpha) * (len(y) + 1)))
    else:
        k = pac_rank(len(y), alpha, confidence)
        assert k > np.ceil((1 - alpha) * (len(y) + 1))
    upper = np.sort(at_query + residuals, axis=1)[:, k - 1]
    lower = -np.sort(residuals - at_query, axis=1)[:, k - 1]
    got_lower, got_upper = model.conformal_interval(
        Q, alpha=alpha, method="jackknife+", confidence=confidence
    )
    np.testing.assert_allclose(got_upper, upper, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_lower, lower, rtol=1e-9, atol=1e-9)


def test_leave_one_out_estimate_is_a_refit_without_the_row():
    X, y = heteroscedastic(50, seed=4)
    model = KernelSmoother(bandwidth=0.08).fit(X, y)
    residuals = model._residuals()[0][:, 0]
    order = model._active
    for position in (0, 17, 49):
        i = order[position]
        rest = np.arange(50) != i
        refit = KernelSmoother(bandwidth=0.08).fit(X[rest], y[rest])
        assert residuals[position] == pytest.approx(abs(y[i] - refit.predict(X[i : i + 1])[0]))


def test_local_interval_is_the_weighted_quantile_of_the_residuals():
    X, y = heteroscedastic(90, seed=5)
    model = KernelSmoother(bandwidth=0.1).fit(X, y)
    residuals = np.abs(model._residuals()[0][:, 0])
    y_kept = y[model._active]
    Q = queries()
    W = model.attention_weights(Q)[:, model._active]
    alpha = 0.1
    lower, upper = model.conformal_interval(Q, alpha=alpha, method="local")
    for i, w in enumerate(W):
        level = (1 - alpha) * (1 + np.sum(w**2))
        center = w @ y_kept
        order = np.argsort(residuals)
        cdf = np.cumsum(w[order])
        half = residuals[order][np.flatnonzero(cdf >= level - 1e-12)[0]] if level <= 1 else np.inf
        assert upper[i] == pytest.approx(center + half)
        assert lower[i] == pytest.approx(center - half)


def test_upper_rank_quantile_with_weights_matches_the_unweighted_rank():
    values = np.random.default_rng(0).normal(size=(4, 19))
    plain = upper_rank_quantile(values, 0.1)
    weighted = upper_rank_quantile(values, 0.1, sample_weight=np.r_[np.ones(18), 1 + 1e-15])
    np.testing.assert_array_equal(plain, np.sort(values, axis=1)[:, 17])
    np.testing.assert_array_equal(weighted, plain)
    assert np.all(np.isinf(upper_rank_quantile(values, 0.01)))


def test_coverage_on_a_simulated_heteroscedastic_set():
    X, y = heteroscedastic(600, seed=6)
    X_test, y_test = heteroscedastic(3000, seed=7)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    for method in ("jackknife+", "local"):
        lower, upper = model.conformal_interval(X_test, alpha=0.1, method=method)
        coverage = np.mean((lower <= y_test) & (y_test <= upper))
        assert 0.86 <= coverage <= 0.95, (method, coverage)
    # The local interval follows the noise: wider where it is larger.
    lower, upper = model.conformal_interval([[0.1], [0.9]], method="local")
    assert (upper - lower)[1] > 2 * (upper - lower)[0]
    q10, q90 = model.predict_quantiles(X_test, [0.1, 0.9]).T
    assert 0.7 <= np.mean((q10 <= y_test) & (y_test <= q90)) <= 0.85


def test_linear_attention_intervals_with_approximate_weights():
    X, y = heteroscedastic(200, seed=8)
    X_test, y_test = heteroscedastic(1000, seed=9)
    model = LinearAttentionRegressor(n_near_keys=0, random_state=0).fit(X, y)
    assert model._exact_kernel() is None
    for method in ("jackknife+", "local"):
        lower, upper = model.conformal_interval(X_test, method=method)
        assert np.all(lower < upper)
        assert 0.83 <= np.mean((lower <= y_test) & (y_test <= upper)) <= 0.96


# ----------------------------------------------------------------------- errors


def state(model):
    return {k: v for k, v in model.__dict__.items() if not k.startswith("_residuals")}


@pytest.mark.parametrize("alpha", [0, 1, 1.5, -0.1, True, "0.1", np.nan])
def test_alpha_outside_the_unit_interval_is_refused(fitted, alpha):
    model = fitted[2]["smoother"]
    with pytest.raises(ValueError, match="alpha must be a float strictly between 0 and 1"):
        model.conformal_interval(queries(), alpha=alpha)


def test_unknown_method_is_refused(fitted):
    with pytest.raises(ValueError, match="method must be 'jackknife\\+' or 'local'"):
        fitted[2]["smoother"].conformal_interval(queries(), method="naive")


@pytest.mark.parametrize("levels", [[-0.1, 0.5], [0.5, 1.1], [np.nan], []])
def test_quantiles_outside_the_unit_interval_are_refused(fitted, levels):
    with pytest.raises(ValueError, match="quantiles"):
        fitted[2]["smoother"].predict_quantiles(queries(), levels)


@pytest.mark.parametrize(
    "thresholds, message",
    [
        ([1.0, 0.0], "sorted"),
        ([0.0, np.nan], "NaN"),
        ([], "non-empty"),
        ([[0.0, 1.0]] * 2, "one row"),
    ],
)
def test_bad_thresholds_are_refused_and_the_model_is_unchanged(fitted, thresholds, message):
    model = fitted[2]["smoother"]
    before = model.predict(queries())
    with pytest.raises(ValueError, match=message):
        model.predict_cdf(queries(), thresholds)
    np.testing.assert_array_equal(model.predict(queries()), before)


def test_a_kernel_fitted_without_leave_one_out_has_no_conformal_interval():
    X, y = heteroscedastic(60)
    model = AttentionRegressor(leave_one_out=False, max_iter=5, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="leave_one_out=False"):
        model.conformal_interval(queries())
    # Its weights are still a distribution: the CDF and quantiles are given.
    assert model.predict_quantiles(queries()).shape == (13, 3)


def test_partial_fit_keeps_no_targets_and_says_so():
    X, y = heteroscedastic(100)
    model = LinearAttentionRegressor(n_near_keys=0, random_state=0).fit(X, y)
    model.partial_fit(X[:10], y[:10])
    for call in (
        lambda: model.predict_cdf(queries(), [0.0]),
        lambda: model.predict_quantiles(queries()),
        lambda: model.conformal_interval(queries()),
    ):
        with pytest.raises(RuntimeError, match="partial_fit"):
            call()


@pytest.mark.parametrize("in_parts", ["partial_fit", "fit_chunks", "fit then partial_fit"])
def test_conformal_interval_of_a_fit_in_parts_says_what_it_misses(in_parts):
    from kernattn import fit_chunks

    X, y = heteroscedastic(120)
    params = dict(n_near_keys=0, center=[0.5], bandwidth=0.2, random_state=0)
    whole = LinearAttentionRegressor(**params).fit(X, y)
    lower, upper = whole.conformal_interval(queries())
    assert np.all(np.isfinite(lower) & np.isfinite(upper)) and np.all(lower < upper)
    model = LinearAttentionRegressor(**params)
    if in_parts == "partial_fit":
        model.partial_fit(X[:60], y[:60]).partial_fit(X[60:], y[60:])
    elif in_parts == "fit_chunks":
        fit_chunks(model, [(X[:60], y[:60]), (X[60:], y[60:])])
    else:
        model.fit(X[:60], y[:60]).partial_fit(X[60:], y[60:])
    # The sums are those of the whole fit; only the rows are missing.
    np.testing.assert_allclose(model.predict(queries()), whole.predict(queries()), rtol=1e-6)
    for method in ("jackknife+", "local"):
        with pytest.raises(RuntimeError, match="leave-one-out residual.*fit_chunks"):
            model.conformal_interval(queries(), method=method)


# --------------------------------------------------------------- smoothing in y


@pytest.mark.parametrize("name", ["smoother", "attention", "linear"])
def test_cdf_smoothed_in_y_is_the_weights_times_the_kernel_cdf(fitted, name):
    from scipy.stats import norm

    X, y, fits = fitted
    model = fits[name]
    weights = distribution_weights(model, queries())
    thresholds = np.linspace(-2, 2, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cdf = model.predict_cdf(queries(), thresholds, y_bandwidth=0.2)
    direct = weights @ norm.cdf((thresholds[None, :] - y[:, None]) / 0.2)
    if np.all(weights >= 0):
        np.testing.assert_allclose(cdf, direct, atol=1e-12)
    assert np.all(np.diff(cdf, axis=1) >= 0) and np.all((cdf >= 0) & (cdf <= 1))


def test_a_vanishing_y_bandwidth_gives_the_step_cdf(fitted):
    X, y, fits = fitted
    model = fits["smoother"]
    thresholds = np.sort(y)[::10] + 1e-6
    np.testing.assert_allclose(
        model.predict_cdf(queries(), thresholds, y_bandwidth=1e-9),
        model.predict_cdf(queries(), thresholds),
        atol=1e-12,
    )


def test_cross_validated_y_bandwidth_is_one_of_the_candidates_and_kept():
    X, y = heteroscedastic(300, seed=12)
    model = KernelSmoother(bandwidth=0.05).fit(X, y)
    first = model.predict_cdf(queries(), [-1.0, 0.0, 1.0], y_bandwidth="cv")
    chosen = model._cross_validated_y_bandwidth()
    assert chosen.shape == (1,) and chosen[0] > 0
    np.testing.assert_allclose(
        first, model.predict_cdf(queries(), [-1.0, 0.0, 1.0], y_bandwidth=chosen[0])
    )


@pytest.mark.parametrize("y_bandwidth", [0.0, -1.0, np.nan, "silverman", True, [0.1, 0.2]])
def test_bad_y_bandwidth_is_refused(fitted, y_bandwidth):
    with pytest.raises(ValueError, match="y_bandwidth must be"):
        fitted[2]["smoother"].predict_cdf(queries(), [0.0], y_bandwidth=y_bandwidth)


# ------------------------------------------------------ quantiles of the smoothed CDF


@pytest.mark.parametrize("name", ["smoother", "attention"])
def test_smoothed_cdf_at_its_quantiles_is_the_level(fitted, name):
    model = fitted[2][name]
    levels = [0.05, 0.1, 0.5, 0.9, 0.95]
    q = model.predict_quantiles(queries(), levels, y_bandwidth=0.2)
    assert q.shape == (13, 5) and np.all(np.diff(q, axis=1) > 0)
    cdf = np.array(
        [
            model.predict_cdf([x], row, y_bandwidth=0.2)[0]
            for x, row in zip(queries(), q, strict=True)
        ]
    )
    np.testing.assert_allclose(cdf, np.broadcast_to(levels, cdf.shape), atol=1e-12)


def test_smoothed_quantiles_do_not_cross_for_unsorted_levels(fitted):
    model = fitted[2]["smoother"]
    levels = [0.9, 0.1, 0.5, 0.5000001, 0.3]
    q = model.predict_quantiles(queries(), levels, y_bandwidth=0.1)
    order = np.argsort(levels)
    assert np.all(np.diff(q[:, order], axis=1) >= 0)
    np.testing.assert_array_equal(
        q[:, order], model.predict_quantiles(queries(), np.sort(levels), y_bandwidth=0.1)
    )


def test_a_vanishing_y_bandwidth_gives_the_exact_quantiles(fitted):
    model = fitted[2]["smoother"]
    levels = [0.1, 0.25, 0.5, 0.75, 0.9]
    np.testing.assert_allclose(
        model.predict_quantiles(queries(), levels, y_bandwidth=1e-9),
        model.predict_quantiles(queries(), levels),
        atol=1e-6,
    )


def test_smoothed_quantiles_at_the_levels_zero_and_one_are_unbounded(fitted):
    q = fitted[2]["smoother"].predict_quantiles(queries(), [0.0, 0.5, 1.0], y_bandwidth=0.1)
    assert np.all(q[:, 0] == -np.inf) and np.all(q[:, 2] == np.inf)
    assert np.all(np.isfinite(q[:, 1]))


def test_smoothed_quantiles_with_the_cross_validated_y_bandwidth():
    X, y = heteroscedastic(300, seed=12)
    model = KernelSmoother(bandwidth=0.05).fit(X, y)
    first = model.predict_quantiles(queries(), [0.1, 0.9], y_bandwidth="cv")
    chosen = model._cross_validated_y_bandwidth()
    np.testing.assert_array_equal(
        first, model.predict_quantiles(queries(), [0.1, 0.9], y_bandwidth=chosen[0])
    )


def test_smoothed_quantiles_of_signed_weights_are_monotone_and_say_how_many(fitted):
    model = fitted[2]["linear"]
    levels = [0.1, 0.3, 0.5, 0.7, 0.9]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q = model.predict_quantiles(queries(), levels, y_bandwidth=0.2)
    assert np.all(np.isfinite(q)) and np.all(np.diff(q, axis=1) >= 0)
    signed = np.any(distribution_weights(model, queries()) < 0, axis=1)
    assert any("monotone rearrangement" in str(w.message) for w in caught) == bool(np.any(signed))


def test_multi_output_smoothed_quantiles_take_one_bandwidth_per_output():
    X, y = heteroscedastic(150)
    Y = np.column_stack([y, 3 * y])
    model = KernelSmoother(bandwidth=0.05).fit(X, Y)
    q = model.predict_quantiles(queries(), [0.2, 0.8], y_bandwidth=[0.1, 0.3])
    assert q.shape == (2, 13, 2)
    np.testing.assert_allclose(q[1], 3 * q[0], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("y_bandwidth", [0.0, -1.0, np.nan, "silverman", True, [0.1, 0.2]])
def test_bad_y_bandwidth_of_quantiles_is_refused(fitted, y_bandwidth):
    with pytest.raises(ValueError, match="y_bandwidth must be"):
        fitted[2]["smoother"].predict_quantiles(queries(), [0.5], y_bandwidth=y_bandwidth)


@pytest.mark.parametrize("levels", [[-0.1, 0.5], [0.5, 1.1], [np.nan], []])
def test_smoothed_quantiles_outside_the_unit_interval_are_refused(fitted, levels):
    with pytest.raises(ValueError, match="quantiles"):
        fitted[2]["smoother"].predict_quantiles(queries(), levels, y_bandwidth=0.1)
