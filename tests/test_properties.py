"""Properties every Nadaraya–Watson estimator has, checked on generated data."""

import warnings

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor

# What the estimators tell a user about a short training run or the queries the random
# features could not serve; the properties hold either way.
pytestmark = [
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
    pytest.mark.filterwarnings("ignore:the softmax of head:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*they were computed exactly:UserWarning"),
]

finite = st.floats(-100, 100, allow_nan=False, allow_infinity=False)


@st.composite
def problems(draw):
    n = draw(st.integers(2, 25))
    d = draw(st.integers(1, 3))
    X = draw(arrays(np.float64, (n, d), elements=finite))
    y = draw(arrays(np.float64, (n,), elements=finite))
    queries = draw(arrays(np.float64, (draw(st.integers(1, 8)), d), elements=finite))
    kernel = draw(st.sampled_from(["gaussian", "epanechnikov", "tricube"]))
    bandwidth = draw(st.floats(1e-3, 1e3))
    return X, y, queries, kernel, bandwidth


SETTINGS = settings(max_examples=60, deadline=None)


def logit_tolerance(X, bandwidth):
    """Rounding error of the logits: the expansion ‖q‖² + ‖k‖² − 2qᵀk of the squared
    distance loses about 1e-16 · (spread / bandwidth)² of absolute accuracy."""
    spread = np.abs(X - X.mean(axis=0)).max() / bandwidth
    return 1e-9 + 1e-15 * spread**2


def assert_std_is_the_spread_around_the_estimate(model, queries, y):
    """``return_std`` against its formula: the spread of the targets around the estimate
    under the heads' weights mixed in the shares ``|a_h| / Σ_g |a_g|``,
    ``std² = Σ_h π_h Σ_i w^h_i (y_i − ŷ)²`` (one head: the weighted variance)."""
    mean, std = model.predict(queries, return_std=True)
    a = np.abs(getattr(model, "head_weights_", np.ones(1)))
    shares = a / a.sum() if a.sum() > 0 else np.full(len(a), 1 / len(a))
    squared = (y[None, :] - mean[:, None]) ** 2
    direct = sum(
        p * np.einsum("qi,qi->q", model.attention_weights(queries, head=h), squared)
        for h, p in enumerate(shares)
    )
    np.testing.assert_allclose(std**2, direct, rtol=1e-6, atol=1e-9 * (1 + np.ptp(y)) ** 2)


@SETTINGS
@given(problems())
def test_weights_are_a_distribution_and_predictions_stay_in_the_target_range(problem):
    X, y, queries, kernel, bandwidth = problem
    model = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y)
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    mean = model.predict(queries)
    span = 1e-9 * (1 + np.abs(y).max())
    assert np.all(mean >= y.min() - span) and np.all(mean <= y.max() + span)
    assert_std_is_the_spread_around_the_estimate(model, queries, y)


@SETTINGS
@given(problems(), finite)
def test_translating_all_inputs_changes_nothing(problem, shift):
    X, y, queries, kernel, bandwidth = problem
    expected = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y).predict(queries)
    moved = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X + shift, y)
    tolerance = max(logit_tolerance(X, bandwidth), 1e-7) * (1 + np.abs(y).max())
    np.testing.assert_allclose(moved.predict(queries + shift), expected, rtol=1e-7, atol=tolerance)


@SETTINGS
@given(problems(), arrays(np.float64, (25,), elements=st.floats(0.1, 10)))
def test_huge_bandwidth_gives_the_weighted_mean(problem, sample_weight):
    X, y, queries, _, _ = problem
    sample_weight = sample_weight[: len(X)]
    model = KernelSmoother(bandwidth=1e9).fit(X, y, sample_weight=sample_weight)
    expected = np.average(y, weights=sample_weight)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------------
# Every estimator: the same properties through the public API.

ESTIMATORS = ["smoother", "attention", "linear"]
EVERY_SETTINGS = settings(max_examples=30, deadline=None)
# (max_iter, n_heads, similarity) of an AttentionRegressor; 0 iterations is the initial kernel.
similarities = st.sampled_from(["dot", "cosine", "gaussian"])
attention_options = st.tuples(st.sampled_from([0, 3]), st.sampled_from([1, 2]), similarities)


def make_estimator(name, problem, options):
    _, _, _, kernel, bandwidth = problem
    if name == "smoother":
        return KernelSmoother(kernel=kernel, bandwidth=bandwidth)
    if name == "attention":
        # The Nadaraya-Watson properties are those of the local constant (the default may
        # choose local lines); with max_iter=0 the start must not look at the targets.
        max_iter, n_heads, similarity = options
        return AttentionRegressor(
            n_heads=n_heads,
            similarity=similarity,
            max_iter=max_iter,
            degree=0,
            init="loo" if max_iter else "identity",
            random_state=0,
        )
    return LinearAttentionRegressor(feature_map="positive", n_components=64, random_state=0)


