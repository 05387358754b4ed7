"""KernelSmoother: the estimate against direct formulas, numerics and bad input."""

import itertools
import pickle
import warnings

import numpy as np
import pytest
from sklearn import clone, config_context
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernattn import BandwidthWarning, KernelSmoother
from kernattn._core.warning_types import LocalDesignWarning
from kernattn._local.polynomial import equivalent_weights
from kernattn.attention import softmax_attention
from kernattn.bandwidth import loo_bandwidth, rule_of_thumb_bandwidth
from kernattn.bandwidth._criterion import Criterion

PROFILES = {
    "gaussian": lambda r2: np.exp(-0.5 * r2),
    "epanechnikov": lambda r2: np.clip(1 - r2, 0, None),
    "tricube": lambda r2: np.clip(1 - r2**1.5, 0, None) ** 3,
}


def direct_nadaraya_watson(X, y, queries, h, kernel="gaussian", sample_weight=None):
    """O(n²) reference: Σ_i s_i κ((x − x_i)/h) y_i / Σ_i s_i κ((x − x_i)/h)."""
    r2 = (((queries[:, None, :] - X[None, :, :]) / h) ** 2).sum(axis=-1)
    weights = PROFILES[kernel](r2)
    if sample_weight is not None:
        weights = weights * sample_weight
    total = weights.sum(axis=1)
    return weights @ y / (total[:, None] if y.ndim == 2 else total)


# The ``data`` fixture's third feature does not enter y, so its leave-one-out bandwidth may
# end on an edge of the search range; an edge warning is not the subject of these tests.
LOO_EDGE = "ignore:the leave-one-out bandwidth of feature:UserWarning"


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(120, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=120)
    return X, y, rng.uniform(-1, 1, size=(40, 3))


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tricube"])
def test_predictions_equal_the_direct_formula(data, kernel):
    X, y, queries = data
    h = np.array([0.4, 0.7, 1.1]) if kernel == "gaussian" else np.array([1.2, 1.5, 2.0])
    model = KernelSmoother(kernel=kernel, bandwidth=h).fit(X, y)
    expected = direct_nadaraya_watson(X, y, queries, h, kernel)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-12, atol=1e-12)


def test_sample_weights_and_multi_output_equal_the_direct_formula(data):
    X, y, queries = data
    Y = np.column_stack([y, np.cos(X[:, 2]), -3 * y])
    sw = np.random.default_rng(1).uniform(0.1, 3.0, size=len(X))
    model = KernelSmoother(bandwidth=0.5).fit(X, Y, sample_weight=sw)
    expected = direct_nadaraya_watson(X, Y, queries, 0.5, sample_weight=sw)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-12, atol=1e-12)
    assert model.predict(queries).shape == (40, 3)


def test_gaussian_smoother_is_softmax_attention_with_a_key_bias(data):
    X, y, queries = data
    h = np.array([0.3, 0.5, 0.9])
    keys = X / h
    expected = softmax_attention(
        queries / h, keys, y, scale=1.0, key_bias=-0.5 * (keys**2).sum(axis=1)
    )
    model = KernelSmoother(bandwidth=h).fit(X, y)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-12, atol=1e-12)


def test_attention_weights_reproduce_predictions_and_sum_to_one(data):
    X, y, queries = data
    for degree in (0, 1):
        model = KernelSmoother(bandwidth=0.5, degree=degree).fit(X, y)
        weights = model.attention_weights(queries)
        assert weights.shape == (len(queries), len(X))
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(weights @ y, model.predict(queries), rtol=1e-10, atol=1e-12)


def test_return_std_is_the_weighted_spread_of_the_targets(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.4).fit(X, y)
    mean, std = model.predict(queries, return_std=True)
    weights = model.attention_weights(queries)
    expected = np.sqrt((weights * (y[None, :] - mean[:, None]) ** 2).sum(axis=1))
    np.testing.assert_allclose(std, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(mean, model.predict(queries))


def test_blocked_prediction_matches_one_block(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.4).fit(X, y)
    expected = model.predict(queries, return_std=True)
    with config_context(working_memory=1e-6):
        blocked = model.predict(queries, return_std=True)
    np.testing.assert_allclose(blocked, expected, rtol=1e-13, atol=1e-15)


def test_many_keys_in_tiles_equal_the_direct_formula():
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, size=(5000, 2))  # more keys than one tile holds
    y = np.sin(3 * X[:, 0]) * X[:, 1]
    queries = rng.uniform(-1.5, 1.5, size=(300, 2))  # enough work for several threads
    sw = rng.uniform(0.5, 2.0, size=len(X))
    model = KernelSmoother(bandwidth=0.05).fit(X, y, sample_weight=sw)
    expected = direct_nadaraya_watson(X, y, queries, 0.05, sample_weight=sw)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-11, atol=1e-12)


# ------------------------------------------------------------------- local linear


def direct_local_linear(X, y, queries, h):
    out = []
    for q in queries:
        w = np.exp(-0.5 * (((X - q) / h) ** 2).sum(axis=1))
        design = np.column_stack([np.ones(len(X)), X - q])
        coef = np.linalg.solve(design.T @ (w[:, None] * design), design.T @ (w * y))
        out.append(coef[0])
    return np.array(out)


