"""CV+ conformal intervals: the estimator refitted on folds, its selection redone; the
default where the kernel was chosen with the targets."""

import numpy as np
import pytest
from sklearn.base import clone

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor
from kernattn._engine.cross_conformal import CV_PLUS_FOLDS, fold_ids


def bump(seed, n=200, d=5, n_test=2000):
    """The benchmark's bump in ``d`` inputs, homoscedastic noise sd 0.3."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n + n_test, d))
    y = np.exp(-8 * np.sum((X - 0.5) ** 2, axis=1)) + 0.3 * rng.normal(size=n + n_test)
    return X[:n], y[:n], X[n:], y[n:]


def covered(model, X, y, method):
    lower, upper = model.conformal_interval(X, alpha=0.1, method=method)
    return np.mean((lower <= y) & (y <= upper))


def test_cv_plus_covers_where_the_searched_bandwidth_makes_jackknife_plus_short():
    # One bandwidth per input searched on 200 rows with 5 inputs: the leave-one-out
    # residuals the search minimized are too small for jackknife+.
    coverage = {"jackknife+": [], "cv+": [], "auto": []}
    for seed in range(8):
        X, y, X_test, y_test = bump(seed)
        model = KernelSmoother(bandwidth="loo").fit(X, y)
        for method, values in coverage.items():
            values.append(covered(model, X_test, y_test, method))
    assert coverage["auto"] == coverage["cv+"]
    assert np.mean(coverage["jackknife+"]) < 0.88
    assert np.mean(coverage["cv+"]) >= 0.89
    assert np.min(coverage["cv+"]) >= 0.86


def by_hand(model, X, y, Q, alpha, sample_weight=None, n_folds=CV_PLUS_FOLDS):
    """CV+ built directly: the kept rows in K folds, a clone fitted without each, the
    ⌈(1 − α)(n + 1)⌉-th smallest of μ₋ₖ₍ᵢ₎(x) + Rᵢ and minus that of Rᵢ − μ₋ₖ₍ᵢ₎(x)."""
    rows = model._active
    X, y = X[rows], y[rows]
    weight = np.ones(len(X)) if sample_weight is None else sample_weight[rows]
    folds = fold_ids(len(X), n_folds)
    at_query = np.empty((len(Q), len(X)))
    residuals = np.empty(len(X))
    for k in range(n_folds):
        held = folds == k
        fold_model = clone(model).fit(X[~held], y[~held], sample_weight=weight[~held])
        residuals[held] = np.abs(y[held] - fold_model.predict(X[held]))
        at_query[:, held] = fold_model.predict(Q)[:, None]
    k = int(np.ceil((1 - alpha) * (len(X) + 1)))
    upper = np.sort(at_query + residuals, axis=1)[:, k - 1]
    lower = -np.sort(residuals - at_query, axis=1)[:, k - 1]
    return lower, upper


def kept_folds(model, n_folds=CV_PLUS_FOLDS):
    return model.__dict__["_fold_models_built"].get(dict)[n_folds]


@pytest.mark.parametrize(("alpha", "n_folds"), [(0.1, CV_PLUS_FOLDS), (0.25, 5)])
def test_cv_plus_is_the_interval_of_clone_fitted_fold_models(alpha, n_folds):
    X, y, Q, _ = bump(3, n=90, d=2, n_test=15)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    lower, upper = model.conformal_interval(Q, alpha=alpha, method="cv+", n_folds=n_folds)
    expected_lower, expected_upper = by_hand(model, X, y, Q, alpha, n_folds=n_folds)
    np.testing.assert_allclose(lower, expected_lower, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(upper, expected_upper, rtol=1e-12, atol=1e-12)
    # Each fold model is the estimator's procedure, its bandwidth searched again.
    folds = kept_folds(model, n_folds)
    assert len(folds.models) == n_folds
    for fold_model in folds.models:
        assert fold_model.get_params() == model.get_params()
        assert len(fold_model.X_fit_) in (90 - 90 // n_folds, 90 - 90 // n_folds - 1)


def test_cv_plus_with_one_row_per_fold_of_a_fixed_kernel_is_jackknife_plus():
    # A refit without row i at a fixed bandwidth is the kernel average without it.
    X, y, Q, _ = bump(12, n=40, d=2, n_test=8)
    model = KernelSmoother(bandwidth=0.2).fit(X, y)
    refits = model.conformal_interval(Q, alpha=0.2, method="cv+", n_folds=1000)
    assert len(kept_folds(model, 1000).models) == 40
    jackknife = model.conformal_interval(Q, alpha=0.2, method="jackknife+")
    for a, b in zip(refits, jackknife, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_cv_plus_with_sample_weights_weighs_the_fold_fits():
    X, y, Q, _ = bump(4, n=60, d=2, n_test=7)
    weight = np.r_[np.zeros(5), np.ones(55)]
    model = KernelSmoother(bandwidth="aic").fit(X, y, sample_weight=weight)
    assert len(model._active) == 55
    lower, upper = model.conformal_interval(Q, alpha=0.2, method="auto")
    expected_lower, expected_upper = by_hand(model, X, y, Q, 0.2, weight)
    np.testing.assert_allclose(lower, expected_lower, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(upper, expected_upper, rtol=1e-12, atol=1e-12)


def test_fold_models_are_kept_for_the_fit_and_replaced_by_a_new_fit():
    X, y, Q, _ = bump(5, n=80, d=2, n_test=10)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    first = model.conformal_interval(Q)
    folds = kept_folds(model)
    np.testing.assert_array_equal(model.conformal_interval(Q)[1], first[1])
    assert kept_folds(model) is folds
    model.fit(X, y + 1.0)
    moved = model.conformal_interval(Q)
    assert kept_folds(model) is not folds
    for a, b in zip(moved, first, strict=True):
        np.testing.assert_allclose(a, b + 1.0, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("bandwidth", [0.15, [0.1, 0.2], "scott", "silverman"])
def test_a_fixed_kernel_keeps_jackknife_plus_by_default(bandwidth):
    X, y, Q, _ = bump(6, n=70, d=2, n_test=9)
    model = KernelSmoother(bandwidth=bandwidth).fit(X, y)
    default = model.conformal_interval(Q, alpha=0.2)
    jackknife = model.conformal_interval(Q, alpha=0.2, method="jackknife+")
    for a, b in zip(default, jackknife, strict=True):
        np.testing.assert_array_equal(a, b)
    assert model.__dict__["_fold_models_built"]._value is None


@pytest.mark.filterwarnings("ignore:.*before converging")
@pytest.mark.parametrize(
    "model, refits",
    [
        (KernelSmoother(bandwidth="gcv"), True),
        (KernelSmoother(bandwidth=0.2, degree="auto"), True),
        (KernelSmoother(bandwidth=0.2, degree=1), False),
        (LinearAttentionRegressor(n_near_keys=0, random_state=0), False),
        (LinearAttentionRegressor(n_near_keys=0, bandwidth="loo", random_state=0), True),
        (AttentionRegressor(max_iter=5, random_state=0), True),
    ],
)
def test_auto_refits_where_the_kernel_was_chosen_with_the_targets(model, refits):
    X, y, Q, _ = bump(7, n=80, d=2, n_test=9)
    model.fit(X, y)
    method = "cv+" if refits else "jackknife+"
    expected = model.conformal_interval(Q, alpha=0.2, method=method)
    got = model.conformal_interval(Q, alpha=0.2)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.all(np.isfinite(a))
    assert np.all(got[0] < got[1])


def test_cv_plus_of_several_outputs_is_each_output_alone():
    X, y, Q, _ = bump(8, n=70, d=2, n_test=6)
    Y = np.column_stack([y, 3 * y])
    model = KernelSmoother(bandwidth=0.2, degree="auto").fit(X, Y)
    lower, upper = model.conformal_interval(Q, alpha=0.2, method="cv+")
    assert lower.shape == upper.shape == (6, 2)
    single = clone(model).fit(X, y).conformal_interval(Q, alpha=0.2, method="cv+")
    np.testing.assert_allclose(lower[:, 0], single[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(upper[:, 0], single[1], rtol=1e-12, atol=1e-12)


def test_cv_plus_after_partial_fit_says_what_it_misses():
    X, y, Q, _ = bump(9, n=100, d=2, n_test=5)
    model = LinearAttentionRegressor(n_near_keys=0, bandwidth="loo", random_state=0)
    model.fit(X, y).partial_fit(X[:10], y[:10])
    for method in ("auto", "cv+"):
        with pytest.raises(RuntimeError, match="partial_fit"):
            model.conformal_interval(Q, method=method)


@pytest.mark.parametrize("method", ["cv", "CV+", "jackknife", None, 5])
def test_unknown_method_lists_cv_plus_and_auto(method):
    X, y, Q, _ = bump(10, n=40, d=2, n_test=3)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    with pytest.raises(ValueError, match="'cv\\+'.*'auto'"):
        model.conformal_interval(Q, method=method)


@pytest.mark.parametrize("n_folds", [1, 0, 2.0, True, "5", None])
def test_bad_number_of_folds_is_refused(n_folds):
    X, y, Q, _ = bump(13, n=40, d=2, n_test=3)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    with pytest.raises(ValueError, match="n_folds must be an integer of at least 2"):
        model.conformal_interval(Q, method="cv+", n_folds=n_folds)


@pytest.mark.filterwarnings("ignore:.*before converging")
def test_cv_plus_needs_a_kernel_fitted_on_the_leave_one_out_loss():
    X, y, Q, _ = bump(11, n=50, d=2, n_test=3)
    model = AttentionRegressor(leave_one_out=False, max_iter=3, random_state=0).fit(X, y)
    for method in ("auto", "cv+"):
        with pytest.raises(ValueError, match="leave_one_out=False"):
            model.conformal_interval(Q, method=method)


def test_folds_are_a_fixed_even_deal():
    folds = fold_ids(23, 5)
    assert sorted(np.bincount(folds)) == [4, 4, 5, 5, 5]
    np.testing.assert_array_equal(folds, fold_ids(23, 5))
    assert not np.array_equal(folds, np.arange(23) % 5)
