"""Split conformal intervals: the absolute residuals of held-out rows given to ``calibrate``,
for every fit, including those that keep no rows (``partial_fit``, ``fit_chunks``) and dask
fits."""

import math
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor, fit_chunks
from kernattn.metrics import coverage_scorer, interval_width_scorer


def sine(n, seed=0, d=1):
    """A sine in the first of ``d`` inputs, noise sd 0.2."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    return X, np.sin(X[:, 0]) + 0.2 * rng.normal(size=n)


def streamed(X, y, chunk=300):
    """A LinearAttentionRegressor fed ``X, y`` by ``partial_fit``, ``chunk`` rows a call."""
    model = LinearAttentionRegressor(
        n_near_keys=0, n_components=128, bandwidth=0.3, random_state=0
    )
    for start in range(0, len(X), chunk):
        model.partial_fit(X[start : start + chunk], y[start : start + chunk])
    return model


def chunked(X, y, chunk=300):
    """A LinearAttentionRegressor fitted by ``fit_chunks`` on ``chunk`` rows a chunk."""
    chunks = [(X[s : s + chunk], y[s : s + chunk]) for s in range(0, len(X), chunk)]
    model = LinearAttentionRegressor(
        n_near_keys=0, n_components=128, bandwidth=0.3, random_state=0
    )
    return fit_chunks(model, chunks)


def half_width_by_hand(residuals, alpha, weight=None):
    """The ⌈(1 − α)(n + 1)⌉-th smallest residual, or with weights the smallest v whose
    weight at or below it reaches (1 − α)(Σ s + mean s); +∞ when none does."""
    order = np.argsort(residuals)
    if weight is None:
        k = math.ceil((1 - alpha) * (len(residuals) + 1) - 1e-9)
        return np.inf if k > len(residuals) else residuals[order][k - 1]
    cumulative = np.cumsum(weight[order])
    reached = cumulative >= (1 - alpha) * (weight.sum() + weight.mean()) - 1e-9
    return residuals[order][np.argmax(reached)] if reached.any() else np.inf


def test_split_interval_is_predict_plus_minus_the_ranked_held_out_residual():
    X, y = sine(339)
    model = KernelSmoother(bandwidth=0.2).fit(X[:300], y[:300]).calibrate(X[300:], y[300:])
    residuals = np.abs(y[300:] - model.predict(X[300:]))
    Q = np.linspace(-2, 2, 7)[:, None]
    for alpha in (0.1, 0.25, 0.5):
        lower, upper = model.conformal_interval(Q, alpha=alpha, method="split")
        half = half_width_by_hand(residuals, alpha)
        # 39 rows at alpha = 0.1: the 36th smallest of the 39.
        np.testing.assert_allclose(upper, model.predict(Q) + half, rtol=1e-12)
        np.testing.assert_allclose(lower, model.predict(Q) - half, rtol=1e-12)
    assert half_width_by_hand(residuals, 0.1) == np.sort(residuals)[35]
    # 39 rows cannot support 99 %: the 40th smallest of 39 is unbounded.
    lower, upper = model.conformal_interval(Q, alpha=0.01, method="split")
    assert np.all(lower == -np.inf) and np.all(upper == np.inf)


def test_split_interval_per_output_and_in_float32():
    X, y = sine(400, seed=1)
    Y = np.column_stack([y, 10 * y + 1])
    model = KernelSmoother(bandwidth=0.2).fit(X[:300].astype(np.float32), Y[:300])
    model.calibrate(X[300:], Y[300:])
    residuals = np.abs(Y[300:] - model.predict(X[300:].astype(np.float32)))
    lower, upper = model.conformal_interval(X[:5], alpha=0.2, method="split")
    assert lower.shape == (5, 2) and lower.dtype == np.float32
    for o in range(2):
        half = half_width_by_hand(residuals[:, o], 0.2)
        np.testing.assert_allclose(upper[:, o] - lower[:, o], 2 * half, rtol=1e-5)


def test_weighted_split_interval_is_the_weighted_conformal_quantile():
    X, y = sine(400, seed=2)
    model = KernelSmoother(bandwidth=0.2).fit(X[:300], y[:300])
    weight = np.random.default_rng(0).uniform(0.1, 3, size=100)
    weight[:10] = 0.0
    model.calibrate(X[300:], y[300:], sample_weight=weight)
    residuals = np.abs(y[300:] - model.predict(X[300:]))
    kept = weight > 0
    for alpha in (0.1, 0.3):
        lower, upper = model.conformal_interval(X[:3], alpha=alpha, method="split")
        half = half_width_by_hand(residuals[kept], alpha, weight[kept])
        np.testing.assert_allclose(upper - lower, 2 * half, rtol=1e-12)
    # Rows of weight 0 are not calibration rows; equal weights are no weights.
    dropped = KernelSmoother(bandwidth=0.2).fit(X[:300], y[:300])
    dropped.calibrate(X[300:][kept], y[300:][kept], sample_weight=weight[kept])
    np.testing.assert_array_equal(
        dropped.conformal_interval(X[:3], method="split")[1],
        model.conformal_interval(X[:3], method="split")[1],
    )
    dropped.calibrate(X[300:], y[300:], sample_weight=np.full(100, 2.5))
    unweighted = KernelSmoother(bandwidth=0.2).fit(X[:300], y[:300]).calibrate(X[300:], y[300:])
    np.testing.assert_array_equal(
        dropped.conformal_interval(X[:3], method="split")[1],
        unweighted.conformal_interval(X[:3], method="split")[1],
    )


@pytest.mark.parametrize(
    "fit",
    [
        streamed,
        chunked,
        lambda X, y: KernelSmoother(bandwidth=0.3).fit(X, y),
    ],
    ids=["partial_fit", "fit_chunks", "smoother"],
)
def test_split_covers_new_observations_at_the_nominal_level(fit):
    # Coverage over 20 draws of the training, calibration and test rows: at least 1 − α in
    # expectation, at most 1 − α + 1/(n + 1); each draw's sd about 0.026, the mean's 0.006.
    coverage = []
    for seed in range(20):
        X, y = sine(1200, seed=seed)
        model = fit(X[:600], y[:600]).calibrate(X[600:800], y[600:800])
        lower, upper = model.conformal_interval(X[800:], alpha=0.1)
        coverage.append(np.mean((lower <= y[800:]) & (y[800:] <= upper)))
    assert 0.9 - 0.02 <= np.mean(coverage) <= 0.9 + 1 / 201 + 0.02
    assert np.min(coverage) >= 0.8


def test_auto_prefers_split_once_calibrated_and_falls_back_after_a_refit():
    X, y = sine(500, seed=3)
    model = KernelSmoother(bandwidth=0.2).fit(X[:400], y[:400])
    jackknife = model.conformal_interval(X[:4], method="jackknife+")
    model.calibrate(X[400:], y[400:])
    split = model.conformal_interval(X[:4], method="split")
    np.testing.assert_array_equal(model.conformal_interval(X[:4])[0], split[0])
    # Jackknife+ is still there on request.
    np.testing.assert_array_equal(
        model.conformal_interval(X[:4], method="jackknife+")[0], jackknife[0]
    )
    model.fit(X[:400], y[:400])
    np.testing.assert_array_equal(model.conformal_interval(X[:4])[0], jackknife[0])
    with pytest.raises(RuntimeError, match=r"calibrate\(X_held_out, y_held_out\)"):
        model.conformal_interval(X[:4], method="split")


@pytest.mark.parametrize(
    "refit",
    [
        lambda m, X, y: m.fit(X, y),
        lambda m, X, y: m.partial_fit(X[:50], y[:50]),
        lambda m, X, y: fit_chunks(m, [(X, y)]),
    ],
    ids=["fit", "partial_fit", "fit_chunks"],
)
@pytest.mark.parametrize("first", ["fit", "partial_fit"])
def test_every_refit_drops_the_calibration(first, refit):
    X, y = sine(600, seed=4)
    model = LinearAttentionRegressor(
        n_near_keys=0, n_components=128, bandwidth=0.3, random_state=0
    )
    getattr(model, first)(X[:400], y[:400])
    model.calibrate(X[400:], y[400:])
    model.conformal_interval(X[:2], method="split")
    refit(model, X[:400], y[:400])
    with pytest.raises(RuntimeError, match="calibrate"):
        model.conformal_interval(X[:2], method="split")
    # "auto" is no longer split: jackknife+ where the new fit keeps its rows, else an error.
    if "X_fit_" in model.__dict__:
        auto, jackknife = (
            model.conformal_interval(X[:2], method=m)[1] for m in ("auto", "jackknife+")
        )
        np.testing.assert_array_equal(auto, jackknife)
    else:
        with pytest.raises(RuntimeError, match="calibrate"):
            model.conformal_interval(X[:2])


def test_fits_that_keep_no_rows_say_how_to_get_intervals():
    X, y = sine(600, seed=5)
    for model in (streamed(X[:400], y[:400]), chunked(X[:400], y[:400])):
        for method in ("auto", "jackknife+", "cv+", "local"):
            with pytest.raises(RuntimeError, match=r"calibrate\(X_held_out.*method='split'"):
                model.conformal_interval(X[:2], method=method)
        model.calibrate(X[400:], y[400:])
        lower, upper = model.conformal_interval(X[:2])
        assert np.all(np.isfinite(lower)) and np.all(upper > lower)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_attention_fitted_without_leave_one_out_gets_split_intervals():
    X, y = sine(300, seed=6)
    model = AttentionRegressor(leave_one_out=False, max_iter=3, random_state=0)
    model.fit(X[:200], y[:200])
    with pytest.raises(ValueError, match="method='split'"):
        model.conformal_interval(X[:2])
    model.calibrate(X[200:], y[200:])
    residuals = np.abs(y[200:] - model.predict(X[200:]))
    lower, upper = model.conformal_interval(X[:2])
    np.testing.assert_allclose(upper - lower, 2 * half_width_by_hand(residuals, 0.1), rtol=1e-6)


def test_bad_calibration_data_raise_and_keep_the_last_calibration():
    X, y = sine(500, seed=7)
    with pytest.raises(NotFittedError):
        KernelSmoother().calibrate(X, y)
    model = KernelSmoother(bandwidth=0.2).fit(X[:400], y[:400]).calibrate(X[400:], y[400:])
    before = model.conformal_interval(X[:3], method="split")
    Xc, yc = X[400:], y[400:]
    nan_y, nan_X = yc.copy(), Xc.copy()
    nan_y[3] = np.nan
    nan_X[3, 0] = np.nan
    bad = [
        ((Xc, yc[:-1]), "inconsistent numbers of samples"),
        ((Xc, np.column_stack([yc, yc])), r"shape \(2,\) per row"),
        ((Xc, nan_y), "y contains NaN"),
        ((nan_X, yc), "NaN"),
        ((Xc[:, [0, 0]], yc), "features"),
        ((Xc, yc, -np.ones(100)), "Negative values"),
        ((Xc, yc, np.zeros(100)), r"at least one (positive|non-zero)"),
        ((Xc, yc, np.ones(99)), "sample_weight"),
    ]
    for args, message in bad:
        with pytest.raises(ValueError, match=message):
            model.calibrate(*args)
        for got, expected in zip(
            model.conformal_interval(X[:3], method="split"), before, strict=True
        ):
            np.testing.assert_array_equal(got, expected)
    for alpha in (0, 1, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha must be a float strictly between 0 and 1"):
            model.conformal_interval(X[:3], alpha=alpha, method="split")
    with pytest.raises(ValueError, match="'split'"):
        model.conformal_interval(X[:3], method="splits")


def test_scorers_read_the_calibration():
    X, y = sine(700, seed=8)
    model = streamed(X[:400], y[:400]).calibrate(X[400:550], y[400:550])
    lower, upper = model.conformal_interval(X[550:], alpha=0.2, method="split")
    inside = (lower <= y[550:]) & (y[550:] <= upper)
    assert coverage_scorer(0.2, "split")(model, X[550:], y[550:]) == pytest.approx(inside.mean())
    assert interval_width_scorer(0.2, "split")(model, X[550:], y[550:]) == pytest.approx(
        -np.mean(upper - lower)
    )


def test_dask_fit_with_a_near_field_is_calibrated_on_dask_collections():
    da = pytest.importorskip("dask.array")
    X, y = sine(1500, seed=9, d=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = LinearAttentionRegressor(bandwidth=0.4, random_state=0).fit(
            da.from_array(X[:1200], chunks=400), da.from_array(y[:1200], chunks=400)
        )
    assert model.n_near_keys_ > 0  # the default near field, on the partitions
    # Before a calibration: jackknife+ from the leave-one-out residuals on the partitions.
    lower, upper = model.conformal_interval(X[:3], alpha=0.1)
    assert np.all(np.isfinite(lower)) and np.all(lower < upper)
    weight = np.random.default_rng(0).uniform(0.5, 2, size=300)
    model.calibrate(
        da.from_array(X[1200:], chunks=100),
        da.from_array(y[1200:], chunks=100),
        sample_weight=da.from_array(weight, chunks=100),
    )
    residuals = np.abs(y[1200:] - model.predict(X[1200:]))
    Q = X[:5]
    lower, upper = model.conformal_interval(Q, alpha=0.1)
    half = half_width_by_hand(residuals, 0.1, weight)
    np.testing.assert_allclose(upper, model.predict(Q) + half, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lower, model.predict(Q) - half, rtol=1e-10, atol=1e-12)
    # Numpy calibration rows give the same calibration.
    in_memory = model.conformal_interval(Q, alpha=0.1)
    model.calibrate(X[1200:], y[1200:], sample_weight=weight)
    np.testing.assert_allclose(model.conformal_interval(Q, alpha=0.1)[1], in_memory[1])