def test_local_linear_equals_weighted_least_squares_at_each_query(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.5, degree=1).fit(X, y)
    expected = direct_local_linear(X, y, queries, 0.5)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-9, atol=1e-10)


def test_local_linear_reproduces_a_linear_target_and_removes_boundary_bias():
    X = np.linspace(0, 1, 60)[:, None]
    y = 2.0 + 3.0 * X[:, 0]
    edges = np.array([[0.0], [1.0]])
    linear = KernelSmoother(bandwidth=0.2, degree=1).fit(X, y).predict(edges)
    constant = KernelSmoother(bandwidth=0.2, degree=0).fit(X, y).predict(edges)
    np.testing.assert_allclose(linear, [2.0, 5.0], atol=1e-10)
    # Local-constant averaging pulls the edges towards the inside.
    assert constant[0] > 2.3 and constant[1] < 4.7


def test_local_linear_holds_back_to_the_local_constant_on_a_degenerate_neighborhood():
    X = np.array([[0.0], [10.0]])
    y = np.array([1.0, 5.0])
    # With a tiny bandwidth all the weight is on one point: no line is determined, the
    # local design does not resolve the direction of the query.
    model = KernelSmoother(bandwidth=0.01, degree=1).fit(X, y)
    with pytest.warns(LocalDesignWarning, match="2 of 3 queries .* degree 1"):
        prediction = model.predict([[0.1], [9.0], [5.0]])
    # Halfway, both points carry weight: the line through them.
    np.testing.assert_allclose(prediction, [1.0, 5.0, 3.0])


def test_local_linear_with_a_huge_bandwidth_is_the_least_squares_line():
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 5, size=(40, 1))
    y = 2.0 - 0.7 * X[:, 0] + 0.3 * rng.normal(size=40)
    queries = np.array([[-10.0], [0.5], [20.0]])
    line = np.polyfit(X[:, 0], y, 1)
    for bandwidth in (1e5, 1e9):
        model = KernelSmoother(bandwidth=bandwidth, degree=1).fit(X, y)
        np.testing.assert_allclose(model.predict(queries), np.polyval(line, queries[:, 0]))
    # ... also in units a million times larger.
    model = KernelSmoother(bandwidth=1e11, degree=1).fit(X * 1e6, y)
    np.testing.assert_allclose(model.predict(queries * 1e6), np.polyval(line, queries[:, 0]))


def statsmodels_significance_case(seed=12345):
    """statsmodels' local-linear significance test data (its ``test_significance_*``):
    y linear in C1 and C2, regressed on C1 and an irrelevant C3, at the cv_ls bandwidths
    [1.1e7, 1.3e6] found for it: the local-linear fit is then the least-squares plane."""
    rs = np.random.RandomState(seed)
    C1 = rs.normal(size=250)
    C2 = rs.normal(2, 1, size=250)
    C3 = rs.beta(0.5, 0.2, size=250)
    noise = rs.normal(size=250)
    return np.column_stack([C1, C3]), 1.2 * C1 + 3.7 * C2 + noise


@pytest.mark.parametrize("seed", [12345, 1234561])
def test_statsmodels_significance_bandwidths_give_the_least_squares_plane(seed):
    X, y = statsmodels_significance_case(seed)
    model = KernelSmoother(bandwidth=[11108137.1087194, 1333821.85150218], degree=1).fit(X, y)
    design = np.column_stack([np.ones(len(X)), X])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    np.testing.assert_allclose(model.predict(X), design @ coef, rtol=1e-8, atol=1e-8)


def statsmodels_regression_case():
    """statsmodels' continuous kernel-regression test data (``KernelRegressionTestBase``),
    whose reference values come from R's np package."""
    rs = np.random.RandomState(123456)
    rs.binomial(2, 0.7, size=(60, 1))
    rs.binomial(3, 0.7, size=(60, 1))
    c1 = rs.normal(size=60)
    c2 = rs.normal(10, 1, size=60)
    rs.normal(10, 2, size=(60, 1))
    noise = rs.normal(size=60)
    return np.column_stack([c1, c2]), 0.3 + 1.2 * c1 + 3.7 * c2 + noise


@pytest.mark.parametrize(
    "degree, r_bandwidth, r_mean",
    [
        (0, [0.6163835, 0.1649656], [31.49157, 37.29536, 43.72332, 40.58997, 36.80711]),
        (1, [1.717891, 2.449415], [31.16003, 37.30323, 44.49870, 40.73704, 36.19083]),
    ],
    ids=["local-constant", "local-linear"],
)
def test_loo_finds_r_np_cv_ls_bandwidths_of_the_estimator_fitted(degree, r_bandwidth, r_mean):
    X, y = statsmodels_regression_case()
    model = KernelSmoother(bandwidth="loo", degree=degree).fit(X, y)
    np.testing.assert_allclose(model.bandwidth_, r_bandwidth, rtol=1e-4)
    np.testing.assert_allclose(model.predict(X[:5]), r_mean, atol=1e-4)
    # loo_error_ is the leave-one-out error of this estimator: the mean squared deleted
    # residual (y − ŷ)/(1 − S_ii) of its smoother matrix at the training points.
    S = model.attention_weights(X)
    deleted = (y - S @ y) / (1 - np.diag(S))
    np.testing.assert_allclose(model.loo_error_, np.mean(deleted**2), rtol=1e-9)
    np.testing.assert_allclose(model.effective_dof_, np.trace(S), rtol=1e-9)


