"""The distribution scorers against their formulas on the fitted methods, in
cross_val_score and GridSearchCV, and through a Pipeline."""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score, cross_validate
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor
from kernattn.metrics import (
    coverage_scorer,
    interval_width_scorer,
    pinball_scorer,
    pipeline_method,
)


def heteroscedastic(n, seed=0, n_features=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, n_features))
    y = np.sin(2 * np.pi * X[:, 0]) + (0.05 + 0.5 * X[:, 0]) * rng.normal(size=n)
    return X, y


def pinball(y, q, tau):
    """ρ_τ(y − q) = max(τ u, (τ − 1) u), one row at a time."""
    u = y - q
    return np.maximum(tau * u, (tau - 1) * u)


def models():
    return {
        "smoother": KernelSmoother(bandwidth=0.05),
        "attention": AttentionRegressor(
            n_heads=1, degree=0, tilt=False, warp=0, max_iter=10, random_state=0
        ),
        "linear": LinearAttentionRegressor(n_near_keys=0, n_components=32, random_state=0),
    }


@pytest.fixture(scope="module")
def split():
    X, y = heteroscedastic(240)
    return X[:160], y[:160], X[160:], y[160:]


@pytest.mark.parametrize("name", ["smoother", "attention", "linear"])
@pytest.mark.parametrize("tau", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_pinball_score_is_minus_the_mean_pinball_loss(split, name, tau):
    X, y, X_test, y_test = split
    model = models()[name].fit(X, y)
    with warnings.catch_warnings():
        # Signed feature maps rearrange some CDFs, and say so.
        warnings.simplefilter("ignore", UserWarning)
        q = model.predict_quantiles(X_test, [tau])[:, 0]
        score = pinball_scorer(tau)(model, X_test, y_test)
    assert score == pytest.approx(-np.mean(pinball(y_test, q, tau)), rel=1e-12, abs=1e-15)


def test_pinball_score_weighs_rows_and_averages_outputs(split):
    X, y, X_test, y_test = split
    Y = np.column_stack([y, -2 * y])
    Y_test = np.column_stack([y_test, -2 * y_test])
    model = KernelSmoother(bandwidth=0.05).fit(X, Y)
    q = model.predict_quantiles(X_test, [0.8])[..., 0]  # (n_outputs, n_queries)
    weights = np.random.default_rng(1).uniform(0.5, 2, size=len(X_test))
    by_output = [
        np.sum(weights * pinball(Y_test[:, o], q[o], 0.8)) / np.sum(weights) for o in range(2)
    ]
    score = pinball_scorer(0.8)(model, X_test, Y_test, sample_weight=weights)
    assert score == pytest.approx(-np.mean(by_output), rel=1e-12)


@pytest.mark.parametrize("name", ["smoother", "attention", "linear"])
@pytest.mark.parametrize("method", ["jackknife+", "local"])
def test_coverage_and_width_are_the_fractions_by_hand(split, name, method):
    X, y, X_test, y_test = split
    model = models()[name].fit(X, y)
    lower, upper = model.conformal_interval(X_test, alpha=0.2, method=method)
    inside = (lower <= y_test) & (y_test <= upper)
    assert coverage_scorer(0.2, method)(model, X_test, y_test) == pytest.approx(np.mean(inside))
    assert interval_width_scorer(0.2, method)(model, X_test, y_test) == pytest.approx(
        -np.mean(upper - lower)
    )


def test_coverage_and_width_weigh_rows_and_average_outputs(split):
    X, y, X_test, y_test = split
    Y = np.column_stack([y, 3 * y])
    Y_test = np.column_stack([y_test, 3 * y_test])
    model = KernelSmoother(bandwidth=0.05).fit(X, Y)
    lower, upper = model.conformal_interval(X_test, alpha=0.1)  # (n_queries, n_outputs)
    weights = np.random.default_rng(2).uniform(0.5, 2, size=len(X_test))
    inside = (lower <= Y_test) & (Y_test <= upper)
    coverage = np.mean([np.sum(weights * inside[:, o]) / weights.sum() for o in range(2)])
    width = np.mean([np.sum(weights * (upper - lower)[:, o]) / weights.sum() for o in range(2)])
    assert coverage_scorer()(model, X_test, Y_test, sample_weight=weights) == pytest.approx(
        coverage
    )
    assert interval_width_scorer()(model, X_test, Y_test, sample_weight=weights) == (
        pytest.approx(-width)
    )


def test_unbounded_intervals_give_minus_infinite_width():
    X, y = heteroscedastic(20)
    model = KernelSmoother(bandwidth=0.1).fit(X, y)
    # ⌈(1 − 0.01)(20 + 1)⌉ = 21 > 20 residuals: jackknife+ has no upper bound at this level.
    assert interval_width_scorer(0.01)(model, X, y) == -np.inf
    assert coverage_scorer(0.01)(model, X, y) == 1.0


def test_pipeline_method_transforms_the_queries_then_calls_the_final_step():
    X, y = heteroscedastic(200, n_features=2)
    X = X * [10.0, 0.1]
    pipe = make_pipeline(StandardScaler(), KernelSmoother(bandwidth=0.3)).fit(X, y)
    scaler, smoother = pipe[0], pipe[-1]
    Z = scaler.transform(X[:20])
    np.testing.assert_array_equal(
        pipeline_method(pipe, "predict_quantiles")(X[:20], [0.1, 0.9]),
        smoother.predict_quantiles(Z, [0.1, 0.9]),
    )
    np.testing.assert_array_equal(
        pipeline_method(pipe, "predict_cdf")(X[:20], thresholds=[-1.0, 0.0, 1.0]),
        smoother.predict_cdf(Z, [-1.0, 0.0, 1.0]),
    )
    for got, expected in zip(
        pipeline_method(pipe, "conformal_interval")(X[:20], alpha=0.2, method="local"),
        smoother.conformal_interval(Z, alpha=0.2, method="local"),
        strict=True,
    ):
        np.testing.assert_array_equal(got, expected)
    # A plain estimator gives its own method.
    assert pipeline_method(smoother, "predict_cdf") == smoother.predict_cdf


def test_pipeline_method_enters_nested_pipelines_and_skips_passthrough():
    X, y = heteroscedastic(200)
    double = FunctionTransformer(lambda Z: 2 * Z)
    inner = Pipeline([("skip", "passthrough"), ("smoother", KernelSmoother(bandwidth=0.1))])
    pipe = Pipeline([("double", double), ("none", None), ("inner", inner)]).fit(X, y)
    np.testing.assert_array_equal(
        pipeline_method(pipe, "predict_quantiles")(X[:10], 0.5),
        pipe[-1][-1].predict_quantiles(2 * X[:10], 0.5),
    )


def test_scorers_on_a_pipeline_match_the_final_step_on_transformed_queries(split):
    X, y, X_test, y_test = split
    pipe = make_pipeline(StandardScaler(), KernelSmoother(bandwidth=0.2)).fit(X, y)
    Z = pipe[0].transform(X_test)
    for scorer in (pinball_scorer(0.3), coverage_scorer(0.2, "local"), interval_width_scorer()):
        assert scorer(pipe, X_test, y_test) == scorer(pipe[-1], Z, y_test)


def test_cross_val_score_with_a_pipeline_is_the_loop_over_folds():
    X, y = heteroscedastic(150)
    pipe = make_pipeline(StandardScaler(), KernelSmoother(bandwidth=0.15))
    folds = KFold(4, shuffle=True, random_state=0)
    scorer = pinball_scorer(0.9)
    scores = cross_val_score(pipe, X, y, scoring=scorer, cv=folds)
    by_hand = []
    for train, test in folds.split(X):
        scaler = StandardScaler().fit(X[train])
        smoother = KernelSmoother(bandwidth=0.15).fit(scaler.transform(X[train]), y[train])
        q = smoother.predict_quantiles(scaler.transform(X[test]), [0.9])[:, 0]
        by_hand.append(-np.mean(pinball(y[test], q, 0.9)))
    np.testing.assert_allclose(scores, by_hand, rtol=1e-12)
    assert np.all(scores < 0)


def test_cross_validate_reports_coverage_and_width_together():
    X, y = heteroscedastic(300)
    pipe = make_pipeline(StandardScaler(), KernelSmoother(bandwidth=0.15))
    result = cross_validate(
        pipe,
        X,
        y,
        cv=KFold(5, shuffle=True, random_state=0),
        scoring={"coverage": coverage_scorer(0.1), "width": interval_width_scorer(0.1)},
    )
    assert 0.8 < result["test_coverage"].mean() < 1.0
    assert np.all(result["test_width"] < 0)


def test_grid_search_picks_the_bandwidth_with_the_least_pinball_loss():
    X, y = heteroscedastic(200)
    pipe = make_pipeline(StandardScaler(), KernelSmoother())
    grid = {"kernelsmoother__bandwidth": [0.02, 0.1, 2.0]}
    folds = KFold(3, shuffle=True, random_state=0)
    search = GridSearchCV(pipe, grid, scoring=pinball_scorer(0.5), cv=folds).fit(X, y)
    means = [
        cross_val_score(
            pipe.set_params(kernelsmoother__bandwidth=h),
            X,
            y,
            scoring=pinball_scorer(0.5),
            cv=folds,
        ).mean()
        for h in grid["kernelsmoother__bandwidth"]
    ]
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], means, rtol=1e-12)
    assert search.best_params_["kernelsmoother__bandwidth"] == 0.1
    # The refitted pipeline scores through the search object's best estimator.
    assert pinball_scorer(0.5)(search.best_estimator_, X, y) < 0


