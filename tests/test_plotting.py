"""The figures: each function draws what it says on the Axes it returns."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from sklearn.linear_model import LinearRegression  # noqa: E402

from kernattn import ComparisonResult, KernelSmoother, plotting  # noqa: E402
from kernattn.datasets import curve_function, make_curve  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def curve():
    return make_curve(80, random_state=0)


def test_plot_fit_draws_data_truth_each_fit_and_std_band(curve):
    X, y, _ = curve
    smoother = KernelSmoother(bandwidth=0.3).fit(X, y)
    linear = LinearRegression().fit(X, y)
    fig, ax = plt.subplots()
    returned = plotting.plot_fit(
        {"smoother": smoother, "linear": linear}, X, y, truth=curve_function, n_grid=50, ax=ax
    )
    assert returned is ax
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["truth", "smoother", "linear"]
    grid = np.linspace(X.min(), X.max(), 50)[:, None]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), smoother.predict(grid))
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), curve_function(grid[:, 0]))
    # One band (the smoother has return_std, linear regression has not).
    assert len(ax.collections) == 2  # the data points and one band
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["data", "truth"]


def test_plot_fit_shades_only_the_named_bands_and_dashes_later_fits(curve):
    X, y, _ = curve
    models = {
        "wide": KernelSmoother(bandwidth=0.5).fit(X, y),
        "narrow": KernelSmoother(bandwidth=0.2).fit(X, y),
    }
    fig, ax = plt.subplots()
    plotting.plot_fit(models, X, y, show_std=["narrow"], ax=ax)
    assert len(ax.collections) == 2  # the data points and the narrow fit's band
    band = ax.collections[1].get_paths()[0].vertices[:, 1]
    grid = np.linspace(X.min(), X.max(), 400)[:, None]
    mean, std = models["narrow"].predict(grid, return_std=True)
    np.testing.assert_allclose(band.max(), (mean + std).max())
    assert [line.get_linestyle() for line in ax.get_lines()] == ["-", "--"]


def test_plot_fit_uses_current_axes_and_rejects_more_than_one_feature(curve):
    X, y, _ = curve
    ax = plotting.plot_fit(KernelSmoother().fit(X, y), X, y)
    assert ax is plt.gca()
    with pytest.raises(ValueError, match=r"X must have shape \(n, 1\)"):
        plotting.plot_fit([], np.ones((5, 2)), np.ones(5))


def test_plot_fit_needs_fitted_estimators(curve):
    from sklearn.exceptions import NotFittedError

    X, y, _ = curve
    with pytest.raises(NotFittedError):
        plotting.plot_fit([KernelSmoother()], X, y)


def test_plot_attention_shows_weights_sorted_by_x(curve):
    X, y, _ = curve
    order = np.random.RandomState(0).permutation(len(X))
    model = KernelSmoother(bandwidth=0.2).fit(X[order], y[order])
    queries = np.array([[4.0], [1.0], [2.5]])
    ax = plotting.plot_attention(model, queries, vmax=0.5)
    mesh = ax.collections[-1]
    image = np.asarray(mesh.get_array()).reshape(3, len(X))
    expected = model.attention_weights(queries)[[1, 2, 0]][:, np.argsort(X[order][:, 0])]
    np.testing.assert_allclose(image, expected)
    # Sorted: each query's heaviest training point moves right as the query moves right.
    assert np.all(np.diff(np.argmax(image, axis=1)) > 0)
    assert ax.get_title() == "KernelSmoother"
    assert mesh.get_clim() == (0, 0.5)
    # 1-D: the axes are the inputs; queries increase downwards.
    assert ax.get_ylim()[0] > ax.get_ylim()[1]
    assert ax.get_xlim()[0] < X.min() < X.max() < ax.get_xlim()[1]


def test_plot_attention_on_several_features_counts_rows():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 3))
    model = KernelSmoother().fit(X, X[:, 0])
    ax = plotting.plot_attention(model, X[:5], sort=False)
    np.testing.assert_allclose(
        np.asarray(ax.collections[-1].get_array()).reshape(5, 30), model.attention_weights(X[:5])
    )
    assert ax.get_xlabel() == "training point"
    # Sorted by a given projection: columns in the order of that projection of X_fit_.
    direction = np.array([0.0, 1.0, -1.0])
    ax = plt.figure().gca()
    plotting.plot_attention(model, X[:5], sort_by=lambda U: U @ direction, ax=ax)
    expected = model.attention_weights(X[:5])[np.argsort(X[:5] @ direction)]
    expected = expected[:, np.argsort(X @ direction)]
    np.testing.assert_allclose(np.asarray(ax.collections[-1].get_array()).reshape(5, 30), expected)
    assert ax.get_xlabel() == "training point (sorted)"
    # A pair sorts queries and keys differently.
    ax = plt.figure().gca()
    plotting.plot_attention(model, X[:5], sort_by=(lambda U: -U[:, 2], lambda U: U[:, 1]), ax=ax)
    expected = model.attention_weights(X[:5])[np.argsort(-X[:5, 2])][:, np.argsort(X[:, 1])]
    np.testing.assert_allclose(np.asarray(ax.collections[-1].get_array()).reshape(5, 30), expected)


def test_approximation_error_slope_band_and_reference():
    r = np.array([16, 64, 256, 1024])
    rng = np.random.RandomState(0)
    errors = 2.0 / np.sqrt(r)[:, None] * (1 + 0.05 * rng.normal(size=(4, 5)))
    ax = plotting.plot_approximation_error(r, {"positive": errors})
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    median = np.median(errors, axis=1)
    slope = np.polyfit(np.log(r), np.log(median), 1)[0]
    assert labels[0] == f"positive (slope {slope:.2f})"
    assert abs(slope + 0.5) < 0.05
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), median)
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), median[0] * np.sqrt(16 / r))
    assert len(ax.collections) == 1  # the band between the seeds' 10th and 90th percentiles
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() > 0  # drawable on the log axis, unlike mean − std
    np.testing.assert_allclose(band.min(), np.percentile(errors, 10, axis=1).min())


def test_runtime_slopes_skip_missing_sizes():
    n = np.array([1e3, 1e4, 1e5])
    ax = plotting.plot_runtime(n, {"linear": 1e-6 * n, "exact": np.array([1e-3, 1e-1, np.nan])})
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["linear (slope 1.00)", "exact (slope 2.00)"]


def test_runtime_draws_the_median_of_repeats_and_fits_slopes_from_a_size():
    n = np.array([1e3, 1e4, 1e5])
    # A fixed cost of 0.1 s flattens the small sizes; repeats spread by ±10 %.
    times = (0.1 + 1e-5 * n)[:, None] * np.array([0.9, 1.0, 1.1])
    ax = plotting.plot_runtime(n, {"linear": times}, slope_from=1e4)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), 0.1 + 1e-5 * n)
    slope = np.polyfit(np.log(n[1:]), np.log(0.1 + 1e-5 * n[1:]), 1)[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"linear (slope {slope:.2f})"]
    assert len(ax.collections) == 1  # the band from the fastest to the slowest repeat


def _result(values):
    result = ComparisonResult()
    for (task, estimator), r2 in values.items():
        scores = [{"mse": 1 - r2, "r2": r2, "fit_time": 0.1, "predict_time": 0.01}] * 2
        result.add(task, estimator, (10, 1), scores)
    return result


def test_comparison_bars_have_the_r2_heights_and_cut_very_bad_models():
    result = _result({("a", "x"): 0.9, ("a", "y"): 0.5, ("b", "x"): 0.7, ("b", "y"): -20.0})
    ax = plotting.plot_comparison(result)
    bars = ax.patches
    tops = [bar.get_y() + bar.get_height() for bar in bars]
    assert ax.get_ylim()[0] == -1.0
    np.testing.assert_allclose(tops, [0.9, 0.7, 0.5, -1.0])
    labels = [t for t in ax.texts if t.get_text() == "R² = -20"]
    assert len(labels) == 1 and labels[0].get_fontsize() >= 9
    assert bars[3].get_hatch() == "//" and "cut at -1" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a\n(n=10)", "b\n(n=10)"]


def test_comparison_axis_extends_to_a_moderately_negative_r2():
    result = _result({("a", "x"): 0.9, ("a", "y"): -0.7})
    ax = plotting.plot_comparison(result)
    tops = [bar.get_y() + bar.get_height() for bar in ax.patches]
    np.testing.assert_allclose(tops, [0.9, -0.7])
    assert ax.get_ylim()[0] < -0.7 and not ax.texts
    assert "cut" not in ax.get_ylabel()


def test_comparison_relative_mse_and_log_times():
    result = _result({("a", "x"): 0.9, ("a", "y"): 0.5})
    ax = plotting.plot_comparison(result, "mse")
    np.testing.assert_allclose([b.get_height() for b in ax.patches], [1.0, 5.0])
    ax = plotting.plot_comparison(result, "time", ax=plt.figure().gca())
    assert ax.get_yscale() == "log"
    # Points, not bars: a bar on a log axis has no meaningful base.
    assert not ax.patches
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["x", "y"]
    assert all(line.get_marker() == "o" and line.get_linestyle() == "None" for line in lines)
    np.testing.assert_allclose([line.get_ydata()[0] for line in lines], [0.11, 0.11])
    assert result.plot("fit_time").get_yscale() == "log"
    with pytest.raises(ValueError, match="metric must be one of 'r2'"):
        plotting.plot_comparison(result, "speed")


def test_plot_fit_names_a_list_by_class_and_keeps_duplicates(curve):
    X, y, _ = curve
    models = [KernelSmoother(bandwidth=0.2).fit(X, y), KernelSmoother(bandwidth=1.0).fit(X, y)]
    ax = plotting.plot_fit(models, X, y, show_std=False)
    assert [line.get_label() for line in ax.get_lines()] == ["KernelSmoother", "KernelSmoother-2"]