def test_local_linear_loo_error_is_below_the_local_constant_bandwidths_error():
    X, y = statsmodels_regression_case()
    linear = KernelSmoother(bandwidth="loo", degree=1).fit(X, y)
    at_constant = KernelSmoother(bandwidth=[0.6163835, 0.1649656], degree=1).fit(X, y)
    S = at_constant.attention_weights(X)
    deleted = (y - S @ y) / (1 - np.diag(S))
    assert linear.loo_error_ < 0.5 * np.mean(deleted**2)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov"])
def test_local_linear_with_a_vanishing_bandwidth_interpolates(data, kernel):
    X, y, _ = data
    model = KernelSmoother(kernel=kernel, bandwidth=1e-6, degree=1).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BandwidthWarning)
        np.testing.assert_allclose(model.predict(X), y, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------- local polynomials, safe


def direct_local_polynomial(X, y, queries, h, degree):
    """Weighted least squares on every monomial of (x − q)/h of degree ≤ ``degree``."""
    out = []
    for q in queries:
        U = (X - q) / h
        w = np.exp(-0.5 * (U**2).sum(axis=1))
        columns = [np.ones(len(X))]
        for total in range(1, degree + 1):
            for combination in itertools.combinations_with_replacement(range(X.shape[1]), total):
                columns.append(np.prod(U[:, list(combination)], axis=1))
        design = np.column_stack(columns)
        coef = np.linalg.solve(design.T @ (w[:, None] * design), design.T @ (w * y))
        out.append(coef[0])
    return np.array(out)


@pytest.mark.parametrize("d, degree, h", [(1, 2, 0.15), (1, 3, 0.2), (2, 2, 0.45), (3, 2, 0.6)])
def test_local_polynomials_equal_weighted_least_squares_at_each_query(d, degree, h):
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(150, d))
    y = np.sin(2 * X).sum(axis=1) + X[:, 0] * X[:, -1] + 0.1 * rng.normal(size=150)
    queries = rng.uniform(-0.8, 0.8, size=(20, d))
    model = KernelSmoother(bandwidth=h, degree=degree).fit(X, y)
    expected = direct_local_polynomial(X, y, queries, h, degree)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalDesignWarning)  # none held back in there
        np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-9, atol=1e-9)
        weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose(weights @ y, expected, rtol=1e-9, atol=1e-9)
    assert model.degree_ == degree


def test_local_quadratic_reproduces_a_quadratic_and_its_slope():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(120, 2))
    y = 1.0 + 2.0 * X[:, 0] - X[:, 1] + 3.0 * X[:, 0] * X[:, 1] - 0.5 * X[:, 1] ** 2
    model = KernelSmoother(bandwidth=0.4, degree=2).fit(X, y)
    queries = np.array([[0.0, 0.0], [0.5, -0.3], [-0.6, 0.7]])
    truth = 1.0 + 2.0 * queries[:, 0] - queries[:, 1] + 3.0 * queries[:, 0] * queries[:, 1]
    truth -= 0.5 * queries[:, 1] ** 2
    np.testing.assert_allclose(model.predict(queries), truth, atol=1e-8)
    slope = np.column_stack(
        [2.0 + 3.0 * queries[:, 1], -1.0 + 3.0 * queries[:, 0] - queries[:, 1]]
    )
    np.testing.assert_allclose(model.gradient(queries), slope, atol=1e-7)


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_far_queries_stay_between_the_local_constant_and_a_bounded_extrapolation(degree):
    rng = np.random.default_rng(6)
    X = rng.uniform(0, 1, size=(200, 1))
    y = 3 * X[:, 0] + 0.1 * rng.normal(size=200)
    queries = np.array([[0.5], [1.1], [1.3], [2.0], [10.0], [1e3], [1e8], [-1e8]])
    model = KernelSmoother(bandwidth=0.05, degree=degree).fit(X, y)
    with pytest.warns(LocalDesignWarning, match=f"7 of 8 queries .* degree {degree}"):
        prediction = model.predict(queries)
    constant = KernelSmoother(bandwidth=0.05).fit(X, y).predict(queries)
    plain = direct_local_polynomial(X, y, queries[1:3], 0.05, degree)
    span = np.ptp(y)
    assert np.all((prediction > y.min() - 2 * span) & (prediction < y.max() + 2 * span))
    # Shrunk toward the local constant: nearer it than the plain polynomial's extrapolation.
    assert np.all(np.abs(prediction[1:3] - constant[1:3]) < np.abs(plain - constant[1:3]))
    # Far away the weights rest on the nearest training point: its target.
    nearest = y[[X[:, 0].argmax()] * 2 + [X[:, 0].argmin()]]
    np.testing.assert_allclose(prediction[-3:], nearest)
    # The equivalent weights of the held-back queries still reproduce them, and bound
    # their variance: Σ l² ≤ 4.
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights @ y, prediction, rtol=1e-6, atol=1e-6)
    assert np.all((weights**2).sum(axis=1) <= 4.0 + 1e-9)