def one_feature_problem(X, y):
    """A problem as ``problems()`` draws it: one feature, the query at 0."""
    return np.array(X)[:, None], np.array(y), np.zeros((1, 1)), "gaussian", 1.0


def distinct_inputs(problem, at_least=2):
    """At least two different training inputs: a kernel learned by leave-one-out needs a
    point to predict from others."""
    X = problem[0]
    return len(np.unique(X, axis=0)) >= at_least


@EVERY_SETTINGS
@given(problems(), attention_options)
def test_every_heads_weights_are_a_distribution_that_reproduces_the_prediction(problem, options):
    assume(distinct_inputs(problem))
    X, y, queries, _, _ = problem
    model = make_estimator("attention", problem, options).fit(X, y)
    span = 1e-9 * (1 + np.abs(y).max())
    for h in range(len(model.head_weights_)):
        weights = model.attention_weights(queries, head=h)
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
        head_estimate = weights @ model.y_fit_
        assert np.all(head_estimate >= y.min() - span) and np.all(head_estimate <= y.max() + span)
    mixed = model.attention_weights(queries)
    np.testing.assert_allclose(
        model.predict(queries), mixed @ model.y_fit_ + model.head_bias_, rtol=1e-9, atol=span
    )
    assert_std_is_the_spread_around_the_estimate(model, queries, y)


@EVERY_SETTINGS
@given(problems())
def test_positive_random_features_give_a_distribution_inside_the_target_range(problem):
    X, y, queries, _, _ = problem
    model = make_estimator("linear", problem, None).fit(X, y)
    mean, std = model.predict(queries, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    span = 1e-9 * (1 + np.abs(y).max())
    assert np.all(mean >= y.min() - span) and np.all(mean <= y.max() + span)
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-9)
    np.testing.assert_allclose(weights @ y, mean, rtol=1e-9, atol=span)


@pytest.mark.parametrize("name", ESTIMATORS)
@EVERY_SETTINGS
@given(problem=problems(), options=attention_options, random=st.randoms(use_true_random=False))
def test_every_estimator_ignores_the_order_of_the_training_rows(name, problem, options, random):
    assume(name != "attention" or distinct_inputs(problem))
    X, y, queries, _, _ = problem
    order = list(range(len(X)))
    random.shuffle(order)
    expected = make_estimator(name, problem, options).fit(X, y).predict(queries)
    permuted = make_estimator(name, problem, options).fit(X[order], y[order])
    if name == "linear":
        # Rows in the order given (as chunks arrive): feature sums taken in another order.
        atol = 1e-7 * (1 + np.abs(y).max())
        np.testing.assert_allclose(permuted.predict(queries), expected, rtol=1e-7, atol=atol)
    else:
        # The fit works through its rows in an order set by their contents: the same sums,
        # the same training path, the same predictions to the last bit.
        np.testing.assert_array_equal(permuted.predict(queries), expected)


@pytest.mark.parametrize("similarity", ["dot", "gaussian"])
def test_initial_attention_kernel_ignores_the_order_of_rows_with_two_distinct_inputs(similarity):
    X = np.array([[0.0, 1.0]] + [[1.0, 1.0]] * 11)
    y = np.r_[0.0, np.ones(11)]
    queries = np.array([[0.0, 0.0], [0.5, 1.0]])
    model = AttentionRegressor(similarity=similarity, max_iter=0, random_state=0)
    expected = model.fit(X, y).predict(queries)
    for seed in range(4):
        order = np.random.default_rng(seed).permutation(len(X))
        np.testing.assert_allclose(model.fit(X[order], y[order]).predict(queries), expected)


