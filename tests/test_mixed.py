"""KernelSmoother with categorical and ordinal features: the product kernel of R np against a
direct formula, R's leave-one-out bandwidth, statsmodels' KernelReg, and bad input."""

import warnings

import numpy as np
import pytest
from scipy.stats import norm

from kernattn import KernelSmoother

# GDP per capita of Italy's regions, 1951–1953 (the first 50 rows of R np's ``Italy``).
ITALY_GDP = [
    8.556, 12.262, 9.587, 8.119, 5.537, 6.796, 8.638, 6.483, 6.212, 5.111,
    6.001, 7.027, 4.616, 3.922, 4.688, 3.957, 3.159, 3.763, 3.829, 5.242,
    6.275, 8.518, 11.542, 9.348, 8.02, 5.527, 6.865, 8.666, 6.672, 6.289,
    5.286, 6.271, 7.94, 4.72, 4.357, 4.672, 3.883, 3.065, 3.489, 3.635,
    5.443, 6.302, 9.054, 12.485, 9.896, 8.33, 6.161, 7.055, 8.717, 6.95,
]  # fmt: skip
ITALY_YEAR = [1951] * 21 + [1952] * 21 + [1953] * 8


def product_kernel(X, queries, bandwidth, kinds):
    """Direct reference: Gaussian × Aitchison–Aitken × Wang–van Ryzin, as in R np."""
    K = np.ones((len(queries), len(X)))
    for j, kind in enumerate(kinds):
        d = queries[:, j, None] - X[None, :, j]
        lam = bandwidth[j]
        if kind == "c":
            K *= np.exp(-0.5 * (d / lam) ** 2)
        elif kind == "u":
            c = len(np.unique(X[:, j]))
            K *= np.where(d == 0, 1 - lam, lam / (c - 1))
        else:
            K *= np.where(d == 0, 1 - lam, 0.5 * (1 - lam) * lam ** np.abs(d))
    return K / K.sum(axis=1, keepdims=True)


@pytest.fixture
def mixed():
    rng = np.random.RandomState(1234)
    n = 100
    ordinal = rng.binomial(2, 0.5, size=n)
    category = rng.randint(0, 3, size=n)
    c1, c2 = rng.normal(size=n), rng.normal(2, 1, size=n)
    y = 1.2 * c1 + 3.7 * c2 + 2.3 * ordinal + np.array([0, 1, -1])[category]
    y = y + rng.normal(size=n)
    X = np.column_stack([c1, c2, ordinal, category]).astype(float)
    return X, y


def mixed_smoother(bandwidth):
    return KernelSmoother(bandwidth=bandwidth, ordinal_features=[2], categorical_features=[3])


def test_fixed_bandwidths_give_the_product_kernel_estimate(mixed):
    X, y = mixed
    bandwidth = np.array([0.5, 0.8, 0.3, 0.2])
    model = mixed_smoother(bandwidth).fit(X, y)
    # Training points, an ordinal value between two levels, and an unseen category.
    queries = np.vstack([X[:10], [[0.1, 2.0, 1.5, 2.0], [0.1, 2.0, 1.0, 7.0]]])
    W = product_kernel(X, queries, bandwidth, "ccou")
    np.testing.assert_allclose(model.attention_weights(queries), W, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(model.predict(queries), W @ y, rtol=1e-12)


def test_unseen_category_and_top_lambda_leave_the_feature_out(mixed):
    X, y = mixed
    queries = np.array([[0.1, 2.0, 1.0, 7.0]])  # category 7 never seen
    without = KernelSmoother(bandwidth=[0.5, 0.8, 0.3], ordinal_features=[2]).fit(X[:, :3], y)
    model = mixed_smoother([0.5, 0.8, 0.3, 0.2]).fit(X, y)
    np.testing.assert_allclose(model.predict(queries), without.predict(queries[:, :3]))
    # λ = (c − 1)/c: every category weighs the same, as if the feature were not there.
    smoothed_away = mixed_smoother([0.5, 0.8, 0.3, 2 / 3]).fit(X, y)
    np.testing.assert_allclose(smoothed_away.predict(X[:5]), without.predict(X[:5, :3]))


def test_loo_finds_r_np_bandwidth_on_the_italy_data():
    """R: ``npregbw(gdp[1:50] ~ ordered(year[1:50]))`` gives λ = 0.1390096 and a fitted
    mean of 6.190486 for 1951 (statsmodels' test_ordered_lc_cvls)."""
    year = np.array(ITALY_YEAR, dtype=float)[:, None]
    gdp = np.array(ITALY_GDP)
    model = KernelSmoother(bandwidth="loo", ordinal_features=[0]).fit(year, gdp)
    np.testing.assert_allclose(model.bandwidth_, [0.1390096], atol=1e-6)
    np.testing.assert_allclose(model.predict(year[:5]), 6.190486, atol=1e-6)
    # Only the row itself is left out (the other rows of its year are its neighbours).
    W = product_kernel(year, year, model.bandwidth_, "o")
    np.fill_diagonal(W, 0.0)
    W /= W.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.loo_error_, np.mean((gdp - W @ gdp) ** 2), rtol=1e-10)