def test_a_data_entry_zero_is_held_back_by_the_local_line():
    """Six inputs, three nearly collinear, a query with one of those
    recorded as 0, far outside the training cloud. The plain local line lands many standard
    deviations of the targets away; the fitted one stays near the local constant and warns."""
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
    query = X[:5].copy()
    query[:, 4] = 0.0
    plain = direct_local_linear(X, y, query, h)
    assert np.max(np.abs(plain)) > 10
    model = KernelSmoother(bandwidth=h, degree=1).fit(X, y)
    with pytest.warns(LocalDesignWarning, match="5 of 5 queries"):
        prediction = model.predict(query)
    constant = KernelSmoother(bandwidth=h).fit(X, y).predict(query)
    assert np.all(np.abs(prediction - constant) < 1.0)


def test_held_back_share_is_the_leave_one_out_count():
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, size=(80, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=80)
    h = np.array([0.12, 0.15])
    model = KernelSmoother(bandwidth=h, degree=1).fit(X, y)
    K = (X - X.mean(axis=0)) / h
    weights = np.exp(-0.5 * ((K[:, None, :] - K[None, :, :]) ** 2).sum(axis=-1))
    np.fill_diagonal(weights, 0.0)
    _, held_back = equivalent_weights(weights, K, K, 1)
    assert 0 < held_back.mean() < 0.5
    np.testing.assert_allclose(model.held_back_, held_back.mean())
    assert KernelSmoother(bandwidth=h).fit(X, y).held_back_ == 0.0
    # In sample no training row is held back: predicting them does not warn.
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalDesignWarning)
        model.predict(X)


