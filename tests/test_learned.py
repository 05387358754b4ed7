"""AttentionRegressor: identities, learning, fitted attributes, warnings and errors."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import config_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from kernattn import AttentionRegressor, KernelSmoother
from kernattn._core.loo import DuplicateGroups
from kernattn.learned._objective import Layout, LeaveOneOutObjective
from kernattn.learned._optimize import validation_split

#: The plain softmax average: no tilted weights, no warp and no local line (the defaults
#: tilt data of three features and choose the line by held-out error).
PLAIN = dict(tilt=False, warp=0, degree=0)
#: Training from an arbitrary start, kept as trained: the identity start scaled to unit
#: logit variance, no shrinkage toward it (the default starts at the smoother's
#: leave-one-out bandwidths, which leaves little to train on these smooth tasks).
TRAINED = dict(init="identity", shrinkage=None)


@pytest.fixture(scope="module")
def smooth_task():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=150)
    return X, y


def fit_quiet(model, X, y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y, **kwargs)


@pytest.mark.parametrize("shape", ["2d", "3d"])
def test_gaussian_tied_identity_is_kernel_smoother(smooth_task, shape):
    X, y = smooth_task
    h = np.array([0.4, 0.9, 1.7])
    init = np.diag(1.0 / h) if shape == "2d" else np.diag(1.0 / h)[None]
    model = AttentionRegressor(
        similarity="gaussian",
        tie_qk=True,
        standardize=False,
        init=init,
        scale=1.0,
        max_iter=0,
        **PLAIN,
    ).fit(X, y)
    smoother = KernelSmoother(bandwidth=h).fit(X, y)
    queries = np.vstack([X[:20], np.random.default_rng(1).normal(size=(30, 3)) * 2])
    np.testing.assert_allclose(model.predict(queries), smoother.predict(queries), atol=1e-10)
    np.testing.assert_allclose(
        model.attention_weights(queries), smoother.attention_weights(queries), atol=1e-10
    )


def test_learned_kernel_beats_loo_smoother_on_projected_task():
    # The target depends on a 2-D projection of 20-D inputs: a per-feature bandwidth cannot
    # find that subspace, a learned projection can.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 20))
    P = np.linalg.qr(rng.normal(size=(20, 2)))[0]
    U = X @ P
    y = np.sin(2 * U[:, 0]) + 0.5 * U[:, 1] ** 2 + 0.1 * rng.normal(size=2000)
    train, test = slice(0, 1500), slice(1500, None)
    smoother = KernelSmoother(bandwidth="loo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        smoother.fit(X[train], y[train])
    model = AttentionRegressor(
        similarity="gaussian", tie_qk=True, head_dim=2, max_iter=50, random_state=0
    )
    fit_quiet(model, X[train], y[train])
    mse_smoother = np.mean((smoother.predict(X[test]) - y[test]) ** 2)
    mse_learned = np.mean((model.predict(X[test]) - y[test]) ** 2)
    # Measured with this seed: 0.058 against 0.777 (ratio 0.074).
    assert mse_learned < 0.2 * mse_smoother


@pytest.mark.parametrize("similarity", ["dot", "gaussian"])
def test_lbfgs_loss_curve_decreases(smooth_task, similarity):
    X, y = smooth_task
    model = fit_quiet(
        AttentionRegressor(similarity=similarity, max_iter=30, degree=0, **TRAINED), X, y
    )
    curve = np.array(model.loss_curve_)
    assert len(curve) == model.n_iter_ >= 5
    assert np.all(np.diff(curve) <= 1e-12)
    assert curve[-1] < 0.6 * curve[0]


def test_adam_loss_curve_decreases(smooth_task):
    X, y = smooth_task
    model = AttentionRegressor(
        optimizer="adam",
        learning_rate=0.05,
        batch_size=32,
        max_iter=40,
        random_state=0,
        degree=0,
        **TRAINED,
    )
    fit_quiet(model, X, y)
    curve = np.array(model.loss_curve_)
    assert len(curve) == model.n_iter_
    assert curve[-5:].mean() < 0.7 * curve[:3].mean()


@pytest.mark.parametrize(
    "params",
    [
        dict(init="random", max_iter=5),
        dict(optimizer="adam", n_heads=2, batch_size=16, key_subsample=40, max_iter=3),
        dict(early_stopping=True, max_iter=5),
    ],
)
def test_random_state_reproducible(smooth_task, params):
    X, y = smooth_task
    first = fit_quiet(AttentionRegressor(random_state=7, **params), X, y)
    second = fit_quiet(AttentionRegressor(random_state=7, **params), X, y)
    np.testing.assert_array_equal(first.query_projection_, second.query_projection_)
    np.testing.assert_array_equal(first.predict(X), second.predict(X))


def test_failed_fit_leaves_earlier_fit_intact(smooth_task):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(max_iter=3), X, y)
    before = model.predict(X)
    weights = model.query_projection_.copy()
    model.set_params(init=np.ones((5, 5)))
    with pytest.raises(ValueError, match="init must be"):
        model.fit(X[:50], y[:50])
    np.testing.assert_array_equal(model.query_projection_, weights)
    np.testing.assert_array_equal(model.predict(X), before)


def test_convergence_warning_at_max_iter(smooth_task):
    X, y = smooth_task
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        AttentionRegressor(max_iter=2).fit(X, y)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        AttentionRegressor(optimizer="adam", max_iter=1).fit(X, y)


def test_saturated_softmax_warns(smooth_task):
    X, y = smooth_task
    model = AttentionRegressor(
        similarity="gaussian", tie_qk=True, init=50.0 * np.eye(3), scale=1.0, max_iter=1
    )
    with pytest.warns(UserWarning, match="saturated"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)


def test_initial_logits_have_unit_variance(smooth_task):
    X, y = smooth_task
    for init in ["identity", "pca", "random"]:
        for head_dim in [1, 3, 8]:
            model = AttentionRegressor(
                init=init, head_dim=head_dim, max_iter=0, random_state=0, **PLAIN
            )
            model.fit(X, y)
            assert model.logit_variance(X) == pytest.approx([1.0], rel=0.2)


def test_fitted_attribute_contract(smooth_task):
    X, y = smooth_task
    Y = np.column_stack([y, -y])
    model = AttentionRegressor(
        n_heads=3, head_dim=2, tie_qk=True, max_iter=2, random_state=0, **PLAIN
    )
    fit_quiet(model, X, Y)
    assert model.tilt_ is False and model.warp_ == 0
    assert model.query_projection_.shape == model.key_projection_.shape == (3, 3, 2)
    np.testing.assert_array_equal(model.query_projection_, model.key_projection_)
    np.testing.assert_allclose(model.scale_, 1 / np.sqrt(2.0))
    assert model.head_weights_.shape == (3,)
    assert model.head_bias_.shape == (2,)
    np.testing.assert_allclose(model.center_, X.mean(axis=0))
    np.testing.assert_allclose(model.input_scale_, X.std(axis=0))
    raw = AttentionRegressor(scale=1.0, standardize=False, max_iter=0, **PLAIN).fit(X, y)
    np.testing.assert_array_equal(raw.center_, 0.0)
    np.testing.assert_array_equal(raw.input_scale_, 1.0)
    np.testing.assert_array_equal(raw.scale_, 1.0)
    assert AttentionRegressor(scale=0.4, max_iter=0, **PLAIN).fit(X, y).scale_[0] == 0.4
    # The projections, scales and mixture are read from the fitted kernel, not copied, and
    # cannot be changed behind its back (its keys were projected with them).
    assert np.shares_memory(model.query_projection_, model.kernel_.query_weights)
    assert np.shares_memory(model.scale_, model.kernel_.scale)
    with pytest.raises(ValueError, match="read-only"):
        model.query_projection_[0, 0, 0] = 1.0
    unfitted = AttentionRegressor()
    for name in (
        "kernel_",
        "query_projection_",
        "key_projection_",
        "scale_",
        "head_weights_",
        "head_bias_",
        "center_",
        "input_scale_",
        "loss_curve_",
        "n_iter_",
        "tilt_",
        "warp_",
    ):
        assert not hasattr(unfitted, name)
    with pytest.raises(AttributeError, match="before it is fitted"):
        _ = unfitted.query_projection_


def test_learned_scale_moves(smooth_task):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(similarity="cosine", scale="learned", max_iter=20), X, y)
    assert model.scale_.shape == (1,)
    assert model.scale_[0] != pytest.approx(1 / np.sqrt(3.0))
    assert model.score(X, y) > 0.5


@pytest.fixture(scope="module")
def three_heads(smooth_task):
    X, y = smooth_task
    model = AttentionRegressor(n_heads=3, max_iter=15, random_state=0, degree=0, **TRAINED)
    return fit_quiet(model, X, np.column_stack([y, y**2]))


def test_predict_is_mixture_of_head_estimates(smooth_task, three_heads):
    X, _ = smooth_task
    model = three_heads
    queries = X[:25] + 0.1
    heads = [model.attention_weights(queries, head=h) @ model.y_fit_ for h in range(3)]
    for h in range(3):
        np.testing.assert_allclose(model.attention_weights(queries, head=h).sum(axis=1), 1.0)
    expected = sum(a * f for a, f in zip(model.head_weights_, heads, strict=True))
    expected = expected + model.head_bias_
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-10, atol=1e-10)
    mixed = model.attention_weights(queries)
    np.testing.assert_allclose(mixed.sum(axis=1), model.head_weights_.sum())
    np.testing.assert_allclose(mixed @ model.y_fit_ + model.head_bias_, expected, atol=1e-10)


def test_predict_with_subset_of_heads_is_mean_ablation(smooth_task, three_heads):
    X, _ = smooth_task
    model = three_heads
    mean = model.y_fit_.mean(axis=0)
    np.testing.assert_allclose(model.predict(X, heads=[0, 1, 2]), model.predict(X))
    estimate = model.head_bias_ + model.head_weights_[1] * mean
    for h in (0, 2):
        estimate = estimate + model.head_weights_[h] * (
            model.attention_weights(X, head=h) @ model.y_fit_
        )
    np.testing.assert_allclose(model.predict(X, heads=[0, 2]), estimate, atol=1e-10)
    pruned = model.prune_heads([0, 2], refit_mixture=False)
    assert pruned.n_heads == 2 and pruned.query_projection_.shape[0] == 2
    np.testing.assert_allclose(pruned.predict(X), estimate, atol=1e-10)
    with pytest.raises(ValueError, match="heads must be distinct integers"):
        model.predict(X, heads=[3])


@pytest.fixture(scope="module")
def three_affine_heads(smooth_task):
    X, y = smooth_task
    # The plain softmax: the refit's leave-one-out estimates are the heads' kernel averages.
    model = AttentionRegressor(
        n_heads=3, head_mixture="affine", max_iter=15, random_state=0, **PLAIN
    )
    return fit_quiet(model, X, np.column_stack([y, y**2]))


def test_prune_heads_refit_is_non_negative_least_squares_on_loo_estimates(
    smooth_task, three_affine_heads
):
    X, y = smooth_task
    model = three_affine_heads
    refit = model.prune_heads([0, 1, 2], refit_mixture=True)
    Y = model.y_fit_
    # Each head's leave-one-out estimate (n, heads, outputs), by a direct loop.
    F = np.empty((len(X), 3, Y.shape[1]))
    for i in range(len(X)):
        w = np.stack([model.attention_weights(X[i : i + 1], head=h)[0] for h in range(3)])
        w[:, i] = 0.0
        F[i] = (w / w.sum(axis=1, keepdims=True)) @ Y

    def loo_error(a):
        residual = Y - np.einsum("h,iht->it", a, F)
        return np.mean((residual - residual.mean(axis=0)) ** 2)

    assert np.all(refit.head_weights_ >= 0)
    best = loo_error(refit.head_weights_)
    residual = Y - np.einsum("h,iht->it", refit.head_weights_, F)
    np.testing.assert_allclose(residual.mean(axis=0), refit.head_bias_, atol=1e-10)
    rng = np.random.default_rng(0)
    candidates = [np.clip(model.head_weights_, 0, None)] + list(rng.uniform(0, 2, (20, 3)))
    assert all(best <= loo_error(a) + 1e-12 for a in candidates)
    assert model.prune_heads([1]).n_heads == 1


def test_prune_heads_refit_ignores_the_anticorrelation_of_a_uniform_head(smooth_task):
    X, y = smooth_task
    d = X.shape[1]
    # Head 1 has a zero projection: it attends uniformly, so its leave-one-out estimate is
    # (Σ_j y_j − y_i)/(n − 1). Unconstrained least squares would give it a weight near
    # −(n − 1) and reproduce the training targets exactly.
    init = np.stack([np.eye(d), np.zeros((d, d))])
    model = AttentionRegressor(n_heads=2, init=init, max_iter=0).fit(X[:100], y[:100])
    refit = model.prune_heads([0, 1])
    assert np.all(refit.head_weights_ >= 0) and refit.head_weights_[1] < 1.0
    test_error = np.mean((refit.predict(X[100:]) - y[100:]) ** 2)
    assert test_error < 1.5 * np.mean((model.predict(X[100:]) - y[100:]) ** 2)


def test_return_std_is_weighted_spread(smooth_task, three_heads):
    X, y = smooth_task
    single = fit_quiet(AttentionRegressor(max_iter=5, degree=0), X, y)
    queries = np.vstack([X[:10], [[50.0, -50.0, 50.0]]])
    mean, std = single.predict(queries, return_std=True)
    # One head: the softmax weights' spread of the targets around the (affine) estimate.
    w = single.attention_weights(queries, head=0)
    spread = np.sqrt(np.sum(w * (y[None, :] - mean[:, None]) ** 2, axis=1))
    np.testing.assert_allclose(std, spread, atol=1e-10)
    assert np.all(np.isfinite(std))
    model = three_heads
    mean, std = model.predict(queries, return_std=True)
    pi = np.abs(model.head_weights_) / np.abs(model.head_weights_).sum()
    variance = 0.0
    for h in range(3):
        w = model.attention_weights(queries, head=h)
        variance = variance + pi[h] * np.einsum(
            "qi,qit->qt", w, (model.y_fit_[None] - mean[:, None]) ** 2
        )
    np.testing.assert_allclose(std, np.sqrt(variance), atol=1e-9)


def test_far_query_gets_nearest_target_without_nan(smooth_task):
    X, y = smooth_task
    model = AttentionRegressor(
        similarity="gaussian", tie_qk=True, init=np.eye(3), scale=1.0, max_iter=0, **PLAIN
    ).fit(X, y)
    far = X[[4]] * 1e3
    nearest = np.argmin(np.sum((X - far) ** 2, axis=1))
    assert model.predict(far)[0] == pytest.approx(y[nearest])


def test_cosine_with_zero_projection_is_finite(smooth_task):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(similarity="cosine", scale="learned", max_iter=3), X, y)
    assert np.all(np.isfinite(model.predict(model.center_[None])))


def test_entropy_and_effective_neighbors(smooth_task, three_heads):
    X, _ = smooth_task
    model = three_heads
    entropy = model.attention_entropy(X[:20])
    for h in range(3):
        w = model.attention_weights(X[:20], head=h)
        direct = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), axis=1)
        np.testing.assert_allclose(entropy[:, h], direct, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.effective_neighbors(X[:20]), np.exp(entropy))
    flat = AttentionRegressor(init=np.zeros((3, 3)), max_iter=0).fit(X, X[:, 0])
    np.testing.assert_allclose(flat.effective_neighbors(X[:5]), len(X))
    assert flat.logit_variance(X) == pytest.approx([0.0], abs=1e-20)


def test_logit_variance_matches_direct_formula(smooth_task, three_heads):
    X, _ = smooth_task
    model = three_heads
    Z = (X - model.center_) / model.input_scale_
    for h in range(3):
        q = Z[:30] @ model.query_projection_[h]
        k = Z @ model.key_projection_[h]
        # The Gaussian similarity −½‖q − k‖², up to the query's own −½‖q‖².
        logits = model.scale_[h] * (q @ k.T - 0.5 * np.sum(k**2, axis=1))
        assert model.logit_variance(X[:30])[h] == pytest.approx(logits.var(axis=1).mean())


def test_integer_sample_weight_equals_repeated_rows(smooth_task):
    X, y = smooth_task
    X, y = X[:40], y[:40]
    counts = np.random.default_rng(2).integers(0, 3, size=40)
    params = dict(n_heads=2, max_iter=5, random_state=0, degree=0, **TRAINED)
    weighted = fit_quiet(AttentionRegressor(**params), X, y, sample_weight=counts)
    repeated = fit_quiet(
        AttentionRegressor(**params), np.repeat(X, counts, axis=0), np.repeat(y, counts)
    )
    np.testing.assert_allclose(weighted.predict(X), repeated.predict(X), rtol=1e-7)
    assert np.all(weighted.attention_weights(X)[:, counts == 0] == 0.0)


def test_warm_start_continues(smooth_task):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(max_iter=5, warm_start=True, **TRAINED), X, y)
    first = model.loss_curve_
    fit_quiet(model, X, y)
    assert model.loss_curve_[0] < first[0]
    assert model.loss_curve_[0] <= first[-1] + 1e-9


def test_early_stopping_keeps_best_validation_loss(smooth_task):
    X, y = smooth_task
    model = AttentionRegressor(
        early_stopping=True, n_iter_no_change=3, random_state=0, **PLAIN, **TRAINED
    )
    fit_quiet(model, X, y)
    assert len(model.validation_scores_) == len(model.loss_curve_)
    # The validation loss of the kept parameters, recomputed from the fitted kernel: the
    # held-out queries (the same split, from the same seed) against the training keys.
    groups = DuplicateGroups(X)
    train, validation = validation_split(groups, model.validation_fraction, check_random_state(0))
    d = X.shape[1]
    layout = Layout(1, d, d, 1, model.tie_qk, False)
    objective = LeaveOneOutObjective(
        (X - model.center_) / model.input_scale_,
        (y - y.mean())[:, None],
        np.ones(len(X)),
        groups,
        layout,
        model.similarity,
        model.scale_,
        model.alpha,
    )
    theta = layout.pack(
        model.query_projection_,
        model.key_projection_,
        None,
        model.head_weights_,
        model.kernel_.head_bias,
    )
    kept = objective.loss(theta, validation, train)
    assert kept == pytest.approx(min(model.validation_scores_), rel=1e-10)
    # Training went on past the best iteration, and the later parameters were not kept.
    assert np.argmin(model.validation_scores_) < len(model.validation_scores_) - 1
    assert kept < model.validation_scores_[-1]


def test_verbose_prints_progress(smooth_task, capsys):
    X, y = smooth_task
    fit_quiet(AttentionRegressor(max_iter=3, verbose=1), X, y)
    lines = [line for line in capsys.readouterr().out.splitlines() if "loss =" in line]
    assert len(lines) >= 2 and "gradient norm" in lines[0]


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(n_heads=0), "'n_heads' parameter"),
        (dict(n_heads=True), "'n_heads' parameter"),
        (dict(head_dim=1.5), "'head_dim' parameter"),
        (dict(similarity="euclid"), "'similarity' parameter"),
        (dict(scale="log"), "'scale' parameter"),
        (dict(scale="sqrt"), "'scale' parameter"),
        (dict(scale=-1.0), "'scale' parameter"),
        (dict(scale=np.inf), "'scale' parameter"),
        (dict(init="zeros"), "'init' parameter"),
        (dict(init=np.ones((2, 2))), "init must be"),
        (dict(init=np.full((3, 3), np.nan)), "finite"),
        (dict(init=np.full((3, 3), np.inf)), "finite"),
        (dict(alpha=-1.0), "'alpha' parameter"),
        (dict(alpha=np.inf), "'alpha' parameter"),
        (dict(optimizer="sgd"), "'optimizer' parameter"),
        (dict(learning_rate=0.0), "'learning_rate' parameter"),
        (dict(learning_rate=np.inf), "'learning_rate' parameter"),
        (dict(batch_size=0), "'batch_size' parameter"),
        (dict(max_iter=-1), "'max_iter' parameter"),
        (dict(tol=np.nan), "'tol' parameter"),
        (dict(validation_fraction=1.0), "'validation_fraction' parameter"),
        (dict(tie_qk="yes"), "'tie_qk' parameter"),
        (dict(n_jobs=0), "'n_jobs' parameter"),
    ],
)
def test_bad_parameters_raise(smooth_task, params, message):
    X, y = smooth_task
    with pytest.raises(ValueError, match=message):
        AttentionRegressor(**params).fit(X, y)


@pytest.mark.parametrize(
    "params",
    [
        dict(alpha=np.inf),
        dict(learning_rate=np.inf),
        dict(tie_qk="yes"),
        dict(n_heads=True),
        dict(init=np.full((3, 3), np.nan)),
    ],
)
def test_bad_parameters_raise_before_work_and_keep_earlier_fit(smooth_task, params, monkeypatch):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(max_iter=3, random_state=0), X, y)
    before = model.predict(X)
    kernel = model.kernel_

    def no_work(*args, **kwargs):
        raise AssertionError("the data were looked at before the parameters were checked")

    monkeypatch.setattr(model, "_validate_training_data", no_work)
    monkeypatch.setattr(model, "_fit_kernel", no_work)
    model.set_params(**params)
    with pytest.raises(ValueError):
        model.fit(X[:50], y[:50])
    assert model.kernel_ is kernel
    np.testing.assert_array_equal(model.predict(X), before)


def test_parameter_constraints_cover_every_parameter():
    model = AttentionRegressor()
    assert set(model._parameter_constraints) == set(model.get_params())


def test_verbose_accepts_bool(smooth_task, capsys):
    X, y = smooth_task
    fit_quiet(AttentionRegressor(max_iter=1, verbose=True), X, y)
    assert "loss =" in capsys.readouterr().out


def test_scale_multiplies_the_similarity(smooth_task):
    X, y = smooth_task
    W = np.random.default_rng(3).normal(size=(3, 2))
    common = dict(
        similarity="dot", tie_qk=False, init=W, head_dim=2, standardize=False, max_iter=0, **PLAIN
    )
    # scale=1.0: the plain dot product, softmax(q·k) (what scale="none" used to be).
    plain = AttentionRegressor(scale=1.0, **common).fit(X, y)
    logits = (X[:10] @ W) @ (X @ W).T
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(plain.attention_weights(X[:10]), expected, atol=1e-12)
    # A float multiplies the logits: scale s with W is scale 1 with √s W.
    scaled = AttentionRegressor(scale=0.3, **common).fit(X, y)
    folded = AttentionRegressor(scale=1.0, **{**common, "init": np.sqrt(0.3) * W}).fit(X, y)
    np.testing.assert_allclose(scaled.predict(X), folded.predict(X), rtol=1e-12)
    # None is 1/√head_dim, as in scaled dot-product attention.
    default = AttentionRegressor(**common).fit(X, y)
    explicit = AttentionRegressor(scale=1 / np.sqrt(2), **common).fit(X, y)
    np.testing.assert_array_equal(default.scale_, [1 / np.sqrt(2)])
    np.testing.assert_array_equal(default.predict(X), explicit.predict(X))
    learned = AttentionRegressor(scale="learned", **common).fit(X, y)
    np.testing.assert_array_equal(learned.scale_, [1 / np.sqrt(2)])


def test_n_jobs_does_not_change_the_fit():
    # Enough query-key pairs for threads, and a working memory that makes several blocks.
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1100, 4))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2
    fits = []
    for n_jobs in (1, 2):
        model = AttentionRegressor(
            n_heads=2, max_iter=4, random_state=0, n_jobs=n_jobs, degree=0, **TRAINED
        )
        with config_context(working_memory=4):
            fits.append(fit_quiet(model, X, y))
    one, two = fits
    np.testing.assert_allclose(one.loss_curve_, two.loss_curve_, rtol=1e-12)
    np.testing.assert_allclose(one.query_projection_, two.query_projection_, rtol=1e-9)
    np.testing.assert_allclose(one.predict(X[:50]), two.predict(X[:50]), rtol=1e-9)
    # Two features: the default tilts, its width and penalty searched over blocks too.
    X, y = X[:400, :2], y[:400]
    fits = []
    for n_jobs in (1, 2):
        model = AttentionRegressor(max_iter=4, random_state=0, n_jobs=n_jobs, degree=0)
        with config_context(working_memory=1):
            fits.append(fit_quiet(model, X, y))
    one, two = fits
    assert one.tilt_ and one.width_factor_ == two.width_factor_
    assert one.tilt_penalty_ == two.tilt_penalty_
    np.testing.assert_allclose(one.predict(X[:50]), two.predict(X[:50]), rtol=1e-9)


def test_one_distinct_input_cannot_be_trained():
    X = np.ones((4, 2))
    with pytest.raises(ValueError, match="2 distinct training inputs"):
        AttentionRegressor().fit(X, np.arange(4.0))
    model = AttentionRegressor(max_iter=0).fit(X, np.arange(4.0))
    np.testing.assert_allclose(model.predict(X[:1]), 1.5)


def test_bad_head_index_raises(three_heads, smooth_task):
    X, _ = smooth_task
    with pytest.raises(ValueError, match="head must be None or one head index"):
        three_heads.attention_weights(X, head=[0, 1])
    with pytest.raises(ValueError, match="heads must be distinct integers"):
        three_heads.attention_weights(X, head=5)


def test_warm_start_keeps_mixture_when_targets_shift(smooth_task):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(n_heads=2, max_iter=5, random_state=0), X, y)
    before = model.predict(X)
    model.set_params(warm_start=True, max_iter=0)
    model.fit(X, y + 100.0)
    np.testing.assert_allclose(model.predict(X), before + 100.0, rtol=1e-12)


# ---------------------------------------------------------------- the head mixture

convex_problems = st.tuples(
    st.integers(3, 30),
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["dot", "cosine", "gaussian"]),
    st.floats(1e-3, 1e3),
)


@pytest.mark.parametrize("n_heads", [1, 3])
@settings(max_examples=25, deadline=None)
@given(problem=convex_problems)
def test_convex_mixture_is_a_nadaraya_watson_estimate(n_heads, problem):
    n, d, seed, similarity, size = problem
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * size
    y = rng.normal(size=n) * size + rng.normal() * size
    queries = np.vstack([X[:3], rng.normal(size=(4, d)) * 3 * size])
    model = AttentionRegressor(
        n_heads=n_heads,
        similarity=similarity,
        head_mixture="convex",
        max_iter=5,
        random_state=0,
        degree=0,
    )
    fit_quiet(model, X, y)
    assert model.head_weights_.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_array_equal(model.head_bias_, 0.0)
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    prediction = model.predict(queries)
    span = 1e-9 * (1 + np.abs(y).max())
    assert np.all(prediction >= y.min() - span) and np.all(prediction <= y.max() + span)
    np.testing.assert_allclose(prediction, weights @ y, atol=span)


def test_affine_mixture_goes_beyond_nadaraya_watson(smooth_task):
    # One head of a dot-product kernel: the affine output stretches the head's estimate
    # (a weight far from 1 and a bias), which a convex mixture cannot.
    X, y = smooth_task
    model = fit_quiet(
        AttentionRegressor(similarity="dot", head_mixture="affine", max_iter=50), X, y
    )
    assert abs(model.head_weights_[0] - 1.0) > 0.5
    assert np.any(model.head_bias_ != 0.0)
    weights = model.attention_weights(X[:5])
    np.testing.assert_allclose(weights.sum(axis=1), model.head_weights_.sum())
    np.testing.assert_allclose(model.predict(X[:5]), weights @ y + model.head_bias_)
    convex = fit_quiet(AttentionRegressor(similarity="dot", max_iter=50), X, y)
    assert convex.head_weights_[0] == 1.0


def test_convex_refit_of_pruned_heads_stays_convex(smooth_task):
    X, y = smooth_task
    model = fit_quiet(AttentionRegressor(n_heads=3, max_iter=10, random_state=0), X, y)
    for heads in ([0, 2], [0, 1, 2], [1]):
        pruned = model.prune_heads(heads)
        assert np.all(pruned.head_weights_ >= 0)
        assert pruned.head_weights_.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_array_equal(pruned.head_bias_, 0.0)
        prediction = pruned.predict(X)
        assert prediction.min() >= y.min() and prediction.max() <= y.max()


# ---------------------------------------------------------------------------- units


@pytest.mark.parametrize("head_mixture", ["convex", "affine"])
@pytest.mark.parametrize("c", [1e-3, 7.0, 1e4])
def test_training_does_not_depend_on_the_units_of_X_and_y(smooth_task, head_mixture, c):
    X, y = smooth_task
    params = dict(
        n_heads=2, head_mixture=head_mixture, max_iter=30, random_state=0, degree=0, **TRAINED
    )
    reference = fit_quiet(AttentionRegressor(**params), X, y)
    scaled_y = fit_quiet(AttentionRegressor(**params), X, c * y)
    np.testing.assert_allclose(scaled_y.predict(X), c * reference.predict(X), rtol=1e-6)
    scaled_x = fit_quiet(AttentionRegressor(**params), c * X - 3.0, y)
    np.testing.assert_allclose(scaled_x.predict(c * X - 3.0), reference.predict(X), rtol=1e-6)


# ------------------------------------------------------------------- leave-one-out


def test_resubstitution_loss_collapses_the_kernel_onto_each_training_point():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(400, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=400)
    train, test = slice(0, 200), slice(200, None)
    params = dict(
        similarity="gaussian", tie_qk=True, max_iter=100, random_state=0, degree=0, **TRAINED
    )
    loo = fit_quiet(AttentionRegressor(**params), X[train], y[train])
    resub = fit_quiet(AttentionRegressor(leave_one_out=False, **params), X[train], y[train])
    # Training loss towards 0: each training point attends to itself only.
    assert resub.loss_curve_[-1] < 0.05 < loo.loss_curve_[-1]
    assert np.median(resub.effective_neighbors(X[train])) < 1.5
    assert np.median(loo.effective_neighbors(X[train])) > 5
    # And the test error grows.
    loo_mse = np.mean((loo.predict(X[test]) - y[test]) ** 2)
    resub_mse = np.mean((resub.predict(X[test]) - y[test]) ** 2)
    assert resub_mse > 1.3 * loo_mse


# -------------------------------------------------------------------- stopping rule


def test_training_stops_when_the_loss_stops_improving(smooth_task):
    X, y = smooth_task
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = AttentionRegressor(max_iter=1000, tol=1e-3, n_iter_no_change=5).fit(X, y)
    curve = model.loss_curve_
    assert 5 < model.n_iter_ < 1000
    # The rule: the last 5 iterations improved on the best before them by less than tol.
    before, recent = min(curve[:-5]), min(curve[-5:])
    assert before - recent <= 1e-3 * before
    # Every earlier window improved by more than tol.
    for end in range(6, len(curve)):
        assert min(curve[: end - 5]) - min(curve[end - 5 : end]) > 1e-3 * min(curve[: end - 5])


# --------------------------------------------------------------------------- heads


def test_heads_start_distinct(smooth_task):
    X, y = smooth_task
    model = AttentionRegressor(n_heads=3, max_iter=0, random_state=0).fit(X, y)
    W = model.query_projection_
    for g in range(3):
        for h in range(g):
            assert not np.allclose(W[g] @ W[g].T, W[h] @ W[h].T, rtol=0.1)


def test_two_heads_end_on_the_two_relevant_directions():
    # y = f(x₀) + g(x₁): two one-dimensional heads can each follow one direction, which
    # explains more of y than two heads on the same direction.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.sin(2 * X[:, 0]) + np.sin(2 * X[:, 1]) + 0.1 * rng.normal(size=300)
    model = fit_quiet(
        AttentionRegressor(n_heads=2, head_dim=1, random_state=0, degree=0, **TRAINED), X, y
    )
    directions = model.query_projection_[:, :, 0]
    directions = directions / np.linalg.norm(directions, axis=1, keepdims=True)
    assert abs(directions[0] @ directions[1]) < 0.5
    assert set(np.argmax(np.abs(directions), axis=1)) == {0, 1}
    assert np.all(model.head_weights_ > 0.3)
    one = fit_quiet(AttentionRegressor(head_dim=1, random_state=0, degree=0, **TRAINED), X, y)
    assert model.loss_curve_[-1] < 0.8 * one.loss_curve_[-1]


# ------------------------------------------------------------------------- large n


def test_auto_switches_to_minibatches_against_a_key_subsample_above_large_n(monkeypatch):
    import kernattn.learned._optimize as optimize_module
    import kernattn.learned._regressor as regressor_module

    monkeypatch.setattr(regressor_module, "LARGE_N", 500)
    monkeypatch.setattr(regressor_module, "AUTO_KEY_SUBSAMPLE", 100)
    calls = []
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=600)
    model = AttentionRegressor(max_iter=3, batch_size=50, random_state=0)
    run_adam = optimize_module.run_adam

    def spy(loss_and_grad, *args, **kwargs):
        def recorded(theta, queries, keys):
            calls.append((len(queries), len(keys)))
            return loss_and_grad(theta, queries, keys)

        return run_adam(recorded, *args, **kwargs)

    monkeypatch.setattr(optimize_module, "run_adam", spy)
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        model.fit(X, y)
    # 3 iterations of 32 steps, each of 50 queries against 100 keys.
    assert model.n_iter_ == 3 and len(model.loss_curve_) == 3
    assert calls == [(50, 100)] * 96
    # Below the threshold: L-BFGS against every key.
    calls.clear()
    fit_quiet(AttentionRegressor(max_iter=3), X[:400], y[:400])
    assert calls == []


def test_verbose_prints_iteration_of_max_loss_and_elapsed_time(smooth_task, capsys):
    X, y = smooth_task
    fit_quiet(AttentionRegressor(max_iter=3, verbose=1), X, y)
    lines = [line for line in capsys.readouterr().out.splitlines() if "loss =" in line]
    assert lines[0].startswith("Iteration 1/3, loss = ")
    assert "elapsed = " in lines[0] and lines[0].endswith(" s")


def test_width_calibration_scales_projections_to_lower_the_loss_against_all_keys():
    from kernattn.learned._optimize import calibrate_width

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 2))
    Y = (np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=600))[:, None]
    layout = Layout(1, 2, 2, 1, True, False)
    objective = LeaveOneOutObjective(
        X, Y - Y.mean(), np.ones(600), DuplicateGroups(X), layout, "gaussian", [1.0], 0.0
    )
    theta = layout.pack(0.3 * np.eye(2)[None], None, None, np.ones(1), None)  # too wide
    mask = np.zeros(layout.size, dtype=bool)
    mask[layout.slices["query"]] = True
    train = np.arange(600)
    calibrated = calibrate_width(objective, theta, mask, train, check_random_state(0))
    factor = calibrated[mask][0] / theta[mask][0]
    np.testing.assert_allclose(calibrated[mask], factor * theta[mask])  # one common factor
    assert factor > 1.2
    assert objective.loss(calibrated) < objective.loss(theta)