def test_loo_minimizes_the_mixed_leave_one_out_error(mixed):
    X, y = mixed
    model = mixed_smoother("loo").fit(X, y)
    lam = model.bandwidth_[2:]
    assert 0 <= lam[0] <= 1 and 0 <= lam[1] <= 2 / 3

    def loo(bandwidth):
        W = product_kernel(X, X, bandwidth, "ccou")
        np.fill_diagonal(W, 0.0)
        W /= W.sum(axis=1, keepdims=True)
        return np.mean((y - W @ y) ** 2)

    best = loo(model.bandwidth_)
    np.testing.assert_allclose(model.loo_error_, best, rtol=1e-10)
    for j in range(4):
        for step in (0.97, 1.03):
            moved = model.bandwidth_.copy()
            moved[j] *= step
            assert loo(moved) >= best - 1e-9


def test_mixed_estimates_and_loo_match_statsmodels(mixed):
    kernel_regression = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    X, y = mixed
    bandwidth = np.array([0.5, 0.8, 0.3, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        reference = kernel_regression.KernelReg(y, X, var_type="ccou", reg_type="lc", bw=bandwidth)
        queries = np.vstack([X[:10], [[0.1, 2.0, 1.5, 2.0], [0.1, 2.0, 1.0, 7.0]]])
        mean, _ = reference.fit(queries)
        np.testing.assert_allclose(mixed_smoother(bandwidth).fit(X, y).predict(queries), mean)
        # statsmodels' own cross-validation objective at the bandwidth found here.
        model = mixed_smoother("loo").fit(X, y)
        cv = reference.cv_loo(model.bandwidth_, reference._est_loc_constant)
    np.testing.assert_allclose(model.loo_error_, cv, rtol=1e-10)


def test_pandas_categoricals_from_dtype_equal_their_codes(mixed):
    pd = pytest.importorskip("pandas")
    X, y = mixed
    frame = pd.DataFrame(
        {
            "c1": X[:, 0],
            "c2": X[:, 1],
            "size": pd.Categorical.from_codes(X[:, 2].astype(int), ["S", "M", "L"], True),
            "color": pd.Categorical.from_codes(X[:, 3].astype(int), ["blue", "green", "red"]),
        }
    )
    bandwidth = [0.5, 0.8, 0.3, 0.2]
    model = KernelSmoother(
        bandwidth=bandwidth, categorical_features="from_dtype", ordinal_features="from_dtype"
    ).fit(frame, y)
    np.testing.assert_allclose(
        model.predict(frame.iloc[:10]), mixed_smoother(bandwidth).fit(X, y).predict(X[:10])
    )
    # A colour never seen in training is an unseen level, not an error.
    query = frame.iloc[:1].copy()
    query["color"] = pd.Categorical(["purple"])
    assert np.isfinite(model.predict(query)).all()


@pytest.mark.parametrize(
    "params, match",
    [
        ({"categorical_features": [3], "ordinal_features": [3]}, "both categorical and ordinal"),
        ({"categorical_features": [4]}, "indices outside"),
        ({"categorical_features": [True, False]}, "boolean mask must have one entry"),
        ({"categorical_features": [0.5]}, "array of feature indices"),
        ({"categorical_features": [3], "kernel": "tricube"}, "need kernel='gaussian'"),
        ({"categorical_features": [3], "bandwidth": [0.5, 0.8, 0.3, 0.9]}, "must be in"),
        ({"ordinal_features": [2], "bandwidth": [0.5, 0.8, 1.5, 0.2]}, "must be in"),
        ({"categorical_features": [3], "bandwidth": [0.5, 0.0, 0.3, 0.2]}, "h > 0"),
    ],
)
def test_bad_discrete_features_are_rejected(mixed, params, match):
    X, y = mixed
    with pytest.raises(ValueError, match=match):
        KernelSmoother(**params).fit(X, y)


def test_mask_and_negative_indices_select_the_same_features(mixed):
    X, y = mixed
    by_index = mixed_smoother([0.5, 0.8, 0.3, 0.2]).fit(X, y)
    by_mask = KernelSmoother(
        bandwidth=[0.5, 0.8, 0.3, 0.2],
        ordinal_features=[False, False, True, False],
        categorical_features=[-1],
    ).fit(X, y)
    np.testing.assert_array_equal(by_index.predict(X), by_mask.predict(X))


def test_rules_smooth_continuous_features_and_keep_levels_apart(mixed):
    X, y = mixed
    model = mixed_smoother("scott").fit(X, y)
    np.testing.assert_array_equal(model.bandwidth_[2:], [0.0, 0.0])
    assert np.all(model.bandwidth_[:2] > 0)


def test_intervals_and_continuous_marginal_effects_with_discrete_features(mixed):
    X, y = mixed
    model = mixed_smoother([0.5, 0.8, 0.3, 0.2]).fit(X, y)
    lower, upper = model.predict_interval(X[:5])
    assert np.all((lower < model.predict(X[:5])) & (model.predict(X[:5]) < upper))
    gradient = model.gradient(X[:5])
    step = 1e-6
    for j in range(2):
        e = np.eye(4)[j]
        finite = (model.predict(X[:5] + step * e) - model.predict(X[:5] - step * e)) / (2 * step)
        np.testing.assert_allclose(gradient[:, j], finite, rtol=1e-6, atol=1e-6)
    # A discrete feature has no derivative.
    assert np.all(np.isnan(gradient[:, 2:]))


def test_aic_and_effective_dof_of_a_mixed_fit_match_statsmodels(mixed):
    kernel_regression = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    X, y = mixed
    model = mixed_smoother("aic").fit(X, y)
    # tr(S) of the smoother matrix at the training points.
    np.testing.assert_allclose(model.effective_dof_, np.trace(model.attention_weights(X)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        reference = kernel_regression.KernelReg(
            y, X, var_type="ccou", reg_type="lc", bw=model.bandwidth_
        )
        aic = reference.aic_hurvich(model.bandwidth_)
    np.testing.assert_allclose(model.criterion_, aic, rtol=1e-10)


def test_a_category_the_target_ignores_is_smoothed_away_and_reported():
    rng = np.random.default_rng(0)
    x, category = rng.uniform(-1, 1, 150), rng.integers(0, 4, 150).astype(float)
    model = KernelSmoother(bandwidth="loo", categorical_features=[1])
    model.fit(np.column_stack([x, category]), np.sin(3 * x))
    np.testing.assert_array_equal(model.irrelevant_features_, [False, True])
    np.testing.assert_allclose(model.bandwidth_[1], 3 / 4, atol=1e-6)  # (c − 1)/c


def test_repeated_rows_with_a_continuous_feature_are_left_out_together(mixed):
    X, y = mixed
    model = mixed_smoother("loo").fit(X, y)
    twice = mixed_smoother("loo").fit(np.vstack([X, X]), np.concatenate([y, y]))
    weighted = mixed_smoother("loo").fit(X, y, sample_weight=np.full(len(X), 2.0))
    # The same search up to the optimizer's tolerance (λ of the ordinal sits in a flat
    # valley): the same leave-one-out error.
    for other in (twice, weighted):
        np.testing.assert_allclose(other.bandwidth_, model.bandwidth_, rtol=1e-3)
        np.testing.assert_allclose(other.loo_error_, model.loo_error_, rtol=1e-7)


def test_a_continuous_bandwidth_on_the_lower_edge_warns_once():
    from kernattn import BandwidthWarning

    rng = np.random.default_rng(3)
    # Pairs of inputs 1e-7 apart with the same target, unrelated between pairs: each target
    # is best predicted from its twin, with a bandwidth far below Scott's.
    centers = rng.uniform(0, 1, size=30)
    X = np.column_stack(
        [np.r_[centers, centers + 1e-7], rng.uniform(0, 1, size=60), rng.integers(0, 3, 60)]
    )
    y = np.tile(rng.normal(size=30), 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        KernelSmoother(bandwidth="loo", categorical_features=[2]).fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, BandwidthWarning)]
    assert len(messages) == 1 and "feature(s) [0]" in messages[0], messages


def local_linear_smoother_matrix(X, queries, bandwidth, kinds, leave_out=False):
    """Direct reference: at every query, weighted least squares with the product kernel's
    weights on a line in the continuous features (the levels enter through the weights
    only, as in R np's local-linear npreg); row i of the result gives the estimate's
    weights on the targets (with ``leave_out``, query i is training row i, left out)."""
    continuous = [j for j, kind in enumerate(kinds) if kind == "c"]
    W = product_kernel(X, queries, bandwidth, kinds)
    S = np.zeros_like(W)
    for i, query in enumerate(queries):
        w = W[i].copy()
        if leave_out:
            w[i] = 0.0
        design = np.column_stack([np.ones(len(X)), X[:, continuous] - query[continuous]])
        M = design.T @ (w[:, None] * design)
        S[i] = np.linalg.solve(M, design.T * w)[0]
    return S


def test_local_linear_is_the_weighted_line_in_the_continuous_features(mixed):
    X, y = mixed
    bandwidth = np.array([0.5, 0.8, 0.3, 0.2])
    model = mixed_smoother(bandwidth).set_params(degree=1).fit(X, y)
    # Training points, an ordinal value between two levels, and an unseen category.
    queries = np.vstack([X[:10], [[0.1, 2.0, 1.5, 2.0], [0.1, 2.0, 1.0, 7.0]]])
    S = local_linear_smoother_matrix(X, queries, bandwidth, "ccou")
    np.testing.assert_allclose(model.predict(queries), S @ y, rtol=1e-10)
    # The equivalent weights sum to 1 and may be negative.
    np.testing.assert_allclose(model.attention_weights(queries), S, atol=1e-10)
    # The marginal effects of the continuous features are the line's slopes (statsmodels'
    # and R np's convention); the discrete features have none.
    gradient = model.gradient(queries)
    continuous = [0, 1]
    for i, query in enumerate(queries):
        w = product_kernel(X, query[None], bandwidth, "ccou")[0]
        design = np.column_stack([np.ones(len(X)), X[:, continuous] - query[continuous]])
        beta = np.linalg.solve(design.T @ (w[:, None] * design), design.T @ (w * y))
        np.testing.assert_allclose(gradient[i, continuous], beta[1:], rtol=1e-8)
    assert np.all(np.isnan(gradient[:, 2:]))


def test_local_linear_with_levels_kept_apart_matches_statsmodels(mixed):
    kernel_regression = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    X, y = mixed
    # statsmodels puts the codes of the discrete features in its line too; with λ = 0 they
    # are constant among a query's neighbours and drop out (its pseudo-inverse), so there
    # both conventions give the line in the continuous features.
    bandwidth = np.array([0.5, 0.8, 0.0, 0.0])
    model = mixed_smoother(bandwidth).set_params(degree=1).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        reference = kernel_regression.KernelReg(y, X, var_type="ccou", reg_type="ll", bw=bandwidth)
        mean, effects = reference.fit(X[:10])
    np.testing.assert_allclose(model.predict(X[:10]), mean, rtol=1e-8)
    np.testing.assert_allclose(model.gradient(X[:10])[:, :2], effects[:, :2], rtol=1e-6)


@pytest.mark.parametrize("criterion", ["loo", "aic", "gcv"])
def test_local_linear_bandwidth_selection_with_discrete_features(mixed, criterion):
    X, y = mixed
    y = y + 2 * np.sin(2 * X[:, 0])  # curved in the first feature, linear in the second
    model = mixed_smoother(criterion).set_params(degree=1).fit(X, y)
    bandwidth = model.bandwidth_
    assert 0 <= bandwidth[2] <= 1 and 0 <= bandwidth[3] <= 2 / 3
    S = local_linear_smoother_matrix(X, X, bandwidth, "ccou")
    np.testing.assert_allclose(model.effective_dof_, np.trace(S), rtol=1e-8)
    if criterion != "loo":
        return

    def loo(bandwidth):
        deleted = local_linear_smoother_matrix(X, X, bandwidth, "ccou", leave_out=True)
        return np.mean((y - deleted @ y) ** 2)

    best = loo(bandwidth)
    np.testing.assert_allclose(model.loo_error_, best, rtol=1e-8)
    # The line follows the linear feature: the local-linear fit beats the local constant.
    assert model.loo_error_ < mixed_smoother("loo").fit(X, y).loo_error_
    # A minimum within the search range (which ends at 1000 times Scott's bandwidth for
    # the continuous features, where this line wants to be, and at the top of λ's range).
    top = [np.inf, np.inf, 1.0, 2 / 3]
    for j in range(4):
        for step in (0.97, 1.03):
            if step > 1 and (model.irrelevant_features_[j] or bandwidth[j] * step > top[j]):
                continue
            moved = bandwidth.copy()
            moved[j] *= step
            assert loo(moved) >= best - 1e-9


def test_local_linear_with_only_discrete_features_is_the_local_constant(mixed):
    X, y = mixed
    discrete = X[:, 2:]
    kinds = {"ordinal_features": [0], "categorical_features": [1]}
    linear = KernelSmoother(bandwidth="loo", degree=1, **kinds).fit(discrete, y)
    constant = KernelSmoother(bandwidth="loo", degree=0, **kinds).fit(discrete, y)
    np.testing.assert_array_equal(linear.bandwidth_, constant.bandwidth_)
    np.testing.assert_array_equal(linear.predict(discrete), constant.predict(discrete))


def test_local_linear_intervals_with_discrete_features_equal_the_direct_formula(mixed):
    X, y = mixed
    bandwidth = np.array([0.5, 0.8, 0.3, 0.2])
    model = mixed_smoother(bandwidth).set_params(degree=1).fit(X, y)
    queries = np.vstack([X[:5], [[0.1, 2.0, 1.5, 2.0]]])
    # The pooled noise: RSS over the residual degrees of freedom of the smoother matrix.
    S = local_linear_smoother_matrix(X, X, bandwidth, "ccou")
    sigma2 = np.sum((y - S @ y) ** 2) / (len(X) - 2 * np.trace(S) + np.trace(S.T @ S))
    L = local_linear_smoother_matrix(X, queries, bandwidth, "ccou")
    lower, upper = model.predict_interval(queries, noise="global")
    expected = 2 * norm.ppf(0.975) * np.sqrt(sigma2 * (L**2).sum(axis=1))
    np.testing.assert_allclose(upper - lower, expected, rtol=1e-8)
    np.testing.assert_allclose((upper + lower) / 2, L @ y, rtol=1e-10)


@pytest.mark.parametrize("exponent", [-1000, 1000])
def test_mixed_loo_bandwidths_ignore_the_scale_of_the_weights(mixed, exponent):
    X, y = mixed
    weights = np.random.default_rng(5).uniform(0.5, 2.0, size=len(X))
    plain = mixed_smoother("loo").fit(X, y, sample_weight=weights)
    scaled = mixed_smoother("loo").fit(X, y, sample_weight=np.ldexp(weights, exponent))
    # The same minimum, to the search's tolerance (it starts elsewhere: Scott's rule counts
    # the weights up to a mean of 2^±10 per row).
    np.testing.assert_allclose(scaled.bandwidth_, plain.bandwidth_, rtol=1e-3)


def test_mixed_aic_refuses_weights_that_count_too_few_observations(mixed):
    X, y = mixed
    with pytest.raises(ValueError, match="counts the sample weights as observations"):
        mixed_smoother("aic").fit(X, y, sample_weight=np.full(len(X), 1e-3))