@pytest.mark.parametrize("degree", [1, 2])
def test_integer_weights_hold_back_as_repeated_rows_do(degree):
    # Sample weights are precision weights of the variance rule: a row of weight 3 is three
    # observations, and the local polynomials (held-back ones included) are those of the
    # repeated rows, in prediction, in held_back_ and in the leave-one-out criterion.
    rng = np.random.default_rng(12)
    X = rng.uniform(-1, 1, size=(60, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=60)
    weights = rng.integers(0, 4, size=60)
    queries = np.vstack([rng.uniform(-1, 1, size=(10, 2)), [[1.3, 0.0], [2.0, -2.0]]])
    weighted = KernelSmoother(bandwidth=[0.2, 0.25], degree=degree).fit(X, y, weights)
    repeated = KernelSmoother(bandwidth=[0.2, 0.25], degree=degree).fit(
        X.repeat(weights, axis=0), y.repeat(weights)
    )
    with pytest.warns(LocalDesignWarning) as caught:
        expected = repeated.predict(queries)
    with pytest.warns(LocalDesignWarning) as again:
        # (A query far out is held back by a ridge set from sums taken in another order,
        # whose rounding moves it by about 1e-6 of its shrinkage: SQUARED_FLOOR.)
        np.testing.assert_allclose(weighted.predict(queries), expected, rtol=1e-5, atol=1e-6)
    assert str(caught[0].message) == str(again[0].message)
    kept = weights > 0  # (the estimator hands its criterion the rows of positive weight)
    for criterion in ("loo", "gcv"):
        a = Criterion(
            X[kept], y[kept, None], weights[kept].astype(float), "gaussian", degree, criterion
        )
        b = Criterion(
            X.repeat(weights, axis=0),
            y.repeat(weights)[:, None],
            np.ones(weights.sum()),
            "gaussian",
            degree,
            criterion,
        )
        h = np.log([0.2, 0.25])
        np.testing.assert_allclose(a.loss_and_grad(h)[0], b.loss_and_grad(h)[0], rtol=1e-9)


def test_local_design_warning_is_a_filterable_bandwidth_warning():
    import kernattn

    assert kernattn.LocalDesignWarning is LocalDesignWarning
    assert issubclass(LocalDesignWarning, BandwidthWarning)
    X = np.linspace(0, 1, 30)[:, None]
    model = KernelSmoother(bandwidth=0.05, degree=1).fit(X, X[:, 0])
    for category in (LocalDesignWarning, BandwidthWarning):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", category=category)
            model.predict([[5.0]])


def test_degree_auto_takes_the_degree_of_the_lower_criterion():
    rng = np.random.default_rng(8)
    X = rng.uniform(0, 1, size=(150, 1))
    # A trend to the edges: the local line wins.
    trend = 4 * X[:, 0] + 0.2 * rng.normal(size=150)
    auto = KernelSmoother(bandwidth="loo", degree="auto").fit(X, trend)
    linear = KernelSmoother(bandwidth="loo", degree=1).fit(X, trend)
    constant = KernelSmoother(bandwidth="loo", degree=0).fit(X, trend)
    assert auto.degree_ == 1 and linear.loo_error_ < constant.loo_error_
    np.testing.assert_allclose(auto.bandwidth_, linear.bandwidth_)
    np.testing.assert_allclose(auto.loo_error_, linear.loo_error_)
    np.testing.assert_allclose(auto.predict(X[:5]), linear.predict(X[:5]))
    # Steps: the local constant wins.
    steps = np.floor(8 * X[:, 0]) % 2 + 0.05 * rng.normal(size=150)
    auto = KernelSmoother(bandwidth="loo", degree="auto").fit(X, steps)
    linear = KernelSmoother(bandwidth="loo", degree=1).fit(X, steps)
    constant = KernelSmoother(bandwidth="loo", degree=0).fit(X, steps)
    expected = 0 if constant.loo_error_ <= linear.loo_error_ else 1
    assert auto.degree_ == expected
    # With a rule, the leave-one-out errors at its bandwidth decide.
    auto = KernelSmoother(degree="auto").fit(X, trend)
    assert auto.degree_ == 1
    for criterion in ("aic", "gcv"):
        auto = KernelSmoother(bandwidth=criterion, degree="auto").fit(X, trend)
        chosen = KernelSmoother(bandwidth=criterion, degree=auto.degree_).fit(X, trend)
        other = KernelSmoother(bandwidth=criterion, degree=1 - auto.degree_).fit(X, trend)
        assert chosen.criterion_ <= other.criterion_
        np.testing.assert_allclose(auto.criterion_, chosen.criterion_)


def test_degree_auto_without_a_continuous_feature_is_the_local_constant():
    X = np.column_stack([np.arange(60) % 3, np.arange(60) % 2]).astype(float)
    y = X[:, 0] + np.random.default_rng(9).normal(size=60)
    model = KernelSmoother(bandwidth="loo", degree="auto", categorical_features=[0, 1]).fit(X, y)
    assert model.degree_ == 0


@pytest.mark.parametrize("n", [1, 40])
def test_degree_auto_on_one_distinct_input_is_the_local_constant_quietly(n):
    # Leaving the one distinct input out leaves no key: there is nothing to compare, and
    # the comparison must not divide 0 by 0 (a RuntimeWarning would escape to the user).
    X = np.full((n, 2), 3.0)
    y = np.random.default_rng(10).normal(size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelSmoother(degree="auto").fit(X, y)
        mean, std = model.predict(X[:1] + 1.0, return_std=True)
    assert model.degree_ == 0
    np.testing.assert_allclose(mean, [y.mean()])
    np.testing.assert_allclose(std, [y.std()])


# ------------------------------------------------------------------------ numerics


def test_far_query_gets_nearest_target():
    X = np.array([[0.0], [1.0], [3.0]])
    y = np.array([1.0, 2.0, 7.0])
    for kernel in ["gaussian", "epanechnikov", "tricube"]:
        model = KernelSmoother(kernel=kernel, bandwidth=0.1).fit(X, y)
        np.testing.assert_allclose(model.predict([[1e4], [-50.0], [2.2]]), [7.0, 1.0, 7.0])


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tricube"])
def test_astronomically_far_query_still_gets_the_nearest_target(kernel):
    X = np.array([[0.0], [1.0], [3.0]])
    y = np.array([1.0, 2.0, 7.0])
    model = KernelSmoother(kernel=kernel, bandwidth=1e-3).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(model.predict([[1e300], [-1e300], [1e150]]), [7.0, 1.0, 7.0])


def test_far_query_between_exact_ties_gets_their_mean():
    X = np.array([[-1.0], [1.0], [1.0], [5.0]])
    y = np.array([0.0, 2.0, 4.0, 9.0])
    model = KernelSmoother(bandwidth=1e-3).fit(X, y)
    np.testing.assert_allclose(model.predict([[1.3]]), [3.0])
    np.testing.assert_allclose(
        KernelSmoother(kernel="epanechnikov", bandwidth=1e-3).fit(X, y).predict([[1.3]]), [3.0]
    )


def test_tiny_bandwidth_interpolates_the_training_targets(data):
    X, y, _ = data
    model = KernelSmoother(bandwidth=1e-6).fit(X, y)
    np.testing.assert_allclose(model.predict(X), y, rtol=1e-12)
    assert np.all(np.isfinite(model.predict(X + 0.5, return_std=True)))


def test_large_offsets_and_float32_keep_their_accuracy(data):
    X, y, queries = data
    expected = KernelSmoother(bandwidth=0.3).fit(X, y).predict(queries)
    shifted = KernelSmoother(bandwidth=0.3).fit(X + 1e6, y).predict(queries + 1e6)
    np.testing.assert_allclose(shifted, expected, rtol=1e-7, atol=1e-8)


def test_float32_input_is_computed_and_returned_in_float32(data):
    X, y, queries = data
    X32, q32 = X.astype(np.float32), queries.astype(np.float32)
    reference = direct_nadaraya_watson(X32.astype(float), y, q32.astype(float), np.float64(0.3))
    model = KernelSmoother(bandwidth=0.3).fit(X32, y)
    assert model.predict(q32).dtype == np.float32
    assert model.predict(q32, return_std=True)[1].dtype == np.float32
    scale = np.abs(y).max()
    np.testing.assert_allclose(model.predict(q32), reference, rtol=1e-5, atol=1e-5 * scale)
    # float64 queries against a float32 fit are computed as the fit is.
    assert model.predict(queries).dtype == np.float32


@pytest.mark.filterwarnings(LOO_EDGE)
def test_constant_features_and_constant_target_work(data):
    X, y, queries = data
    Xc = np.column_stack([X, np.full(len(X), 4.0)])
    qc = np.column_stack([queries, np.full(len(queries), 9.0)])
    for bandwidth in ["scott", "silverman", "loo"]:
        model = KernelSmoother(bandwidth=bandwidth).fit(Xc, y)
        assert model.bandwidth_[-1] > 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reduced = KernelSmoother(bandwidth=model.bandwidth_[:3]).fit(X, y)
        np.testing.assert_allclose(model.predict(qc), reduced.predict(queries), rtol=1e-10)
    constant = KernelSmoother(bandwidth="loo").fit(X, np.full(len(X), 2.5))
    mean, std = constant.predict(queries, return_std=True)
    np.testing.assert_allclose(mean, 2.5)
    np.testing.assert_allclose(std, 0.0, atol=1e-12)


# ----------------------------------------------------------------- bandwidths


def test_rules_of_thumb_follow_their_formulas():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2)) * [1.0, 5.0]
    n, d = X.shape
    sigma = X.std(axis=0)
    np.testing.assert_allclose(rule_of_thumb_bandwidth(X, rule="scott"), sigma * n ** (-1 / 6))
    iqr = np.subtract(*np.percentile(X, [75, 25], axis=0, method="inverted_cdf"))
    expected = (
        (4 / (d + 2)) ** (1 / (d + 4)) * n ** (-1 / (d + 4)) * np.minimum(sigma, iqr / 1.349)
    )
    np.testing.assert_allclose(rule_of_thumb_bandwidth(X, rule="silverman"), expected)


