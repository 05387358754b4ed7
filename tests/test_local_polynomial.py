"""Local polynomials from kernel moment sums (kernattn._local.polynomial): the estimate, its
equivalent weights, the smoother diagonal and the leave-one-out fit against weighted least
squares solved query by query; the variance bound that holds queries back; invariances and
degenerate designs."""

import warnings
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernattn import KernelSmoother
from kernattn._local import linear_fit as _local_linear
from kernattn._local.polynomial import (
    VARIANCE_BOUND,
    LocalDesignWarning,
    check_degree,
    design_columns,
    equivalent_weights,
    held_back_message,
    monomial_exponents,
    monomials,
    polynomial_columns,
    polynomial_estimate,
)

CASES = [(1, 0), (1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 2)]


# ------------------------------------------------------------------ references


def gaussian_weights(keys, queries, leave_out_self=False):
    """Gaussian kernel weights exp(−½‖q − k‖²), each row divided by its largest."""
    r2 = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(axis=-1)
    if leave_out_self:
        np.fill_diagonal(r2, np.inf)
    return np.exp(-0.5 * (r2 - r2.min(axis=1, keepdims=True)))


def direct_local_polynomial(keys, y, queries, weights, degree):
    """Weighted least squares on the monomials of (k − q), one query at a time (lstsq).

    Returns the intercepts (the estimates) and the equivalent weights l_j (row 0 of the
    pseudo-inverse of the weighted design, times √w_j)."""
    exponents = monomial_exponents(keys.shape[1], degree)
    estimates, rows = [], []
    for q, w in zip(queries, weights, strict=True):
        root = np.sqrt(w / w.sum())
        design = monomials(keys - q, exponents) * root[:, None]
        estimates.append(np.linalg.lstsq(design, root * y, rcond=None)[0][0])
        rows.append(np.linalg.pinv(design)[0] * root)
    return np.array(estimates), np.array(rows)


def local_line(sums, Q):
    """The local line at the queries from the degree-1 sums of one output, by the covariance
    solve of kernattn._local.linear_fit: ȳ + C_xyᵀ (C + Λ)⁻¹ (q − m)."""
    d = Q.shape[1]
    S0 = sums[:, 2]
    normalized = sums / S0[:, None]
    ybar, m = normalized[:, 0], normalized[:, 3 : 3 + d]
    second = _local_linear.unpack_second(normalized[:, 3 + d : -d], d)
    cross = normalized[:, -d:] - ybar[:, None] * m
    g = _local_linear.solve_covariance(m, second, (Q - m)[:, :, None])
    return (ybar + np.einsum("bd,bd->b", cross, g[:, :, 0]))[:, None]


def kernel_sums(weights, keys, y, degree):
    """The sums polynomial_estimate takes: Σ e_j [v, v², 1, design, v·monomials] and
    Σ e_j² [1, design], for centered targets v."""
    values = (y - y.mean())[:, None]
    moments = np.hstack([values, values**2, np.ones((len(y), 1))])
    columns = polynomial_columns(moments, values, keys, degree)
    squared = np.hstack([np.ones((len(y), 1)), design_columns(keys, degree)])
    return weights @ columns, weights**2 @ squared


def estimate(weights, keys, y, queries, degree):
    sums, squared = kernel_sums(weights, keys, y, degree)
    fit = polynomial_estimate(sums, squared, queries, 1, keys.shape[1], degree)
    return fit._replace(mean=fit.mean[:, 0] + y.mean(), ybar=fit.ybar[:, 0] + y.mean())


