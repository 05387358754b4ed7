"""significance_test (kernattn.smoother._significance): the statistic against its definition, small
p-values for a relevant feature, the result's fields, reproducibility, the two ways of
evaluating the replicates, and bad input. Size and power over many simulated data sets are
in examples/benchmarks/bench_significance.py."""

import numpy as np
import pytest
from sklearn import config_context

from kernattn import AttentionRegressor, KernelSmoother
from kernattn.smoother._significance import SignificanceResult, significance_test


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(80, 3))
    y = np.sin(3 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=80)
    return X, y


def partial_effect_statistic(model, X, features, step=1e-4):
    """I = mean_i Σ_f (s_f ∂ŷ/∂x_f)², by central differences of predict."""
    total = 0.0
    for f in features:
        h = step * model.bandwidth_[f]
        up, down = X.copy(), X.copy()
        up[:, f] += h
        down[:, f] -= h
        effect = (model.predict(up) - model.predict(down)) / (2 * h) * X[:, f].std()
        total += np.mean(effect**2)
    return total


@pytest.mark.parametrize("degree", [0, 1])
def test_relevant_feature_gets_a_small_pvalue_and_the_statistic_is_its_definition(data, degree):
    X, y = data
    smoother = KernelSmoother(bandwidth=[0.25, 0.5, 0.6], degree=degree)
    result = significance_test(smoother, X, y, 0, n_bootstrap=49, random_state=0)
    assert result.pvalue == pytest.approx(1 / 50)
    fitted = KernelSmoother(bandwidth=[0.25, 0.5, 0.6], degree=degree).fit(X, y)
    assert result.statistic == pytest.approx(partial_effect_statistic(fitted, X, [0]), rel=1e-6)
    group = significance_test(smoother, X, y, [1, 2], n_bootstrap=49, random_state=0)
    expected = partial_effect_statistic(fitted, X, [1, 2])
    assert group.statistic == pytest.approx(expected, rel=1e-6)
    assert group.pvalue <= 0.05


def test_result_fields_and_pvalue_formula(data):
    X, y = data
    smoother = KernelSmoother(bandwidth="loo")
    result = significance_test(smoother, X, y, [2], n_bootstrap=30, method="iid", random_state=1)
    assert isinstance(result, SignificanceResult)
    assert result.features == (2,) and result.method == "iid"
    assert result.null_distribution.shape == (30,)
    exceed = np.count_nonzero(result.null_distribution >= result.statistic)
    assert result.pvalue == pytest.approx((1 + exceed) / 31)
    np.testing.assert_allclose(result.bandwidth, smoother.fit(X, y).bandwidth_)
    with pytest.raises(AttributeError):
        result.pvalue = 0.5  # frozen


def test_features_as_mask_or_indices_give_the_same_test(data):
    X, y = data
    smoother = KernelSmoother(bandwidth=0.4)
    by_index = significance_test(smoother, X, y, [2, 1], n_bootstrap=20, random_state=3)
    by_mask = significance_test(
        smoother, X, y, np.array([False, True, True]), n_bootstrap=20, random_state=3
    )
    assert by_index.features == by_mask.features == (1, 2)
    np.testing.assert_array_equal(by_index.null_distribution, by_mask.null_distribution)


def test_same_seed_same_result_other_seed_other_draws(data):
    X, y = data
    smoother = KernelSmoother(bandwidth=0.4, degree=1)
    first = significance_test(smoother, X, y, 2, n_bootstrap=25, random_state=7)
    second = significance_test(smoother, X, y, 2, n_bootstrap=25, random_state=7)
    other = significance_test(smoother, X, y, 2, n_bootstrap=25, random_state=8)
    np.testing.assert_array_equal(first.null_distribution, second.null_distribution)
    assert first.pvalue == second.pvalue and first.statistic == other.statistic
    assert not np.array_equal(first.null_distribution, other.null_distribution)


def test_estimator_is_left_untouched(data):
    X, y = data
    smoother = KernelSmoother(bandwidth="scott", degree=1)
    params = smoother.get_params()
    significance_test(smoother, X, y, 0, n_bootstrap=5, random_state=0)
    assert smoother.get_params() == params
    assert not hasattr(smoother, "bandwidth_")


@pytest.mark.parametrize("method", ["wild", "iid"])
def test_replicates_fitted_as_outputs_equal_the_smoother_matrix_products(data, method):
    """Below working_memory the derivative matrices are built once; above it the replicates
    are fitted as the columns of multi-output targets: the same test."""
    X, y = data
    smoother = KernelSmoother(bandwidth=[0.3, 0.5, 0.6], degree=1)
    by_matrix = significance_test(
        smoother, X, y, [1, 2], n_bootstrap=70, method=method, random_state=4
    )
    with config_context(working_memory=0.01):
        by_refit = significance_test(
            smoother, X, y, [1, 2], n_bootstrap=70, method=method, random_state=4
        )
    assert by_refit.statistic == pytest.approx(by_matrix.statistic, rel=1e-8)
    np.testing.assert_allclose(by_refit.null_distribution, by_matrix.null_distribution, rtol=1e-7)
    assert by_refit.pvalue == by_matrix.pvalue


def test_every_feature_tested_uses_the_mean_as_null_model(data):
    X, y = data
    result = significance_test(KernelSmoother(bandwidth=0.4), X, y, [0, 1, 2], n_bootstrap=20)
    assert result.features == (0, 1, 2) and result.pvalue <= 0.05


def test_discrete_features_may_be_among_the_others(data):
    X, y = data
    X = X.copy()
    X[:, 2] = (X[:, 2] > 0).astype(float)
    smoother = KernelSmoother(bandwidth=[0.3, 0.5, 0.2], categorical_features=[2])
    result = significance_test(smoother, X, y, 0, n_bootstrap=20, random_state=0)
    assert result.pvalue <= 0.1 and np.isfinite(result.statistic)
    mask = KernelSmoother(bandwidth=[0.3, 0.5, 0.2], ordinal_features=[False, False, True])
    assert np.isfinite(significance_test(mask, X, y, [0, 1], n_bootstrap=5).statistic)


def test_bad_input_is_named(data):
    X, y = data
    smoother = KernelSmoother(bandwidth=0.4)
    with pytest.raises(TypeError, match="KernelSmoother"):
        significance_test(AttentionRegressor(), X, y, 0)
    for features in (3, -1, [], [0, 0], [0.5], np.array([True, False]), "x0", [[0, 1]]):
        with pytest.raises(ValueError, match="features must be"):
            significance_test(smoother, X, y, features)
    for n_bootstrap in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="n_bootstrap must be a positive int"):
            significance_test(smoother, X, y, 0, n_bootstrap=n_bootstrap)
    for method in ("pairs", None, "WILD"):
        with pytest.raises(ValueError, match="method must be one of 'wild', 'iid'"):
            significance_test(smoother, X, y, 0, method=method)
    with pytest.raises(ValueError, match="y"):
        significance_test(smoother, X, np.column_stack([y, y]), 0)
    categorical = KernelSmoother(bandwidth=0.4, categorical_features=[1])
    with pytest.raises(ValueError, match=r"continuous features only; feature\(s\) \[1\]"):
        significance_test(categorical, X, y, [0, 1])
    from_dtype = KernelSmoother(bandwidth=0.4, ordinal_features="from_dtype")
    with pytest.raises(ValueError, match="ordinal_features as feature indices"):
        significance_test(from_dtype, X, y, 0)