@pytest.mark.filterwarnings(LOO_EDGE)
def test_integer_sample_weights_equal_repeated_rows(data):
    X, y, queries = data
    counts = np.random.default_rng(4).integers(0, 4, size=len(X))
    repeated = np.repeat(np.arange(len(X)), counts)
    for bandwidth in ["scott", "silverman", "loo"]:
        weighted = KernelSmoother(bandwidth=bandwidth).fit(X, y, sample_weight=counts)
        plain = KernelSmoother(bandwidth=bandwidth).fit(X[repeated], y[repeated])
        np.testing.assert_allclose(weighted.bandwidth_, plain.bandwidth_, rtol=1e-6)
        np.testing.assert_allclose(weighted.predict(queries), plain.predict(queries), rtol=1e-6)


def leave_one_out_error(X, y, h):
    logits = -0.5 * (((X[:, None, :] - X[None, :, :]) / h) ** 2).sum(axis=-1)
    np.fill_diagonal(logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return np.mean((y - weights @ y / weights.sum(axis=1)) ** 2)


def test_loo_bandwidth_minimizes_the_leave_one_out_error():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(300, 2))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=300)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    h = model.bandwidth_
    reached = leave_one_out_error(X, y, h)
    np.testing.assert_allclose(model.loo_error_, reached, rtol=1e-10)
    for factor in [0.8, 1.25]:
        for j in range(2):
            other = h.copy()
            other[j] *= factor
            assert leave_one_out_error(X, y, other) > reached
    # The target varies fast along x0 and slowly along x1: per-feature bandwidths differ,
    # and a single common multiple of Scott's bandwidths is clearly worse.
    assert h[1] > 3 * h[0]
    scott = rule_of_thumb_bandwidth(X)
    best_common = min(leave_one_out_error(X, y, c * scott) for c in np.geomspace(0.01, 10, 200))
    assert reached < 0.85 * best_common


@pytest.mark.parametrize("bandwidth", ["loo", "aic", "gcv"])
def test_selectors_report_an_irrelevant_coded_feature_without_warning(bandwidth):
    rng = np.random.default_rng(6)
    # Feature 1 is an integer code the target ignores: a small bandwidth on it is a flat
    # plateau (gaps of 1 between codes), which the search must leave.
    X = np.column_stack([rng.uniform(-1, 1, size=150), rng.integers(0, 3, size=150)])
    y = np.sin(3 * X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelSmoother(bandwidth=bandwidth).fit(X, y)
    assert model.bandwidth_[1] > 100 and model.bandwidth_[0] < 0.1
    np.testing.assert_array_equal(model.irrelevant_features_, [False, True])


@pytest.mark.parametrize("bandwidth", ["loo", "aic", "gcv"])
@pytest.mark.parametrize("degree", [0, 1])
def test_selected_bandwidths_do_not_depend_on_the_units(bandwidth, degree):
    # 80 rows: on 40, the leave-one-out criterion of the local lines, some of whose
    # extreme rows are held back, can have two local minima, and the rounding of another
    # unit can send the search to the other one.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(80, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=80)
    reference = KernelSmoother(bandwidth=bandwidth, degree=degree).fit(X, y)
    for c in (1e-3, 7.0, 1e4):
        model = KernelSmoother(bandwidth=bandwidth, degree=degree).fit(X, y * c)
        np.testing.assert_allclose(model.bandwidth_, reference.bandwidth_, rtol=1e-5)
        model = KernelSmoother(bandwidth=bandwidth, degree=degree).fit(X * c, y)
        np.testing.assert_allclose(model.bandwidth_, reference.bandwidth_ * c, rtol=1e-5)


def test_a_bandwidth_on_the_lower_edge_warns_once_naming_the_edge_and_feature():
    rng = np.random.default_rng(3)
    # Pairs of inputs 1e-7 apart with the same target, unrelated between pairs: each target
    # is best predicted from its twin, with a bandwidth far below Scott's.
    centers = rng.uniform(0, 1, size=30)
    X = np.column_stack([np.r_[centers, centers + 1e-7], rng.uniform(0, 1, size=60)])
    y = np.tile(rng.normal(size=30), 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = KernelSmoother(bandwidth="loo").fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, BandwidthWarning)]
    assert len(messages) == 1, messages
    assert (
        "feature(s) [0] ended on the edge of the search range, at its lower end" in (messages[0])
    )
    assert not model.irrelevant_features_[0]


