"""KernelSmoother inference: confidence intervals and marginal effects against direct formulas,
finite differences, statsmodels, and a coverage simulation."""

import warnings

import numpy as np
import pytest
from scipy.stats import norm
from sklearn import config_context

from kernattn import KernelSmoother


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(80, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.2 * rng.normal(size=80)
    return X, y, rng.uniform(-0.8, 0.8, size=(15, 2))


def direct_variance(model, queries, noise):
    """Dense reference: S from ``attention_weights`` (the effective weights), residuals,
    the shrinkage factors δ, the noise estimate, and Σ_i l_i(x)² σ²(x_i)/s_i."""
    X, s = model.X_fit_, model.sample_weight_
    Y = model.y_fit_.reshape(len(X), -1)
    S = model.attention_weights(X)
    residual = Y - S @ Y
    delta = 1 - 2 * np.diag(S) + s * ((S**2) @ (1 / s))
    squared = s[:, None] * residual**2
    if noise == "global":
        sigma2 = np.broadcast_to(squared.sum(axis=0) / delta.sum(), Y.shape)
    else:
        K = KernelSmoother(kernel=model.kernel, bandwidth=model.bandwidth_).fit(X, Y, s)
        K = K.attention_weights(X)  # the non-negative kernel weights
        sigma2 = (K @ squared) / (K @ delta)[:, None]
    L = model.attention_weights(queries)
    return (L**2) @ (sigma2 / s[:, None]), sigma2


@pytest.mark.parametrize("degree", [0, 1])
@pytest.mark.parametrize("noise", ["local", "global"])
def test_analytic_interval_equals_the_direct_formula(data, degree, noise):
    X, y, queries = data
    sw = np.random.default_rng(1).uniform(0.5, 2.0, size=len(X))
    model = KernelSmoother(bandwidth=[0.2, 0.3], degree=degree).fit(X, y, sample_weight=sw)
    variance, _ = direct_variance(model, queries, noise)
    lower, upper = model.predict_interval(queries, alpha=0.1, noise=noise)
    half = norm.ppf(0.95) * np.sqrt(variance[:, 0])
    np.testing.assert_allclose(lower, model.predict(queries) - half, rtol=1e-10)
    np.testing.assert_allclose(upper, model.predict(queries) + half, rtol=1e-10)


def test_global_noise_is_rss_over_residual_degrees_of_freedom(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.25).fit(X, y)
    S = model.attention_weights(X)
    dof = len(X) - 2 * np.trace(S) + np.trace(S.T @ S)
    sigma2 = np.sum((y - S @ y) ** 2) / dof
    lower, upper = model.predict_interval(queries, noise="global")
    L = model.attention_weights(queries)
    expected = 2 * norm.ppf(0.975) * np.sqrt(sigma2 * (L**2).sum(axis=1))
    np.testing.assert_allclose(upper - lower, expected, rtol=1e-10)


def test_local_noise_follows_a_noise_level_that_changes_with_x():
    rng = np.random.default_rng(2)
    X = rng.uniform(0, 1, size=(600, 1))
    level = 0.05 + 0.5 * X[:, 0]
    y = X[:, 0] + level * rng.normal(size=600)
    model = KernelSmoother(bandwidth=0.05).fit(X, y)
    queries = np.array([[0.1], [0.9]])
    local = np.diff(model.predict_interval(queries), axis=0)[0]
    pooled = np.diff(model.predict_interval(queries, noise="global"), axis=0)[0]
    # The quiet end gets a narrower interval than the pooled estimate gives it, the loud
    # end a wider one; their ratio follows the noise level (0.1 against 0.5).
    assert local[0] < pooled[0] and local[1] > pooled[1]
    assert 3 < local[1] / local[0] < 7


def test_intervals_do_not_depend_on_the_scale_of_the_sample_weights(data):
    X, y, queries = data
    sw = np.random.default_rng(3).uniform(0.5, 2.0, size=len(X))
    one = KernelSmoother(bandwidth=0.3).fit(X, y, sample_weight=sw)
    other = KernelSmoother(bandwidth=0.3).fit(X, y, sample_weight=1e-3 * sw)
    for noise in ("local", "global"):
        np.testing.assert_allclose(
            one.predict_interval(queries, noise=noise),
            other.predict_interval(queries, noise=noise),
            rtol=1e-10,
        )


@pytest.mark.parametrize("degree", [0, 1])
def test_each_output_of_a_2d_target_gets_its_own_interval_and_gradient(data, degree):
    X, y, queries = data
    Y = np.column_stack([y, 100 * np.cos(2 * X[:, 1]) + np.random.default_rng(4).normal(size=80)])
    model = KernelSmoother(bandwidth=0.3, degree=degree).fit(X, Y)
    lower, upper = model.predict_interval(queries)
    boot = model.predict_interval(queries, method="bootstrap", n_bootstrap=200, random_state=0)
    gradient, gradient_std = model.gradient(queries, return_std=True)
    assert lower.shape == upper.shape == boot[0].shape == (15, 2)
    assert gradient.shape == gradient_std.shape == (15, 2, 2)
    for o in range(2):
        single = KernelSmoother(bandwidth=0.3, degree=degree).fit(X, Y[:, o])
        np.testing.assert_allclose(single.predict_interval(queries)[0], lower[:, o], rtol=1e-10)
        g, g_std = single.gradient(queries, return_std=True)
        np.testing.assert_allclose(g, gradient[:, :, o], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g_std, gradient_std[:, :, o], rtol=1e-10)


@pytest.mark.parametrize("noise", ["local", "global"])
def test_bootstrap_agrees_with_the_analytic_interval(data, noise):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.3).fit(X, y)
    lower, upper = model.predict_interval(queries, noise=noise)
    b_lower, b_upper = model.predict_interval(
        queries, method="bootstrap", noise=noise, n_bootstrap=4000, random_state=0
    )
    mean = model.predict(queries)
    assert np.all(b_lower < mean) and np.all(b_upper > mean)
    # The residual bootstrap has the pooled variance (up to Monte Carlo error); the wild
    # bootstrap's squared residuals are the unsmoothed version of the local estimate.
    tolerance = 0.1 if noise == "global" else 0.35
    np.testing.assert_allclose(b_upper - b_lower, upper - lower, rtol=tolerance)