@pytest.mark.parametrize(
    "options",
    [
        dict(n_heads=1, similarity="gaussian", max_iter=3),
        dict(n_heads=2, similarity="dot", max_iter=0, tilt=False, warp=0, degree=0),
        dict(n_heads=1, similarity="gaussian", tilt=True),
    ],
)
def test_learned_kernel_on_near_duplicate_inputs_is_the_same_for_any_order_of_rows(options):
    # Inputs 5e-77 apart: two distinct inputs to the leave-one-out loss, the same point to
    # its rounding. Every order of rows must end training at the same kernel.
    X = np.array([[5.0496351e-77], [-34.0], [-20.0], [0.0], [0.0], [0.0], [0.0], [3.0]])
    y = np.array([0.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.2, 0.7])
    queries = np.array([[-14.0], [0.0], [2.0]])
    expected = AttentionRegressor(**options, random_state=0).fit(X, y).predict(queries)
    for seed in range(6):
        order = np.random.default_rng(seed).permutation(len(X))
        model = AttentionRegressor(**options, random_state=0).fit(X[order], y[order])
        np.testing.assert_array_equal(model.predict(queries), expected)
        # attention_weights keeps one column per training row, in the order given.
        weights = model.attention_weights(queries)
        np.testing.assert_allclose(weights @ y[order], expected, rtol=1e-12)


# The initial kernel does not look at the targets; a trained one does, below.
untrained_attention_options = st.tuples(st.just(0), st.sampled_from([1, 2]), similarities)


@pytest.mark.parametrize("name", ESTIMATORS)
@EVERY_SETTINGS
@given(
    problem=problems(),
    options=untrained_attention_options,
    a=st.floats(-10, 10).filter(lambda a: abs(a) > 1e-3),
    b=finite,
)
def test_every_estimator_maps_an_affine_map_of_the_targets(name, problem, options, a, b):
    X, y, queries, _, _ = problem
    expected = make_estimator(name, problem, options).fit(X, y).predict(queries)
    mapped = make_estimator(name, problem, options).fit(X, a * y + b)
    # The same weights for both fits: only the arithmetic on the targets differs.
    scale = 1 + np.abs(a * y + b).max()
    np.testing.assert_allclose(mapped.predict(queries), a * expected + b, atol=1e-9 * scale)


@settings(max_examples=20, deadline=None)
@given(problem=problems(), a=st.sampled_from([1e-2, 2.0, 1e3]), b=finite)
@example(
    problem=one_feature_problem(X=[0.0, 1.0, 1.0], y=[0.0, 1.0, 1.0]),
    a=2.0,
    b=0.0,
)
def test_training_attention_does_not_depend_on_the_units_of_the_targets(problem, a, b):
    assume(distinct_inputs(problem))
    X, y, queries, _, _ = problem
    # The shrinkage and the degree are chosen from the targets too. The identity start: the
    # leave-one-out start's search can end at either of two near-equal optima on inputs
    # with two distinct values, as rounding in the targets' units tips it.
    model = AttentionRegressor(similarity="dot", max_iter=3, init="identity", random_state=0)
    expected = clone(model).fit(X, y).predict(queries)
    mapped = clone(model).fit(X, a * y + b)
    scale = 1 + np.abs(a * y + b).max()
    np.testing.assert_allclose(mapped.predict(queries), a * expected + b, atol=1e-6 * scale)


# Far, yet a query scaled by a small bandwidth or spread stays a float64; astronomic below.
far_distances = st.floats(1e6, 1e100) | st.floats(-1e100, -1e6)
astronomic_distances = st.floats(1e100, 1e300) | st.floats(-1e300, -1e100)


@pytest.mark.parametrize("name", ESTIMATORS)
@EVERY_SETTINGS
@given(problem=problems(), options=attention_options, distance=far_distances)
def test_every_estimator_keeps_far_queries_finite_and_quiet(name, problem, options, distance):
    assume(name != "attention" or distinct_inputs(problem))
    X, y, queries, _, _ = problem
    model = make_estimator(name, problem, options).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        mean, std = model.predict(queries + distance, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    if name != "attention":  # a convex combination of the targets
        span = 1e-9 * (1 + np.abs(y).max())
        assert np.all(mean >= y.min() - span) and np.all(mean <= y.max() + span)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "name",
    ["smoother", "attention", "linear"],
)
@EVERY_SETTINGS
@given(problem=problems(), options=attention_options, distance=astronomic_distances)
# Inputs 4e-132 apart: a standardized or bandwidth-scaled query 1e300 away overflows.
@example(
    problem=one_feature_problem(X=[0.0, 4.4e-132], y=[0.0, 1.0]),
    options=(0, 1, "dot"),
    distance=1e300,
)
def test_every_estimator_keeps_astronomically_far_queries_finite(name, problem, options, distance):
    assume(name != "attention" or distinct_inputs(problem))
    X, y, queries, _, _ = problem
    model = make_estimator(name, problem, options).fit(X, y)
    mean, std = model.predict(queries + distance, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    if name != "attention":  # its nearest training target
        span = 1e-9 * (1 + np.abs(y).max())
        assert np.all(mean >= y.min() - span) and np.all(mean <= y.max() + span)