def test_irrelevant_features_do_not_warn_in_a_grid_search(data):
    X, y, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Held-out queries in the corners of the cube are held back by the local lines,
        # and said so: not the subject here.
        warnings.simplefilter("ignore", LocalDesignWarning)
        search = GridSearchCV(
            KernelSmoother(bandwidth="loo"), {"degree": [0, 1]}, cv=3, error_score="raise"
        ).fit(X, y)
    # The data's third feature does not enter y.
    assert search.best_estimator_.irrelevant_features_[2]


def statsmodels_aic_case():
    """statsmodels' ``test_continuous_lc_aic`` data."""
    rs = np.random.RandomState(1234)
    C1 = rs.normal(size=200)
    C2 = rs.normal(2, 1, size=200)
    noise = rs.normal(size=200)
    return np.column_stack([C1, C2]), 0.3 + 1.2 * C1 - 0.9 * C2 + noise


def test_aic_bandwidth_matches_statsmodels_local_constant_aic():
    X, y = statsmodels_aic_case()
    model = KernelSmoother(bandwidth="aic").fit(X, y)
    # statsmodels KernelReg(reg_type="lc", bw="aic") gives [0.3987821, 0.50933458]
    # (R's np: [0.4017893, 0.4943397]).
    np.testing.assert_allclose(model.bandwidth_, [0.3987821, 0.50933458], rtol=1e-3)


@pytest.mark.parametrize("bandwidth", ["aic", "gcv"])
@pytest.mark.parametrize("degree", [0, 1])
def test_aic_and_gcv_report_their_criterion_and_the_trace(bandwidth, degree):
    X, y = statsmodels_aic_case()
    model = KernelSmoother(bandwidth=bandwidth, degree=degree).fit(X, y)
    S = model.attention_weights(X)
    n, trace = len(y), np.trace(S)
    sigma2 = np.mean((y - S @ y) ** 2)
    if bandwidth == "aic":
        expected = np.log(sigma2) + (1 + trace / n) / (1 - (trace + 2) / n)
    else:
        expected = sigma2 / (1 - trace / n) ** 2
    np.testing.assert_allclose(model.criterion_, expected, rtol=1e-9)
    np.testing.assert_allclose(model.effective_dof_, trace, rtol=1e-9)
    assert not hasattr(model, "loo_error_")
    # A local bandwidth a little off either way is worse.
    for j in range(2):
        for factor in (0.9, 1.1):
            if model.irrelevant_features_[j] and factor > 1:
                continue
            h = model.bandwidth_.copy()
            h[j] *= factor
            other = KernelSmoother(bandwidth=h, degree=degree).fit(X, y).attention_weights(X)
            sigma2 = np.mean((y - other @ y) ** 2)
            t = np.trace(other)
            if bandwidth == "aic":
                value = np.log(sigma2) + (1 + t / n) / (1 - (t + 2) / n)
            else:
                value = sigma2 / (1 - t / n) ** 2
            assert value > model.criterion_


@pytest.fixture
def small_stages(monkeypatch):
    """The staged search of large training sets, at the sizes of a unit test."""
    import kernattn.bandwidth._search as bandwidth_module

    monkeypatch.setattr(bandwidth_module, "_EXACT_ROWS", 300)
    monkeypatch.setattr(bandwidth_module, "_FIRST_SUBSET", 150)
    monkeypatch.setattr(bandwidth_module, "_LAST_SUBSET", 600)


@pytest.mark.parametrize("degree", [0, 1])
def test_loo_search_on_query_subsets_reaches_the_exact_searchs_error(small_stages, degree):
    rng = np.random.default_rng(8)
    X = rng.uniform(-1, 1, size=(1200, 2))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=1200)
    staged = KernelSmoother(bandwidth="loo", degree=degree, random_state=0).fit(X, y)

    def exact_loo_error(bandwidth):
        # From the smoother matrix: the mean squared deleted residual.
        S = KernelSmoother(bandwidth=bandwidth, degree=degree).fit(X, y).attention_weights(X)
        return np.mean(((y - S @ y) / (1 - np.diag(S))) ** 2)

    reached = exact_loo_error(staged.bandwidth_)
    scott = rule_of_thumb_bandwidth(X)
    common = min(exact_loo_error(c * scott) for c in np.geomspace(0.1, 3, 12))
    # No worse than the best common factor of Scott's bandwidths (within the noise of a
    # criterion estimated from a few hundred queries); the per-feature search is better.
    assert reached < 1.02 * common
    # loo_error_ is the last stage's unbiased estimate (600 of 1 200 queries).
    np.testing.assert_allclose(staged.loo_error_, reached, rtol=0.15)
    again = KernelSmoother(bandwidth="loo", degree=degree, random_state=0).fit(X, y)
    np.testing.assert_array_equal(again.bandwidth_, staged.bandwidth_)


