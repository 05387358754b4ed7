"""Every estimator at the ends of the float range: finite, documented answers, never NaN.

Inputs, targets, queries, bandwidths and sample weights are pushed towards 1e±300. The
Nadaraya–Watson estimate is invariant to rescaling the inputs together with the bandwidth,
the targets scale with the values, and sample weights only count relative to each other:
each test checks one of these against the problem at ordinary scale.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.utils._param_validation import InvalidParameterError

from kernattn import (
    AttentionRegressor,
    KernelSmoother,
    LinearAttentionRegressor,
    LocalDesignWarning,
)

# Many tests here use random features at small bandwidths on purpose; the warning that
# prediction is then no longer linear-time has its own tests in test_linear.py.
pytestmark = pytest.mark.filterwarnings("ignore::kernattn.linear.NotLinearTimeWarning")

ESTIMATORS = ("smoother", "smoother_linear", "attention", "linear")
# Powers of ten from 1e-300 to 1e300 (hypothesis draws the exponent).
exponents = st.integers(min_value=-300, max_value=300)


def make(name, **params):
    if name == "smoother":
        return KernelSmoother(**params)
    if name == "smoother_linear":
        return KernelSmoother(degree=1, **params)
    if name == "attention":
        return AttentionRegressor(max_iter=0, random_state=0, **params)
    return LinearAttentionRegressor(n_components=64, random_state=0, **params)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(40, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1]
    queries = rng.uniform(-1.2, 1.2, size=(7, 2))
    return X, y, queries


def quiet_predict(model, queries, return_std=False):
    """Predict with every warning an error, except the fallback notices (the linear
    estimator's exact rows, the local-linear fit's held-back rows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", ".*queries had a linear-attention", UserWarning)
        warnings.filterwarnings("ignore", category=LocalDesignWarning)
        return model.predict(queries, return_std=return_std)


# ------------------------------------------------------------- 1. input scale


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("rule", ["scott", "silverman"])
@settings(max_examples=6, deadline=None)
@given(exponent=exponents)
def test_rescaled_inputs_give_the_predictions_of_the_unscaled_problem(
    problem, name, rule, exponent
):
    X, y, queries = problem
    if name in ("attention",) and rule != "scott":
        return
    c = 10.0**exponent
    params = {} if name == "attention" else {"bandwidth": rule}
    expected = make(name, **params).fit(X, y).predict(queries)
    model = make(name, **params).fit(X * c, y)
    mean = quiet_predict(model, queries * c)
    np.testing.assert_allclose(mean, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("rule", ["scott", "silverman"])
@pytest.mark.parametrize("c", [1e-300, 1e300])
def test_rule_of_thumb_bandwidth_scales_with_the_inputs(problem, rule, c):
    X, y, _ = problem
    h = KernelSmoother(bandwidth=rule).fit(X, y).bandwidth_
    np.testing.assert_allclose(KernelSmoother(bandwidth=rule).fit(X * c, y).bandwidth_, h * c)


@pytest.mark.parametrize("c", [1e-300, 1e300])
def test_attention_standardization_scales_with_the_inputs(problem, c):
    X, y, _ = problem
    scale = make("attention").fit(X, y).input_scale_
    np.testing.assert_allclose(make("attention").fit(X * c, y).input_scale_, scale * c)


# ------------------------------------------------------------ 2. target scale


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("c", [1e-200, 1e200, -1e200])
def test_rescaled_targets_give_rescaled_predictions_and_spreads(problem, name, c):
    X, y, queries = problem
    expected_mean, expected_std = make(name).fit(X, y).predict(queries, return_std=True)
    model = make(name).fit(X, y * c)
    mean, std = quiet_predict(model, queries, return_std=True)
    np.testing.assert_allclose(mean / c, expected_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(std / abs(c), expected_std, rtol=1e-6, atol=1e-12)


def test_linear_sums_of_huge_targets_keep_the_features(problem):
    X, y, queries = problem
    # The features themselves (on 40 rows the default computes every weight exactly).
    model = make("linear", bandwidth=1.0, n_near_keys=0).fit(X, y * 1e200)
    # Every row from the features: no overflowing sum marks a row unreliable.
    _, _, unreliable = model.kernel_.moments(queries, 0)
    assert not np.any(unreliable)


LOO_ESTIMATORS = ("smoother", "linear")


def loo_model(name):
    if name == "smoother":
        return KernelSmoother(bandwidth="loo")
    return LinearAttentionRegressor(bandwidth="loo", n_components=64, random_state=0)


@pytest.mark.parametrize("name", LOO_ESTIMATORS)
@pytest.mark.parametrize("c", [2.0**-600, 2.0**600])
def test_loo_bandwidth_of_targets_times_a_huge_power_of_two_is_the_same(problem, name, c):
    X, y, _ = problem
    expected = loo_model(name).fit(X, y)
    model = loo_model(name).fit(X, y * c)
    # Beyond 2^±100 the search sees the targets in units of a power of two: here (max|y − ȳ|
    # in [2, 4)) the very same function as for y itself.
    np.testing.assert_array_equal(model.bandwidth_, expected.bandwidth_)
    # The error in the targets' units: c² times, 0 or inf where that leaves the floats.
    with np.errstate(over="ignore", under="ignore"):
        np.testing.assert_array_equal(model.loo_error_, expected.loo_error_ * c * c)


@pytest.mark.parametrize("name", LOO_ESTIMATORS)
@pytest.mark.parametrize("c", [1e-200, 1e-100, 2.0**-3, 3.0, 2.0**5, 1e100, 1e200, -1e200])
def test_loo_bandwidth_of_rescaled_targets_is_the_same_within_the_search_tolerance(
    problem, name, c
):
    X, y, _ = problem
    expected = loo_model(name).fit(X, y)
    model = loo_model(name).fit(X, y * c)
    # c is not a power of two: its targets differ in their last bits, and the optimizer
    # stops within its tolerance of the same minimum.
    np.testing.assert_allclose(model.bandwidth_, expected.bandwidth_, rtol=1e-4)
    if 1e-150 < abs(c) < 1e150:
        np.testing.assert_allclose(model.loo_error_, expected.loo_error_ * c**2, rtol=1e-6)
    elif abs(c) > 1:
        assert model.loo_error_ == np.inf  # the true error, about 3e398, overflows
    else:
        assert 0.0 <= model.loo_error_ < 1e-300  # ... and here underflows


def test_loo_bandwidth_weighs_outputs_of_different_scales_as_they_are(problem):
    X, y, _ = problem
    # A second output 1e-250 times smaller adds nothing to the squared error: the
    # bandwidth is that of the first output alone (not of both on an equal footing).
    Y = np.c_[y, 1e-250 * np.cos(3 * X[:, 1])]
    expected = KernelSmoother(bandwidth="loo").fit(X, y)
    model = KernelSmoother(bandwidth="loo").fit(X, Y)
    # (Up to rounding: the products have one more column.)
    np.testing.assert_allclose(model.bandwidth_, expected.bandwidth_, rtol=1e-12)
    np.testing.assert_allclose(model.loo_error_, expected.loo_error_, rtol=1e-12)


@pytest.mark.parametrize("c", [1e200, 1e-200, -1e200])
def test_pruned_heads_of_rescaled_targets_predict_rescaled(problem, c):
    X, _, queries = problem
    Y = np.c_[np.sin(2 * X[:, 0]) + X[:, 1], 3.0 * X[:, 0]]
    # max_iter=0 from the identity start, the local constant: the kernel does not depend on
    # the targets, only the refitted mixture.
    params = {"n_heads": 3, "max_iter": 0, "init": "identity", "degree": 0, "random_state": 0}
    expected = AttentionRegressor(**params).fit(X, Y).prune_heads([0, 2])
    pruned = AttentionRegressor(**params).fit(X, Y * c).prune_heads([0, 2])
    np.testing.assert_allclose(
        pruned.kernel_.head_weights, expected.kernel_.head_weights, rtol=1e-9
    )
    np.testing.assert_allclose(
        quiet_predict(pruned, queries) / c, expected.predict(queries), rtol=1e-9
    )


def test_linear_spread_of_targets_far_from_the_mean_matches_the_exact_smoother():
    from kernattn.feature_maps import NystroemFeatures

    rng = np.random.default_rng(1)
    # Two clusters of inputs, their targets 1e8 apart: within a cluster the weights sit on
    # targets 5e7 from the global mean, and E[v²] − E[v]² has no correct digit left.
    X = np.r_[np.linspace(0.0, 6.0, 20), np.linspace(20.0, 26.0, 20)][:, None]
    y = np.r_[rng.normal(0.0, 1.0, 20), 1e8 + rng.normal(0.0, 1.0, 20)]
    queries = np.array([[3.05], [23.05], [0.4]])
    exact = KernelSmoother(bandwidth=0.3).fit(X, y)
    # Every key a landmark: the features give the exact kernel up to rounding.
    features = NystroemFeatures(landmarks="random")
    model = LinearAttentionRegressor(
        feature_map=features, n_components=40, bandwidth=0.3, random_state=0
    ).fit(X, y)
    mean, std = quiet_predict(model, queries, return_std=True)
    expected_mean, expected_std = exact.predict(queries, return_std=True)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(std, expected_std, rtol=1e-6)


def test_linear_spread_without_keys_is_clipped_at_zero():
    rng = np.random.default_rng(1)
    X = np.r_[np.linspace(0.0, 6.0, 20), np.linspace(20.0, 26.0, 20)][:, None]
    y = np.r_[rng.normal(0.0, 1.0, 20), 1e8 + rng.normal(0.0, 1.0, 20)]
    model = LinearAttentionRegressor(
        feature_map="nystroem", n_components=40, bandwidth=0.3, random_state=0
    ).partial_fit(X, y)
    # No keys to recompute the cancelled rows with: the variance is clipped at 0, so the
    # standard deviation is finite (the square root of a negative would be NaN).
    _, std = quiet_predict(model, np.array([[3.05], [23.05]]), return_std=True)
    assert np.all(np.isfinite(std))


# ---------------------------------------------- 3. queries near the largest float


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_queries_near_the_largest_float_get_finite_answers_in_the_target_range(
    problem, name, sign
):
    X, y, queries = problem
    model = make(name).fit(X, y)
    mean, std = quiet_predict(model, np.full((3, 2), sign * 1e308), return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    if name != "attention":  # its dot-product kernel extrapolates to a training target too
        assert np.all((mean >= y.min() - 1e-12) & (mean <= y.max() + 1e-12))


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tricube"])
def test_query_near_the_largest_float_gets_its_nearest_target(problem, kernel):
    X, y, _ = problem
    model = KernelSmoother(kernel=kernel, bandwidth=0.1).fit(X, y)
    query = np.array([[1e308, 0.0]])
    # Far along the first feature only the first coordinate counts: the largest x₀ wins.
    np.testing.assert_allclose(quiet_predict(model, query), y[X[:, 0].argmax()], rtol=1e-12)


# ------------------------------------------------- 4. tiny accepted bandwidths


@pytest.mark.parametrize("bandwidth", [1e-300, 1e-154, 1e-20])
@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tricube"])
@pytest.mark.parametrize("degree", [0, 1])
def test_tiny_bandwidth_gives_the_nearest_target(problem, bandwidth, kernel, degree):
    X, y, queries = problem
    model = KernelSmoother(kernel=kernel, bandwidth=bandwidth, degree=degree).fit(X, y)
    nearest = ((queries[:, None, :] - X[None]) ** 2).sum(axis=2).argmin(axis=1)
    np.testing.assert_allclose(quiet_predict(model, queries), y[nearest], rtol=1e-12)
    np.testing.assert_allclose(quiet_predict(model, X[:5]), y[:5], rtol=1e-12)
    _, std = quiet_predict(model, queries, return_std=True)
    np.testing.assert_allclose(std, 0.0, atol=1e-12)


@pytest.mark.parametrize("bandwidth", [1e-300, 1e-154])
def test_linear_attention_with_a_tiny_bandwidth_is_finite(problem, bandwidth):
    X, y, queries = problem
    model = make("linear", bandwidth=bandwidth).fit(X, y)
    # Random features cannot resolve such a kernel: the documented answer is a coarser
    # smoother, finite and inside the range of the targets.
    mean, std = quiet_predict(model, queries, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    assert np.all((mean >= y.min() - 1e-12) & (mean <= y.max() + 1e-12))


# --------------------------------------------- 5. weights whose sum overflows


@pytest.mark.parametrize("name", ESTIMATORS)
def test_huge_sample_weights_count_as_equal_weights(problem, name):
    X, y, queries = problem
    # A given bandwidth: the rules read the sample size from the sum of the weights. The
    # local constant: local lines read sample weights as precisions (a key of weight 2 is
    # the mean of two observations), so their held-back queries depend on the weights' unit.
    params = {"degree": 0} if name == "attention" else {"bandwidth": 0.5}
    expected = make(name, **params).fit(X, y).predict(queries, return_std=True)
    model = make(name, **params).fit(X, y, sample_weight=np.full(len(X), 1e308))
    # The learned kernel starts from a bandwidth search: equal to the search's tolerance.
    rtol = 1e-7 if name == "attention" else 1e-9
    for got, want in zip(quiet_predict(model, queries, return_std=True), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("rule", ["scott", "silverman"])
def test_bandwidth_rule_with_huge_weights_is_finite(problem, rule):
    X, y, _ = problem
    model = KernelSmoother(bandwidth=rule).fit(X, y, sample_weight=np.full(len(X), 1e308))
    assert np.all(np.isfinite(model.bandwidth_)) and np.all(model.bandwidth_ > 0)


# Three L-BFGS steps on purpose: the comparison needs the same short path, not convergence.
@pytest.mark.filterwarnings("ignore:AttentionRegressor's lbfgs optimizer stopped at max_iter")
def test_trained_attention_with_huge_weights_is_the_unpenalized_fit(problem):
    X, y, queries = problem
    # alpha is weighed against the sum of the weights: against 40 · 2^1020 it is nothing.
    # (The local constant, as above.)
    params = {"max_iter": 3, "degree": 0, "random_state": 0}
    expected = AttentionRegressor(alpha=0.0, **params).fit(X, y).predict(queries)
    model = AttentionRegressor(**params).fit(X, y, sample_weight=np.full(len(X), 2.0**1020))
    np.testing.assert_allclose(quiet_predict(model, queries), expected, rtol=1e-9)


# ------------------------------------------------ 6. ties of compact kernels


@pytest.mark.parametrize("kernel", ["epanechnikov", "tricube"])
def test_far_query_between_tied_points_does_not_depend_on_the_batch(kernel):
    X = np.array([[0.0], [1.0], [4.0], [7.0]])
    y = np.array([0.0, 1.0, 3.0, 5.0])
    model = KernelSmoother(kernel=kernel, bandwidth=0.1).fit(X, y)
    # 2.5 lies halfway between 1 and 4, outside every support: the mean of their targets.
    alone = model.predict([[2.5]])
    batch = model.predict(np.array([[2.5], [5.5], [-3.0], [0.5]]))
    assert alone[0] == batch[0] == 2.0
    assert batch[1] == 4.0


# ------------------------------------------------------ 7. cosine, float32


def test_cosine_heads_far_out_follow_the_direction(problem):
    X, y, queries = problem
    model = make("attention", similarity="cosine").fit(X, y)
    direction = queries[:1] / np.abs(queries[:1]).max()
    expected = model.predict(direction * 1e15)
    np.testing.assert_allclose(quiet_predict(model, direction * 1e300), expected, rtol=1e-9)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_float64_query_beyond_a_float32_fit_is_finite(problem, name):
    X, y, _ = problem
    model = make(name).fit(X.astype(np.float32), y)
    mean = quiet_predict(model, np.array([[1e300, -1e300], [1e50, 0.0]]))
    assert mean.dtype == np.float32 and np.all(np.isfinite(mean))


@pytest.mark.parametrize("name", ["smoother", "smoother_linear"])
def test_a_feature_with_a_subnormal_spread_is_the_same_data_in_other_units(name):
    # Inputs 0 and 2.2e-308: a spread below the smallest normal float. The smoother works in
    # units of a power of two near the inputs: these are the inputs 0 and 1 in units of
    # 2^-1022, and the fit is theirs (bandwidth and queries in the same units).
    X = np.array([[2.2e-308], [0.0], [2.2e-308], [0.0]])
    y = np.array([0.0, 1.0, 0.5, 2.0])
    queries = np.array([[1.0], [-3.0], [0.0]])
    unit = 2.0**-1022
    model = make(name, bandwidth="scott").fit(X, y)
    same = make(name, bandwidth="scott").fit(X / unit, y)
    np.testing.assert_allclose(model.bandwidth_, same.bandwidth_ * unit, rtol=1e-12)
    np.testing.assert_allclose(
        quiet_predict(model, queries), quiet_predict(same, queries / unit), rtol=1e-12
    )


@pytest.mark.parametrize("name", ["attention", "linear"])
def test_a_feature_with_a_subnormal_spread_is_constant(name):
    # Inputs 0 and 2.2e-308: a spread below the smallest normal float. Dividing the query 1
    # by it leaves the float range; the feature carries no usable difference.
    X = np.array([[2.2e-308], [0.0], [2.2e-308], [0.0]])
    y = np.array([0.0, 1.0, 0.5, 2.0])
    queries = np.array([[1.0], [-3.0], [0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a learned kernel without spread
        model = make(name, bandwidth="scott") if name != "attention" else make(name)
        model.fit(X, y)
    np.testing.assert_allclose(quiet_predict(model, queries), np.full(3, y.mean()), rtol=1e-12)
    np.testing.assert_allclose(model.attention_weights(queries), 0.25, rtol=1e-12)


# --------------------------------------------------------------- 8. parameters


INVALID = [
    ("attention", {"alpha": np.inf}, "alpha"),
    ("attention", {"learning_rate": np.inf}, "learning_rate"),
    ("attention", {"tie_qk": "yes"}, "tie_qk"),
    ("attention", {"standardize": None}, "standardize"),
    ("attention", {"early_stopping": "false"}, "early_stopping"),
    ("attention", {"init": np.full((2, 2), 1e200)}, "init"),
    ("linear", {"orthogonal": "no"}, "orthogonal"),
    ("linear", {"learn_projection": None}, "learn_projection"),
    ("linear", {"bandwidth": np.inf}, "bandwidth"),
    ("smoother", {"bandwidth": np.inf}, "bandwidth"),
    ("smoother", {"bandwidth": [1.0, np.inf]}, "bandwidth"),
]


@pytest.mark.parametrize(("name", "params", "parameter"), INVALID)
def test_invalid_parameter_is_refused_by_name_and_leaves_the_fit(problem, name, params, parameter):
    X, y, queries = problem
    model = make(name).fit(X, y)
    before = model.predict(queries)
    state = dict(model.__dict__)
    model.set_params(**params)
    with pytest.raises((ValueError, TypeError), match=parameter):
        model.fit(X[:10], y[:10] + 1.0)
    assert model.n_features_in_ == 2
    for key, value in state.items():
        if key not in params:
            assert model.__dict__[key] is value
    np.testing.assert_array_equal(model.predict(queries), before)


def test_huge_init_names_the_parameter():
    with pytest.raises(InvalidParameterError, match="init must hold projections"):
        AttentionRegressor(init=np.full((2, 2), 1e200)).fit(np.eye(2), [0.0, 1.0])