def test_bootstrap_is_reproducible_and_independent_of_query_blocks(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.3, degree=1).fit(X, y)
    first = model.predict_interval(queries, method="bootstrap", n_bootstrap=300, random_state=7)
    with config_context(working_memory=0.001):  # one query per block
        again = model.predict_interval(
            queries, method="bootstrap", n_bootstrap=300, random_state=7
        )
    np.testing.assert_allclose(first, again, rtol=1e-12)
    other = model.predict_interval(queries, method="bootstrap", n_bootstrap=300, random_state=8)
    assert not np.array_equal(first, other)


def test_interpolating_fit_cannot_estimate_its_noise(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=1e-4).fit(X, y)
    for method in ("analytic", "bootstrap"):
        with pytest.raises(ValueError, match="reproduces its training targets"):
            model.predict_interval(queries, method=method)
        with pytest.raises(ValueError, match="reproduces its training targets"):
            model.gradient(queries, return_std=True)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"alpha": 0.0}, ValueError, "alpha must be a float in"),
        ({"alpha": 1.5}, ValueError, "alpha must be a float in"),
        ({"alpha": "0.05"}, ValueError, "alpha must be a float in"),
        ({"method": "jackknife"}, ValueError, "method must be one of 'analytic', 'bootstrap'"),
        ({"noise": "robust"}, ValueError, "noise must be one of 'local', 'global'"),
        ({"method": "bootstrap", "n_bootstrap": 0}, ValueError, "n_bootstrap must be"),
        ({"method": "bootstrap", "n_bootstrap": 10.0}, TypeError, "n_bootstrap must be"),
    ],
)
def test_bad_inference_options_are_rejected(data, kwargs, error, match):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.3).fit(X, y)
    with pytest.raises(error, match=match):
        model.predict_interval(queries, **kwargs)


def test_inference_needs_a_fit_and_the_right_feature_count(data):
    from sklearn.exceptions import NotFittedError

    X, y, queries = data
    with pytest.raises(NotFittedError):
        KernelSmoother().predict_interval(queries)
    with pytest.raises(NotFittedError):
        KernelSmoother().gradient(queries)
    model = KernelSmoother(bandwidth=0.3).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.gradient(queries[:, :1])
    with pytest.raises(ValueError, match="noise must be one of"):
        model.gradient(queries, return_std=True, noise="nope")