def test_verbose_search_prints_its_progress(small_stages, capsys):
    rng = np.random.default_rng(9)
    X = rng.uniform(-1, 1, size=(800, 1))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=800)
    KernelSmoother(bandwidth="loo", verbose=1, random_state=0).fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    assert any("150 queries: grid of common factors" in line for line in lines)
    assert any("600 queries: criterion" in line for line in lines)
    KernelSmoother(bandwidth="gcv", verbose=0, random_state=0).fit(X, y)
    assert capsys.readouterr().out == ""


def test_loo_needs_two_distinct_samples():
    with pytest.raises(ValueError, match="at least 2 samples"):
        KernelSmoother(bandwidth="loo").fit([[1.0]], [2.0])
    with pytest.raises(ValueError, match="2 distinct training inputs"):
        KernelSmoother(bandwidth="loo").fit([[1.0], [1.0], [1.0]], [2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="at least 2 samples"):
        loo_bandwidth(np.ones((1, 2)), np.ones(1))


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "bandwidth", [0.0, -1.0, np.nan, np.inf, "nope", [1.0, 2.0], [1.0, -1.0, 1.0], "SCOTT"]
)
def test_bad_bandwidth_gets_a_message_listing_the_options(data, bandwidth):
    X, y, _ = data
    with pytest.raises(ValueError, match="bandwidth.* must be .*'scott'"):
        KernelSmoother(bandwidth=bandwidth).fit(X, y)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"kernel": "box"}, "'kernel' parameter .* must be a str among"),
        ({"degree": -1}, "'degree' parameter .* must be an int in the range \\[0, inf\\)"),
        ({"degree": 3}, "degree must be an int from 0 to 2 with 3 features"),
        ({"degree": True}, "'degree' parameter"),
        ({"n_jobs": 0}, "n_jobs"),
        ({"n_jobs": 1.5}, "'n_jobs' parameter"),
    ],
)
def test_bad_parameters_are_rejected(data, params, match):
    X, y, _ = data
    with pytest.raises(ValueError, match=match):
        KernelSmoother(**params).fit(X, y)


def test_failed_fit_leaves_an_earlier_fit_intact(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.5).fit(X, y)
    before = model.predict(queries)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(np.full_like(X, np.nan), y)
    model.set_params(bandwidth=-1.0)
    with pytest.raises(ValueError, match="bandwidth.* must be"):
        model.fit(X[:50], y[:50])
    np.testing.assert_array_equal(model.predict(queries), before)
    assert len(model.X_fit_) == len(X)


def test_wrong_feature_count_in_predict_is_rejected(data):
    X, y, _ = data
    model = KernelSmoother().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.ones((2, 2)))


# ------------------------------------------------------------ scikit-learn use


@pytest.mark.filterwarnings(LOO_EDGE)
def test_pipeline_grid_search_cross_validation_clone_and_pickle(data):
    X, y, queries = data
    pipeline = make_pipeline(StandardScaler(), KernelSmoother())
    scores = cross_val_score(pipeline, X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.3)
    search = GridSearchCV(KernelSmoother(), {"bandwidth": [0.05, 0.3, 3.0]}, cv=3).fit(X, y)
    assert search.best_params_["bandwidth"] == 0.3
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and not hasattr(copy, "bandwidth_")
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict(queries), model.predict(queries))


@pytest.mark.parametrize("bandwidth", ["aic", "gcv"])
def test_integer_weights_equal_repeated_rows_for_local_lines_under_the_dof_cap(bandwidth):
    # The cap on tr(S) (half the rows) counts an integer weight as that many rows.
    rng = np.random.default_rng(11)
    X = rng.uniform(size=(60, 1))
    y = np.sin(6 * X[:, 0]) + 0.3 * rng.normal(size=60)
    counts = rng.integers(1, 4, size=60)
    rows = np.repeat(np.arange(60), counts)
    for degree in (1, 2):
        weighted = KernelSmoother(bandwidth=bandwidth, degree=degree, algorithm="exact")
        weighted.fit(X, y, sample_weight=counts)
        plain = KernelSmoother(bandwidth=bandwidth, degree=degree, algorithm="exact")
        plain.fit(X[rows], y[rows])
        np.testing.assert_allclose(weighted.bandwidth_, plain.bandwidth_, rtol=1e-4)


@pytest.mark.parametrize("algorithm", ["exact", "binned"])
@pytest.mark.parametrize("scale", [0.1, 1e-2, 1e-6, 1e-300])
def test_weights_below_one_observation_give_the_local_constant_not_nan(algorithm, scale):
    # Precision weights below 1 can put even the local constant's variance factor above
    # the bound of the held-back rule: those queries get the local constant.
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(150, 1))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.normal(size=150)
    weights = rng.integers(1, 4, size=150) * scale
    queries = np.linspace(0, 1, 50)[:, None]
    for degree in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LocalDesignWarning)
            model = KernelSmoother(bandwidth=0.01, degree=degree, algorithm=algorithm)
            mean, std = model.fit(X, y, sample_weight=weights).predict(queries, return_std=True)
        assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
        constant = KernelSmoother(bandwidth=0.01, algorithm=algorithm).fit(X, y, weights)
        assert np.all(np.abs(mean) <= np.abs(y).max())
        if scale <= 1e-6:
            # Every query held back: the exact local constant (the binned one within the
            # binning error).
            atol = 1e-9 if algorithm == "exact" else constant.binning_error_ * np.ptp(y)
            np.testing.assert_allclose(mean, constant.predict(queries), atol=atol)