def uniform_data(d, n=300, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    y = np.sin(2 * X).sum(axis=1) + X[:, 0] * X[:, -1] + noise * rng.normal(size=n)
    return X, y, rng


def statsmodels_regression_case():
    """statsmodels' continuous kernel-regression data, whose references come from R's np
    (as in tests/test_smoother.py), and R np's local-linear cv.ls bandwidths for it."""
    rs = np.random.RandomState(123456)
    rs.binomial(2, 0.7, size=(60, 1))
    rs.binomial(3, 0.7, size=(60, 1))
    c1 = rs.normal(size=60)
    c2 = rs.normal(10, 1, size=60)
    rs.normal(10, 2, size=(60, 1))
    noise = rs.normal(size=60)
    X = np.column_stack([c1, c2])
    return X, 0.3 + 1.2 * c1 + 3.7 * c2 + noise, np.array([1.717891, 2.449415])


# -------------------------------------------------------------------- monomials


def test_exponents_are_graded_and_degree_two_follows_the_upper_triangle():
    for d in (1, 2, 3, 5):
        for p in range(4):
            exponents = monomial_exponents(d, p)
            assert exponents.shape == (comb(d + p, d), d)
            assert np.all(exponents[0] == 0)
            assert np.all(np.diff(exponents.sum(axis=1)) >= 0)
    a, b = np.triu_indices(3)
    second = monomial_exponents(3, 2)[4:]
    expected = np.zeros((len(a), 3), dtype=int)
    np.add.at(expected, (np.arange(len(a)), a), 1)
    np.add.at(expected, (np.arange(len(a)), b), 1)
    np.testing.assert_array_equal(second, expected)


def test_degree_one_columns_are_the_local_line_columns():
    rng = np.random.default_rng(0)
    keys, values = rng.normal(size=(30, 3)), rng.normal(size=(30, 2))
    moments = np.hstack([values, values**2, np.ones((30, 1))])
    np.testing.assert_array_equal(
        polynomial_columns(moments, values, keys, 1),
        np.hstack(
            [
                moments,
                _local_linear.key_columns(keys),
                _local_linear.value_key_columns(values, keys),
            ]
        ),
    )


# ------------------------------------------------------------------ the estimate


@pytest.mark.parametrize("d, degree", CASES)
def test_estimate_equals_weighted_least_squares_query_by_query(d, degree):
    X, y, rng = uniform_data(d)
    h = 0.35
    keys = (X - X.mean(axis=0)) / h
    queries = (rng.uniform(-0.9, 0.9, size=(25, d)) - X.mean(axis=0)) / h
    weights = gaussian_weights(keys, queries)
    expected, expected_weights = direct_local_polynomial(keys, y, queries, weights, degree)
    fit = estimate(weights, keys, y, queries, degree)
    equivalent, held_back = equivalent_weights(weights, keys, queries, degree)
    assert not fit.held_back.any() and not held_back.any()
    np.testing.assert_allclose(fit.mean, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(equivalent, expected_weights, rtol=1e-8, atol=1e-11)
    # The variance factor is Σ_j l_j² of the fit, up to the floor of the squared weights'
    # moments (an upper bound, 1e-10 of their raw size).
    exact = (equivalent**2).sum(axis=1)
    assert np.all(fit.variance >= exact * (1 - 1e-12))
    np.testing.assert_allclose(fit.variance, exact, rtol=1e-7)


@pytest.mark.parametrize("d, degree", CASES)
def test_equivalent_weights_sum_to_one_and_reproduce_the_estimate(d, degree):
    X, y, rng = uniform_data(d, n=200, seed=1)
    keys = (X - X.mean(axis=0)) / 0.3
    # Inside, at the edge and far outside the data.
    queries = np.vstack([rng.uniform(-1, 1, size=(10, d)), np.full((1, d), 1.2)]) / 0.3
    queries = np.vstack([queries, np.full((1, d), 30.0), np.full((1, d), -1e3)])
    weights = gaussian_weights(keys, queries)
    equivalent, held_back = equivalent_weights(weights, keys, queries, degree)
    fit = estimate(weights, keys, y, queries, degree)
    np.testing.assert_allclose(equivalent.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose(equivalent[:-2] @ y, fit.mean[:-2], rtol=1e-9, atol=1e-9)
    # Far away the local design is a few keys a hair apart, resolved only just above the
    # rounding floor: the two ways of taking the sums agree to its precision.
    np.testing.assert_allclose(equivalent[-2:] @ y, fit.mean[-2:], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(held_back, fit.held_back)
    assert held_back[-2:].all() or degree == 0


@pytest.mark.parametrize("d, degree", [c for c in CASES if c[1] > 0])
def test_polynomials_of_the_degree_are_reproduced_exactly(d, degree):
    X, _, rng = uniform_data(d, n=150, seed=2)
    exponents = monomial_exponents(d, degree)
    coefficients = rng.normal(size=len(exponents))
    y = monomials(X, exponents) @ coefficients
    keys = (X - X.mean(axis=0)) / 0.4
    Q = rng.uniform(-1, 1, size=(20, d))
    queries = (Q - X.mean(axis=0)) / 0.4
    fit = estimate(gaussian_weights(keys, queries), keys, y, queries, degree)
    assert not fit.held_back.any()
    np.testing.assert_allclose(fit.mean, monomials(Q, exponents) @ coefficients, atol=1e-8)


def test_degree_one_agrees_with_the_local_line_where_the_design_supports_it():
    """R np's local-linear cv.ls bandwidths of this data, pinned in test_smoother: at them
    no leave-one-out or in-sample query is held back, and the fits (so the leave-one-out
    criterion) are the local line's to 1e-10."""
    X, y, h = statsmodels_regression_case()
    keys = (X - X.mean(axis=0)) / h
    rng = np.random.default_rng(3)
    queries = (X[rng.choice(60, 15)] + 0.3 * rng.normal(size=(15, 2)) - X.mean(axis=0)) / h
    for Q, weights in [
        (keys, gaussian_weights(keys, keys, leave_out_self=True)),
        (keys, gaussian_weights(keys, keys)),
        (queries, gaussian_weights(keys, queries)),
    ]:
        sums, squared = kernel_sums(weights, keys, y, 1)
        fit = polynomial_estimate(sums, squared, Q, 1, 2, 1)
        line = local_line(sums, Q)
        assert not fit.held_back.any()
        np.testing.assert_allclose(fit.mean, line, rtol=1e-10, atol=1e-10)
        equivalent, _ = equivalent_weights(weights, keys, Q, 1)
        _, reference = direct_local_polynomial(keys, y, Q, weights, 1)
        np.testing.assert_allclose(equivalent, reference, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ held back


def test_training_points_are_never_held_back():
    """In sample the own key has the largest weight, so Σ l² ≤ 1: not even the
    high-leverage points of a global least-squares plane (a huge bandwidth) are held back."""
    rs = np.random.RandomState(12345)
    X = np.column_stack([rs.normal(size=250), rs.beta(0.5, 0.2, size=250)])
    y = 1.2 * X[:, 0] + rs.normal(size=250)
    for h, degree in [(np.array([1.1e7, 1.3e6]), 1), (np.array([0.3, 0.1]), 1), (0.5, 2)]:
        keys = (X - X.mean(axis=0)) / h
        fit = estimate(gaussian_weights(keys, keys), keys, y, keys, degree)
        assert not fit.held_back.any()
        assert fit.variance.max() <= 1.0 + 1e-9
    design = np.column_stack([np.ones(250), X])
    plane = design @ np.linalg.lstsq(design, y, rcond=None)[0]
    keys = (X - X.mean(axis=0)) / np.array([1.1e7, 1.3e6])
    fit = estimate(gaussian_weights(keys, keys), keys, y, keys, 1)
    np.testing.assert_allclose(fit.mean, plane, rtol=1e-8, atol=1e-8)


def test_held_back_exactly_where_the_plain_fit_is_too_noisy():
    """A query is held back when Σ l_j² of the plain local polynomial (from the direct
    solve) exceeds the bound; it then gets Σ l_j² equal to the bound, and the others keep
    the plain fit."""
    rng = np.random.default_rng(4)
    X = np.sort(rng.uniform(0, 1, size=(60, 1)), axis=0)
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.normal(size=60)
    h = 0.08
    keys = (X - 0.5) / h
    queries = (np.linspace(-0.4, 1.4, 37)[:, None] - 0.5) / h
    weights = gaussian_weights(keys, queries)
    for degree in (1, 2, 3):
        plain, plain_weights = direct_local_polynomial(keys, y, queries, weights, degree)
        variance = (plain_weights**2).sum(axis=1)
        clear = np.abs(np.log(variance / VARIANCE_BOUND)) > 1e-3
        equivalent, held_back = equivalent_weights(weights, keys, queries, degree)
        np.testing.assert_array_equal(held_back[clear], (variance > VARIANCE_BOUND)[clear])
        assert held_back.any() and not held_back.all()
        # Shrunk until the bound holds; the bound is computed with a floor on the squared
        # weights' moments, an upper bound that far out keeps Σ l² a little below κ.
        shrunk = (equivalent[held_back] ** 2).sum(axis=1)
        assert np.all(shrunk <= VARIANCE_BOUND * (1 + 1e-9))
        assert np.all(shrunk >= VARIANCE_BOUND * (1 - 5e-2))
        np.testing.assert_allclose(
            equivalent[~held_back] @ y, plain[~held_back], rtol=1e-7, atol=1e-8
        )


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_far_queries_stay_between_the_local_constant_and_a_bounded_extrapolation(degree):
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, size=(200, 1))
    y = 3 * X[:, 0] + 0.1 * rng.normal(size=200)
    keys = (X - 0.5) / 0.05
    queries = (np.array([[1.1], [1.3], [2.0], [10.0], [1e3], [1e8], [-1e8]]) - 0.5) / 0.05
    weights = gaussian_weights(keys, queries)
    fit = estimate(weights, keys, y, queries, degree)
    plain, _ = direct_local_polynomial(keys, y, queries, weights, degree)
    assert np.all(np.isfinite(fit.mean)) and fit.held_back[1:].all()
    assert np.all(fit.variance <= VARIANCE_BOUND * (1 + 1e-9))
    # Bounded: within twice the range of the targets around their own range.
    span = np.ptp(y)
    assert np.all((fit.mean > y.min() - 2 * span) & (fit.mean < y.max() + 2 * span))
    assert np.abs(plain[1] - fit.ybar[1]) > 2 * np.abs(fit.mean[1] - fit.ybar[1])
    # Far away the weights rest on the nearest key: its target.
    np.testing.assert_allclose(fit.mean[-3:], y[[X[:, 0].argmax()] * 2 + [X[:, 0].argmin()]])
    if degree == 1:
        # One monomial: the ridge path is the segment from the local constant to the line.
        low, high = np.minimum(fit.ybar, plain), np.maximum(fit.ybar, plain)
        assert np.all((fit.mean >= low - 1e-12) & (fit.mean <= high + 1e-12))


def test_a_data_entry_zero_far_outside_the_cloud_is_held_back():
    """Six inputs, three nearly collinear; queries with one of those recorded as 0, far
    outside the training cloud: the plain local line extrapolates along a direction the
    local design barely spans (one query lands 10 standard deviations of the targets off),
    the safe one stays near the local constant and says it was held back."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(300, 4))
    X = np.column_stack(
        [
            base,
            base[:, 0] + 0.05 * rng.normal(size=300) + 3.0,
            base[:, 0] - 0.05 * rng.normal(size=300),
        ]
    )
    y = X[:, 0] + np.sin(X[:, 2]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=300)
    y = (y - y.mean()) / y.std()
    h = 0.5 * X.std(axis=0)
    center = X.mean(axis=0)
    keys = (X - center) / h
    query = X[:5].copy()
    query[:, 4] = 0.0
    Q = (query - center) / h
    weights = gaussian_weights(keys, Q)
    plain, plain_weights = direct_local_polynomial(keys, y, Q, weights, 1)
    fit = estimate(weights, keys, y, Q, 1)
    assert np.max(np.abs(plain)) > 10 and np.all((plain_weights**2).sum(axis=1) > 100)
    assert fit.held_back.all()
    assert np.all(np.abs(fit.mean - fit.ybar) < 1.0)


# ------------------------------------------------------------------ invariances


@pytest.mark.parametrize("degree", [1, 2])
def test_shifts_and_the_units_of_inputs_and_bandwidth_change_nothing(degree):
    X, y, rng = uniform_data(2, n=120, seed=7)
    Q = np.vstack([rng.uniform(-1, 1, size=(10, 2)), [[3.0, -2.0], [1.5, 1.5]]])
    h = np.array([0.3, 0.5])
    results = []
    for scale, shift in [
        (np.ones(2), np.zeros(2)),
        (np.array([1e3, 1e-3]), np.array([-7.0, 1e4])),
    ]:
        Xs, Qs, hs = X * scale + shift, Q * scale + shift, h * scale
        center = Xs.mean(axis=0)
        keys, queries = (Xs - center) / hs, (Qs - center) / hs
        results.append(estimate(gaussian_weights(keys, queries), keys, y, queries, degree))
    np.testing.assert_allclose(results[0].mean, results[1].mean, rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(results[0].held_back, results[1].held_back)
    assert results[0].held_back[-2:].all()
    # Units of the bandwidth alone: the keys in other units, with the bandwidth's factor.
    keys = (X - X.mean(axis=0)) / h
    queries = (Q - X.mean(axis=0)) / h
    for factor in (1e-3, 1e4):
        fit = estimate(gaussian_weights(keys, queries), keys * factor, y, queries * factor, degree)
        np.testing.assert_allclose(fit.mean, results[0].mean, rtol=1e-7, atol=1e-7)


# ------------------------------------------------------- smoother diagonal, LOO


@pytest.mark.parametrize("d, degree", [(1, 2), (2, 1), (2, 2)])
def test_smoother_diagonal_trace_gcv_and_aicc_match_the_full_smoother_matrix(d, degree):
    X, y, _ = uniform_data(d, n=80, seed=8)
    keys = (X - X.mean(axis=0)) / 0.45
    weights = gaussian_weights(keys, keys)
    _, S = direct_local_polynomial(keys, y, keys, weights, degree)
    fit = estimate(weights, keys, y, keys, degree)
    own = np.diag(weights) / weights.sum(axis=1)
    diagonal = own * fit.self_factor
    np.testing.assert_allclose(diagonal, np.diag(S), rtol=1e-9)
    n, trace = len(y), diagonal.sum()
    rss = np.sum((y - fit.mean) ** 2)
    rss_ref, trace_ref = np.sum((y - S @ y) ** 2), np.trace(S)
    gcv = n * rss / (n - trace) ** 2
    aicc = np.log(rss / n) + (1 + trace / n) / (1 - (trace + 2) / n)
    np.testing.assert_allclose(gcv, n * rss_ref / (n - trace_ref) ** 2, rtol=1e-9)
    np.testing.assert_allclose(
        aicc, np.log(rss_ref / n) + (1 + trace_ref / n) / (1 - (trace_ref + 2) / n), rtol=1e-9
    )


@pytest.mark.parametrize("d, degree", [(1, 1), (1, 3), (2, 2)])
def test_leave_one_out_fit_is_the_fit_without_the_row(d, degree):
    X, y, _ = uniform_data(d, n=70, seed=9)
    keys = (X - X.mean(axis=0)) / 0.4
    left_out = gaussian_weights(keys, keys, leave_out_self=True)
    loo = estimate(left_out, keys, y, keys, degree)
    direct, _ = direct_local_polynomial(keys, y, keys, left_out, degree)
    kept = ~loo.held_back
    assert kept.sum() > 0.8 * len(y)
    np.testing.assert_allclose(loo.mean[kept], direct[kept], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(loo.variance[~kept], VARIANCE_BOUND, rtol=1e-5)
    # Deletion identity where no ridge acts: (y − ŷ)/(1 − S_ii) from the full fit.
    weights = gaussian_weights(keys, keys)
    full = estimate(weights, keys, y, keys, degree)
    S_ii = np.diag(weights) / weights.sum(axis=1) * full.self_factor
    np.testing.assert_allclose(
        (y - full.mean)[kept] / (1 - S_ii[kept]), (y - loo.mean)[kept], rtol=1e-7, atol=1e-9
    )


# ------------------------------------------------------------------ degenerate


def degenerate_designs():
    rng = np.random.default_rng(10)
    two_points = np.repeat([[0.0], [1.0]], 15, axis=0)
    one_point = np.full((20, 2), 3.0)
    t = rng.uniform(-1, 1, size=40)
    collinear = np.column_stack([t, 2 * t])
    constant_feature = np.column_stack([t, np.full(40, 5.0)])
    return {
        "duplicates": (two_points, 3, np.array([[0.0], [0.5], [1.0], [4.0]])),
        "one distinct point": (one_point, 2, np.array([[3.0, 3.0], [5.0, -1.0]])),
        "collinear": (collinear, 2, np.array([[0.2, 0.4], [0.5, 1.0], [0.2, -0.4]])),
        "constant feature": (constant_feature, 2, np.array([[0.3, 5.0], [0.3, 8.0]])),
    }


@pytest.mark.parametrize("name", list(degenerate_designs()))
def test_degenerate_designs_give_finite_estimates_and_no_nan(name):
    X, top, queries = degenerate_designs()[name]
    rng = np.random.default_rng(11)
    y = X[:, 0] + 0.1 * rng.normal(size=len(X))
    center = X.mean(axis=0)
    for degree in range(1, top + 1):
        keys, Q = (X - center) / 0.3, (queries - center) / 0.3
        weights = gaussian_weights(keys, Q)
        fit = estimate(weights, keys, y, Q, degree)
        equivalent, held_back = equivalent_weights(weights, keys, Q, degree)
        assert np.all(np.isfinite(fit.mean)) and np.all(np.isfinite(equivalent))
        np.testing.assert_allclose(equivalent.sum(axis=1), 1.0, atol=1e-9)
        np.testing.assert_allclose(equivalent @ y, fit.mean, atol=1e-9)
        if name == "one distinct point":
            np.testing.assert_allclose(fit.mean, y.mean(), rtol=1e-12)
            np.testing.assert_array_equal(held_back, [False, True])
        if name == "duplicates":
            # At each of the two inputs, the mean of its targets.
            np.testing.assert_allclose(fit.mean[[0, 2]], [y[:15].mean(), y[15:].mean()], atol=1e-6)
            assert held_back[-1]
        if name == "collinear":
            # Along the line the fit is a local polynomial in t; off it, held back (the
            # design does not resolve the second direction: the fit is constant along it).
            assert not held_back[:2].any() and held_back[2]
        if name == "constant feature":
            assert not held_back[0] and held_back[1]
            np.testing.assert_allclose(fit.mean[0], fit.mean[1], atol=1e-9)


def test_sums_beyond_the_float_range_give_the_local_constant():
    keys = np.array([[1e80], [2e80], [3e80]])
    y = np.array([1.0, 2.0, 4.0])
    queries = np.array([[2e80]])
    weights = np.ones((1, 3))
    fit = estimate(weights, keys, y, queries, 2)
    np.testing.assert_allclose(fit.mean, y.mean())
    assert fit.held_back.all()


# ------------------------------------------------------------------ API


def test_degree_errors_name_what_the_features_allow():
    assert check_degree(3, 1) == 3 and check_degree(np.int64(2), 4) == 2
    with pytest.raises(ValueError, match="from 0 to 2 with 2 features"):
        check_degree(3, 2)
    with pytest.raises(ValueError, match="from 0 to 3 with 1 feature"):
        check_degree(4, 1)
    for bad in (True, 1.0, "1", -1):
        with pytest.raises(ValueError, match="degree must be an int"):
            check_degree(bad, 1)


def test_held_back_warning_is_a_filterable_user_warning():
    assert issubclass(LocalDesignWarning, UserWarning)
    message = held_back_message(3, 40, 2)
    assert message.startswith("3 of 40 queries") and "degree 2" in message
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=LocalDesignWarning)
        warnings.warn(message, LocalDesignWarning, stacklevel=1)
    assert not caught


def _weighted_least_squares(X, y, q, h, degree):
    """The local polynomial at ``q`` by a direct weighted least-squares solve (1-D)."""
    u = (X[:, 0] - q) / h
    w = np.exp(-0.5 * u**2)
    A = np.vander(u, degree + 1, increasing=True) * np.sqrt(w)[:, None]
    return np.linalg.lstsq(A, y * np.sqrt(w), rcond=None)[0][0]


@pytest.mark.parametrize("degree", [2, 3])
def test_local_polynomial_far_from_the_training_center_is_the_weighted_least_squares(degree):
    # Data 80 bandwidths wide: at its ends a query's local mean lies 40 bandwidths from the
    # training center, where monomials of the keys about the center keep too few digits for
    # a local cubic at the edge of the data (it lost its cubic term to the rounding floor).
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(4000, 1))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.2 * rng.normal(size=4000)
    h = 1 / 80
    Q = np.array([[X.min()], [0.002], [0.03], [0.5], [0.97], [X.max()]])
    model = KernelSmoother(bandwidth=h, degree=degree, algorithm="exact").fit(X, y)
    direct = [_weighted_least_squares(X, y, q, h, degree) for q in Q[:, 0]]
    np.testing.assert_allclose(model.predict(Q), direct, rtol=1e-7, atol=1e-9)
    # The equivalent weights are those of the same fit.
    weights = model.attention_weights(Q)
    np.testing.assert_allclose(weights @ y, direct, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-10)


def _direct_fit_2d(X, y, q, h):
    """The local quadratic at ``q`` in 2-D by a direct weighted least-squares solve."""
    u = (X - q) / h
    w = np.exp(-0.5 * np.sum(u**2, axis=1))
    A = np.column_stack([np.ones(len(u)), u[:, 0], u[:, 1], u[:, 0] ** 2, u[:, 0] * u[:, 1]])
    A = np.column_stack([A, u[:, 1] ** 2]) * np.sqrt(w)[:, None]
    return np.linalg.lstsq(A, y * np.sqrt(w), rcond=None)[0][0]


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    d=st.integers(1, 2),
    degree=st.integers(2, 3),
    width=st.floats(8.0, 120.0),
    offset=st.floats(-50.0, 50.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_local_polynomials_of_wide_data_are_the_weighted_least_squares(
    d, degree, width, offset, seed
):
    # Dense data (about 12 rows per bandwidth in 1-D, 4 per squared bandwidth in 2-D, so
    # that no query inside is held back) from 8 to 120 bandwidths wide, shifted off the
    # origin: wherever a query lies, its fit is the direct weighted least squares.
    degree = degree if d == 1 else 2
    width = width if d == 1 else min(width, 25.0)
    rng = np.random.default_rng(seed)
    n = int(12 * width) if d == 1 else int(4 * width**2)
    X = offset + width * rng.uniform(size=(n, d))
    y = np.sin(6.0 * X[:, 0] / width) + 0.2 * rng.normal(size=n)
    Q = offset + width * rng.uniform(0.0, 1.0, size=(8, d))
    Q[0] = X[np.argmin(X[:, 0])]
    model = KernelSmoother(bandwidth=np.ones(d), degree=degree, algorithm="exact").fit(X, y)
    if d == 1:
        direct = [_weighted_least_squares(X, y, q, 1.0, degree) for q in Q[:, 0]]
    else:
        direct = [_direct_fit_2d(X, y, q, 1.0) for q in Q]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prediction = model.predict(Q)
    np.testing.assert_allclose(prediction, direct, rtol=1e-7, atol=1e-8)


def test_local_line_of_two_clusters_far_apart_is_the_weighted_least_squares():
    # Two dense clusters 200 000 bandwidths apart: the training center lies 100 000
    # bandwidths from each, where the keys' monomials about it keep too few digits even
    # for a line (0.15 off at the clusters' edges). About a point of the lattice, some 700
    # bandwidths away here, the rounding floor moves the line by 1e-6 of the targets' spread.
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.uniform(0, 40, 1500), 2e5 + rng.uniform(0, 40, 1500)])[:, None]
    y = np.sin(X[:, 0] / 6.0) + 0.2 * rng.normal(size=3000)
    Q = np.array([[X[:1500].min()], [20.0], [X[:1500].max()], [2e5 + 1.0], [X.max()]])
    model = KernelSmoother(bandwidth=1.0, degree=1, algorithm="exact").fit(X, y)
    direct = [_weighted_least_squares(X, y, q, 1.0, 1) for q in Q[:, 0]]
    np.testing.assert_allclose(model.predict(Q), direct, rtol=0, atol=1e-6 * np.std(y))