def test_float32_fit_gives_float32_intervals_and_gradients(data):
    X, y, queries = data
    model = KernelSmoother(bandwidth=0.3).fit(X.astype(np.float32), y.astype(np.float32))
    lower, upper = model.predict_interval(queries)
    assert lower.dtype == upper.dtype == model.gradient(queries).dtype == np.float32
    reference = KernelSmoother(bandwidth=0.3).fit(X, y)
    np.testing.assert_allclose(lower, reference.predict_interval(queries)[0], rtol=1e-4)


# ------------------------------------------------------------------- marginal effects


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "tricube"])
def test_local_constant_gradient_equals_finite_differences_of_predict(data, kernel):
    X, y, queries = data
    h = [0.3, 0.4] if kernel == "gaussian" else [0.8, 1.0]
    sw = np.random.default_rng(5).uniform(0.5, 2.0, size=len(X))
    model = KernelSmoother(kernel=kernel, bandwidth=h).fit(X, y, sample_weight=sw)
    step = 1e-6
    expected = np.column_stack(
        [
            (model.predict(queries + step * e) - model.predict(queries - step * e)) / (2 * step)
            for e in np.eye(2)
        ]
    )
    np.testing.assert_allclose(model.gradient(queries), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("degree", [0, 1])
def test_gradient_std_is_the_noise_weighted_norm_of_the_gradient_weights(data, degree):
    X, y, queries = data
    model = KernelSmoother(bandwidth=[0.3, 0.4], degree=degree).fit(X, y)
    _, sigma2 = direct_variance(model, queries, "local")
    if degree == 0:
        # ∂ŷ/∂x_j = Σ_i (∂w_i/∂x_j) y_i: the weights' derivative by central differences.
        step = 1e-6
        G = np.stack(
            [
                (
                    model.attention_weights(queries + step * e)
                    - model.attention_weights(queries - step * e)
                )
                / (2 * step)
                for e in np.eye(2)
            ],
            axis=1,
        )
    else:
        # The slope of the weighted least-squares line: rows 1.. of (DᵀWD)⁻¹DᵀW.
        K = KernelSmoother(bandwidth=[0.3, 0.4]).fit(X, y).attention_weights(queries)
        G = np.empty((len(queries), 2, len(X)))
        for m, (q, w) in enumerate(zip(queries, K, strict=True)):
            D = np.column_stack([np.ones(len(X)), X - q])
            G[m] = np.linalg.solve(D.T @ (w[:, None] * D), D.T * w)[1:]
    gradient, gradient_std = model.gradient(queries, return_std=True)
    np.testing.assert_allclose(gradient, G @ y, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gradient_std, np.sqrt((G**2) @ sigma2[:, 0]), rtol=1e-6)


def test_local_slope_of_a_linear_target_is_its_coefficients_everywhere():
    rng = np.random.default_rng(6)
    X = rng.uniform(-1, 1, size=(50, 3)) * [1.0, 1e3, 1e-3]
    y = X @ [2.0, -0.5e-3, 4e3] + 1.0
    model = KernelSmoother(bandwidth=[0.2, 200.0, 2e-4], degree=1).fit(X, y)
    queries = np.vstack([X[:5], [[1.5, 1.5e3, 1.5e-3]]])  # also one outside the data
    # Up to the local-linear fit's tiny ridge, felt where the neighbourhood is narrow.
    np.testing.assert_allclose(
        model.gradient(queries), np.tile([2.0, -0.5e-3, 4e3], (6, 1)), rtol=1e-6
    )


def test_local_slope_is_zero_along_directions_the_neighbourhood_does_not_span():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    y = np.array([0.0, 2.0, 4.0, 6.0])
    model = KernelSmoother(bandwidth=1.0, degree=1).fit(X, y)
    np.testing.assert_allclose(model.gradient([[1.5, 0.0], [1.0, 3.0]]), [[2, 0], [2, 0]])
    # One training point in the support: no slope at all, and no NaN.
    tight = KernelSmoother(kernel="epanechnikov", bandwidth=0.5, degree=1).fit(X, y**2)
    np.testing.assert_array_equal(tight.gradient([[1.0, 0.0]]), [[0.0, 0.0]])


# statsmodels 0.15 warns about its own random-state default through pandas.
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_local_linear_marginal_effects_match_statsmodels(data):
    kernel_regression = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    X, y, queries = data
    h = np.array([0.3, 0.4])
    mean, mfx = kernel_regression.KernelReg(y, X, var_type="cc", reg_type="ll", bw=h).fit(queries)
    model = KernelSmoother(bandwidth=h, degree=1).fit(X, y)
    np.testing.assert_allclose(model.predict(queries), mean, rtol=1e-10)
    np.testing.assert_allclose(model.gradient(queries), mfx, rtol=1e-10, atol=1e-12)


# statsmodels 0.15 warns about its own random-state default through pandas.
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_local_constant_marginal_effects_are_proportional_to_statsmodels(data):
    kernel_regression = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    X, y, queries = data
    X, queries = X[:, :1], queries[:, :1]
    mean, mfx = kernel_regression.KernelReg(y, X, var_type="c", reg_type="lc", bw=[0.2]).fit(
        queries
    )
    model = KernelSmoother(bandwidth=0.2).fit(X, y)
    np.testing.assert_allclose(model.predict(queries), mean, rtol=1e-10)
    # statsmodels 0.15's local-constant effect is 2/n times the derivative (its Gaussian
    # derivative carries a factor 2 and its derivative sums are divided by n, its level sums
    # not); the derivative itself is checked against finite differences above.
    np.testing.assert_allclose(model.gradient(queries)[:, 0], mfx.ravel() * len(X) / 2, rtol=1e-10)


# ----------------------------------------------------------------------- coverage


@pytest.mark.parametrize("degree", [0, 1])
def test_95_percent_intervals_cover_a_smooth_function_about_95_percent_of_the_time(degree):
    """Nominal 95 % → between 90 % and 99 % at interior points of a smooth function, at a
    bandwidth small enough for the bias to be small against the standard error."""
    rng = np.random.default_rng(8)
    n, replications = 300, 60
    X = np.sort(rng.uniform(0, 1, size=n))[:, None]
    queries = np.linspace(0.15, 0.85, 15)[:, None]
    truth = np.sin(2 * np.pi * queries[:, 0])
    covered = {"local": [], "global": []}
    for _ in range(replications):
        y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.normal(size=n)
        model = KernelSmoother(bandwidth=0.02, degree=degree).fit(X, y)
        for noise in covered:
            lower, upper = model.predict_interval(queries, noise=noise)
            covered[noise].append((lower <= truth) & (truth <= upper))
    for noise, hits in covered.items():
        assert 0.90 <= np.mean(hits) <= 0.99, (noise, np.mean(hits))


def test_named_features_pass_through_without_a_warning(data):
    pd = pytest.importorskip("pandas")
    X, y, queries = data
    frame = pd.DataFrame(X, columns=["a", "b"])
    model = KernelSmoother(bandwidth=0.3).fit(frame, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lower, _ = model.predict_interval(pd.DataFrame(queries, columns=["a", "b"]))
        gradient = model.gradient(pd.DataFrame(queries, columns=["a", "b"]))
    np.testing.assert_allclose(
        lower, KernelSmoother(bandwidth=0.3).fit(X, y).predict_interval(queries)[0]
    )
    assert gradient.shape == (15, 2)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov"])
@pytest.mark.parametrize("degree", [0, 1])
def test_far_queries_get_finite_intervals_and_marginal_effects(data, kernel, degree):
    X, y, _ = data
    model = KernelSmoother(kernel=kernel, bandwidth=0.5, degree=degree).fit(X, y)
    far = np.array([[1e300, 0.0], [-40.0, 3.0]])
    gradient, gradient_std = model.gradient(far, return_std=True)
    with warnings.catch_warnings():
        # A local line far out rests on too few points: the local constant, with a warning.
        warnings.simplefilter("ignore", UserWarning)
        lower, upper = model.predict_interval(far)
    for a in (gradient, gradient_std, lower, upper):
        assert np.all(np.isfinite(a))
    assert np.all(lower <= upper)