def test_grid_search_refits_on_width_and_reports_coverage():
    X, y = heteroscedastic(200)
    search = GridSearchCV(
        KernelSmoother(),
        {"bandwidth": [0.03, 1.0]},
        scoring={"coverage": coverage_scorer(0.2), "width": interval_width_scorer(0.2)},
        refit="width",
        cv=KFold(3, shuffle=True, random_state=0),
    ).fit(X, y)
    # Oversmoothing a sine leaves wide residuals: the narrow bandwidth's intervals win.
    assert search.best_params_ == {"bandwidth": 0.03}
    assert np.all(search.cv_results_["mean_test_coverage"] > 0.65)


@pytest.mark.parametrize("quantile", [-0.1, 1.5, np.nan])
def test_pinball_scorer_rejects_a_level_outside_0_1(quantile):
    with pytest.raises(ValueError, match=r"quantiles must lie in \[0, 1\]"):
        pinball_scorer(quantile)


def test_pinball_scorer_takes_one_level():
    with pytest.raises(ValueError, match="one quantile level"):
        pinball_scorer([0.1, 0.9])


@pytest.mark.parametrize("make", [coverage_scorer, interval_width_scorer])
@pytest.mark.parametrize("alpha", [0, 1, 1.5, -0.1, True, "0.1"])
def test_interval_scorers_reject_alpha_outside_0_1(make, alpha):
    with pytest.raises(ValueError, match=r"alpha must be a float strictly between 0 and 1"):
        make(alpha)


@pytest.mark.parametrize("make", [coverage_scorer, interval_width_scorer])
def test_interval_scorers_reject_an_unknown_method(make):
    with pytest.raises(ValueError, match="method must be 'jackknife\\+' or 'local'; got 'naive'"):
        make(0.1, method="naive")


def test_a_pipeline_without_the_method_says_what_it_needs():
    X, y = heteroscedastic(50)
    pipe = make_pipeline(StandardScaler(), LinearRegression()).fit(X, y)
    with pytest.raises(AttributeError, match="LinearRegression has no method 'predict_quantiles'"):
        pinball_scorer(0.5)(pipe, X, y)


def test_scorers_show_their_arguments():
    assert repr(pinball_scorer(0.9)) == "pinball_scorer(quantile=0.9)"
    assert repr(coverage_scorer(0.05, "local")) == "coverage_scorer(alpha=0.05, method='local')"
