"""Properties every Nadaraya–Watson smoother has, checked on generated data."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from kernattn import KernelSmoother

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


@SETTINGS
@given(problems())
def test_weights_are_a_distribution_and_predictions_stay_in_the_target_range(problem):
    X, y, queries, kernel, bandwidth = problem
    model = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y)
    weights = model.attention_weights(queries)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    mean, std = model.predict(queries, return_std=True)
    span = 1e-9 * (1 + np.abs(y).max())
    assert np.all(mean >= y.min() - span) and np.all(mean <= y.max() + span)
    assert np.all(np.isfinite(std)) and np.all(std >= 0)


@SETTINGS
@given(problems(), st.randoms(use_true_random=False))
def test_permuting_the_training_rows_changes_nothing(problem, random):
    X, y, queries, kernel, bandwidth = problem
    order = list(range(len(X)))
    random.shuffle(order)
    expected = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y).predict(queries)
    permuted = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X[order], y[order])
    tolerance = logit_tolerance(X, bandwidth) * (1 + np.abs(y).max())
    np.testing.assert_allclose(permuted.predict(queries), expected, rtol=1e-9, atol=tolerance)


@SETTINGS
@given(problems(), finite)
def test_translating_all_inputs_changes_nothing(problem, shift):
    X, y, queries, kernel, bandwidth = problem
    expected = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y).predict(queries)
    moved = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X + shift, y)
    tolerance = max(logit_tolerance(X, bandwidth), 1e-7) * (1 + np.abs(y).max())
    np.testing.assert_allclose(moved.predict(queries + shift), expected, rtol=1e-7, atol=tolerance)


@SETTINGS
@given(problems(), st.floats(-10, 10).filter(lambda a: abs(a) > 1e-3), finite)
def test_affine_map_of_the_targets_maps_the_predictions(problem, a, b):
    X, y, queries, kernel, bandwidth = problem
    expected = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y).predict(queries)
    mapped = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, a * y + b)
    scale = 1 + np.abs(a * y + b).max()
    np.testing.assert_allclose(mapped.predict(queries), a * expected + b, atol=1e-9 * scale)


@SETTINGS
@given(problems(), arrays(np.float64, (25,), elements=st.floats(0.1, 10)))
def test_huge_bandwidth_gives_the_weighted_mean(problem, sample_weight):
    X, y, queries, _, _ = problem
    sample_weight = sample_weight[: len(X)]
    model = KernelSmoother(bandwidth=1e9).fit(X, y, sample_weight=sample_weight)
    expected = np.average(y, weights=sample_weight)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(problems(), st.floats(1e6, 1e300) | st.floats(-1e300, -1e6))
def test_far_queries_are_finite_and_get_a_training_target(problem, distance):
    X, y, queries, kernel, bandwidth = problem
    model = KernelSmoother(kernel=kernel, bandwidth=bandwidth).fit(X, y)
    far = queries + distance
    prediction = model.predict(far)
    assert np.all(np.isfinite(prediction))
    assert np.all(prediction >= y.min() - 1e-9 * (1 + abs(y.min())))
    assert np.all(prediction <= y.max() + 1e-9 * (1 + abs(y.max())))
