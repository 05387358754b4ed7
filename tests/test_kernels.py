"""Log-kernels and distances against their direct formulas."""

import numpy as np
import pytest

from kernattn.kernels import kernel_logits, log_kernel, log_kernel_derivative, squared_distances


def test_squared_distances_match_direct_differences():
    rng = np.random.default_rng(0)
    Q, K = rng.normal(size=(5, 3)), rng.normal(size=(8, 3))
    expected = ((Q[:, None, :] - K[None, :, :]) ** 2).sum(axis=-1)
    np.testing.assert_allclose(squared_distances(Q, K), expected, rtol=1e-12, atol=1e-14)


def test_squared_distances_of_points_far_from_the_origin_are_clipped_at_zero():
    # Near 1e6 the expansion ‖q‖² − 2qᵀk + ‖k‖² cancels to a few ulps of 3e12, some of them
    # below 0 for these points (-0.001 before the clip).
    K = 1e6 + np.random.default_rng(0).normal(size=(20, 3))
    distances = squared_distances(K, K)
    assert distances.min() == 0.0
    np.testing.assert_allclose(np.diag(distances), 0.0, atol=1e-2)


@pytest.mark.parametrize(
    "kernel, profile",
    [
        ("gaussian", lambda r: np.exp(-0.5 * r**2)),
        ("epanechnikov", lambda r: np.clip(1 - r**2, 0, None)),
        ("tricube", lambda r: np.clip(1 - r**3, 0, None) ** 3),
    ],
)
def test_kernel_logits_match_the_profile_inside_the_support(kernel, profile):
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(6, 2)), rng.normal(size=(7, 2))
    h = np.array([2.0, 3.0])
    r = np.sqrt((((X[:, None, :] - Y[None, :, :]) / h) ** 2).sum(axis=-1))
    logits = kernel_logits(X, Y, h, kernel)
    inside = profile(r) > 0
    np.testing.assert_allclose(np.exp(logits[inside]), profile(r)[inside], rtol=1e-12)


@pytest.mark.parametrize("kernel", ["epanechnikov", "tricube"])
def test_outside_the_support_logits_are_far_below_any_inside_logit(kernel):
    r2 = np.array([0.999999, 1.0, 4.0])
    logits = log_kernel(r2, kernel)
    assert logits[0] > -50
    assert np.all(logits[1:] <= -1e6)
    # Nearest first: a query with no key in the support attends to its nearest key.
    assert logits[1] > logits[2]


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tricube"])
def test_log_kernel_derivative_matches_finite_differences(kernel):
    r2 = np.array([0.05, 0.3, 0.7, 2.5])
    step = 1e-7
    numeric = (log_kernel(r2 + step, kernel) - log_kernel(r2 - step, kernel)) / (2 * step)
    np.testing.assert_allclose(log_kernel_derivative(r2, kernel), numeric, rtol=1e-5)


def test_kernel_logits_are_translation_invariant_far_from_the_origin():
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(4, 2)), rng.normal(size=(5, 2))
    np.testing.assert_allclose(
        kernel_logits(X + 1e6, Y + 1e6, 0.5), kernel_logits(X, Y, 0.5), rtol=1e-9, atol=1e-9
    )


def test_unknown_kernel_and_bad_bandwidth_are_rejected():
    with pytest.raises(ValueError, match="kernel must be one of"):
        log_kernel(np.ones(2), "box")
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        kernel_logits(np.ones((1, 2)), np.ones((1, 2)), [1.0, 0.0])
