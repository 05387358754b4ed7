"""LinearAttentionRegressor: agreement with exact smoothing, partial_fit, numerics, kernels."""

import pickle
import re
import warnings

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn.base import clone

from kernattn import (
    AttentionRegressor,
    BandwidthWarning,
    KernelSmoother,
    LinearAttentionRegressor,
)
from kernattn._engine.heads import SoftmaxHeads
from kernattn.bandwidth import loo_bandwidth
from kernattn.feature_maps import NystroemFeatures, PositiveRandomFeatures
from kernattn.linear._near_search import weight_errors
from kernattn.linear._projection import FeatureLeaveOneOut

# Many tests here use random features at small bandwidths on purpose; the warning that
# prediction is then no longer linear-time has its own tests in test_linear.py.
pytestmark = pytest.mark.filterwarnings("ignore::kernattn.linear.NotLinearTimeWarning")


def _data(n=400, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    y = np.sin(2 * X[:, 0]) + X[:, -1] ** 2 + 0.1 * rng.standard_normal(n)
    return X, y


def _exact_count(record):
    counts = [
        int(re.match(r"(\d+) of", str(w.message)).group(1))
        for w in record
        if "denominator" in str(w.message)
    ]
    return sum(counts)


# ------------------------------------------------------- agreement with exact


@pytest.mark.parametrize("feature_map", ["positive", "hyperbolic", "trig"])
def test_large_r_close_to_kernel_smoother(feature_map):
    X, y = _data()
    exact = KernelSmoother(bandwidth=1.0).fit(X, y)
    linear = LinearAttentionRegressor(
        feature_map=feature_map, n_components=8192, bandwidth=1.0, random_state=0
    ).fit(X, y)
    Xq = _data(100, seed=1)[0]
    mean, std = linear.predict(Xq, return_std=True)
    exact_mean, exact_std = exact.predict(Xq, return_std=True)
    assert np.max(np.abs(mean - exact_mean)) < 0.03
    assert np.max(np.abs(std - exact_std)) < 0.03


def test_error_shrinks_with_r():
    X, y = _data()
    exact = KernelSmoother(bandwidth=1.5).fit(X, y).predict(X)
    errors = [
        np.mean(
            [
                np.sqrt(
                    np.mean(
                        (
                            LinearAttentionRegressor(
                                feature_map="positive",
                                n_components=r,
                                bandwidth=1.5,
                                random_state=s,
                            )
                            .fit(X, y)
                            .predict(X)
                            - exact
                        )
                        ** 2
                    )
                )
                for s in range(3)
            ]
        )
        for r in (64, 1024)
    ]
    assert errors[1] < 0.5 * errors[0]


@pytest.mark.parametrize("bandwidth", [0.05, 0.3, 2.0])
def test_positive_outputs_inside_target_range(bandwidth):
    X, y = _data(300, d=3)
    model = LinearAttentionRegressor(
        feature_map="positive", bandwidth=bandwidth, random_state=0
    ).fit(X, y)
    rng = np.random.default_rng(3)
    Xq = np.vstack([rng.uniform(-3, 3, (200, 3)), [[1e6, -1e6, 1e6]]])
    # The last query is far beyond the reach of the features (and, at small bandwidths, so
    # are queries outside the data): predict falls back to the training mean and says so.
    with pytest.warns(UserWarning, match="linear-attention denominator"):
        pred = model.predict(Xq)
    assert np.all(pred >= y.min() - 1e-12) and np.all(pred <= y.max() + 1e-12)


def test_optimal_features_closer_to_exact_at_small_bandwidth():
    X, y = _data(1000, d=3)
    Xq = _data(200, d=3, seed=5)[0]
    exact = KernelSmoother(bandwidth=0.3).fit(X, y).predict(Xq)
    errors = {}
    for feature_map in ("positive", "optimal"):
        errors[feature_map] = np.mean(
            [
                np.mean(
                    (
                        LinearAttentionRegressor(
                            feature_map=feature_map, bandwidth=0.3, random_state=s
                        )
                        .fit(X, y)
                        .predict(Xq)
                        - exact
                    )
                    ** 2
                )
                for s in range(3)
            ]
        )
    assert errors["optimal"] < 0.7 * errors["positive"]


def test_predict_is_attention_weights_times_targets():
    X, y = _data(200)
    w = np.random.default_rng(0).integers(0, 3, len(y)).astype(float)
    model = LinearAttentionRegressor(feature_map="positive", bandwidth=0.5, random_state=0).fit(
        X, y, sample_weight=w
    )
    Xq = X[:20] + 0.05
    weights = model.attention_weights(Xq)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(weights[:, w == 0] == 0)
    mean, std = model.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, weights @ y, rtol=1e-10, atol=1e-12)
    spread = np.sqrt(np.sum(weights * (y[None, :] - mean[:, None]) ** 2, axis=1))
    np.testing.assert_allclose(std, spread, rtol=1e-7, atol=1e-10)


def test_implied_weights_match_feature_formula():
    X, y = _data(50)
    model = LinearAttentionRegressor(
        feature_map="positive", n_components=16, bandwidth=0.7, random_state=2
    ).fit(X, y)
    phi = model.feature_maps_[0]
    Q = (X[:5] + 0.1 - model.center_) / model.bandwidth_
    K = (X - model.center_) / model.bandwidth_
    kernel = phi.transform(Q) @ (phi.transform(K) * np.exp(-0.5 * np.sum(K**2, axis=1))[:, None]).T
    np.testing.assert_allclose(
        model.attention_weights(X[:5] + 0.1), kernel / kernel.sum(axis=1, keepdims=True), rtol=1e-9
    )


@pytest.mark.parametrize("feature_map", ["positive", "nystroem"])
def test_same_seed_same_predictions_and_pickle(feature_map):
    X, y = _data(100)
    params = dict(feature_map=feature_map, n_components=32, random_state=5)
    a = LinearAttentionRegressor(**params).fit(X, y)
    b = LinearAttentionRegressor(**params).fit(X, y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)).predict(X), a.predict(X))


# ------------------------------------------------------------------ partial_fit


def _chunk_task():
    """Two-output data in 3-D with weights, keys in order of norm (the last chunk holds the
    farthest keys, so the global key constant has to grow)."""
    X, y = _data(300, d=3)
    Y = np.column_stack([y, np.cos(X[:, 1])])
    w = np.random.default_rng(1).uniform(0, 2, len(X))
    order = np.argsort(np.linalg.norm(X, axis=1))
    return X[order], Y[order], w[order]


def _fit_whole_and_in_chunks(params, X, Y, w):
    full = LinearAttentionRegressor(**params).fit(X, Y, sample_weight=w)
    chunked = LinearAttentionRegressor(**params)
    for rows in np.array_split(np.arange(len(X)), [7, 120, 121]):
        chunked.partial_fit(X[rows], Y[rows], sample_weight=w[rows])
    return full, chunked


def _assert_same_predictions(full, chunked):
    Xq = _data(50, d=3, seed=9)[0]
    with warnings.catch_warnings():
        # No query may need the exact fallback here: after partial_fit it has no keys.
        warnings.simplefilter("error", UserWarning)
        for a, b in zip(
            full.predict(Xq, return_std=True), chunked.predict(Xq, return_std=True), strict=True
        ):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "feature_map", ["positive", "trig", "elu", PositiveRandomFeatures(64, hyperbolic=True, A=-0.3)]
)
def test_partial_fit_on_chunks_equals_fit(feature_map):
    X, Y, w = _chunk_task()
    params = dict(
        feature_map=feature_map,
        n_components=64,
        bandwidth=[1.8, 2.2, 2.0],
        center=[0.1, -0.2, 0.0],
        random_state=3,
    )
    full, chunked = _fit_whole_and_in_chunks(params, X, Y, w)
    _assert_same_predictions(full, chunked)


def test_partial_fit_fixes_center_from_first_chunk_and_keeps_no_keys():
    X, y = _data(100)
    model = LinearAttentionRegressor(feature_map="positive", random_state=0).partial_fit(
        X[:40], y[:40]
    )
    model.partial_fit(X[40:], y[40:])
    np.testing.assert_allclose(model.center_, X[:40].mean(axis=0))
    assert not hasattr(model, "X_fit_")
    assert model.n_features_in_ == 2
    with pytest.raises(RuntimeError, match="partial_fit keeps only the sums"):
        model.attention_weights(X[:2])


def test_partial_fit_after_fit_adds_to_sums():
    X, y = _data(120)
    params = dict(feature_map="positive", bandwidth=0.8, center=[0.0, 0.0], random_state=1)
    a = LinearAttentionRegressor(**params).fit(X[:60], y[:60]).partial_fit(X[60:], y[60:])
    b = LinearAttentionRegressor(**params).fit(X, y)
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=1e-10)


def test_partial_fit_rejects_inconsistent_chunks_and_keeps_state():
    X, y = _data(60)
    model = LinearAttentionRegressor(feature_map="positive", random_state=0).partial_fit(
        X[:30], y[:30]
    )
    before = model.predict(X)
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(X[30:, :1], y[30:])
    with pytest.raises(ValueError, match="shape"):
        model.partial_fit(X[30:], np.column_stack([y[30:], y[30:]]))
    np.testing.assert_array_equal(model.predict(X), before)


# ------------------------------------------------------------------- numerics


def test_far_queries_finite_and_get_nearest_region():
    X, y = _data(200)
    model = LinearAttentionRegressor(feature_map="positive", bandwidth=0.3, random_state=0).fit(
        X, y
    )
    far = np.array([[1e6, 0.0], [-1e8, 1e8], [0.0, -1e12]])
    # Beyond the reach of every key the features extrapolate: these rows are computed
    # exactly, so they get what the exact smoother gives there (its nearest training target).
    with pytest.warns(UserWarning, match="3 of 3 queries"):
        mean, std = model.predict(far, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    exact_mean, exact_std = KernelSmoother(bandwidth=0.3).fit(X, y).predict(far, return_std=True)
    np.testing.assert_allclose(mean, exact_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std, exact_std, rtol=1e-12, atol=1e-12)


def test_huge_inputs_same_as_rescaled_inputs():
    X, y = _data(200, d=3)
    small = LinearAttentionRegressor(feature_map="positive", random_state=0).fit(X, y)
    huge = LinearAttentionRegressor(feature_map="positive", random_state=0).fit(X * 1e150, y)
    pred = huge.predict(X[:30] * 1e150)
    assert np.all(np.isfinite(pred))
    np.testing.assert_allclose(pred, small.predict(X[:30]), rtol=1e-8)


def test_zero_denominators_fall_back_to_exact_kernel():
    X, y = _data(200)
    model = LinearAttentionRegressor(feature_map="relu", bandwidth=0.4, random_state=0)
    model.fit(X, y)
    # relu(q) = 0 for a query below the center in every coordinate: φ(q)ᵀz = 0.
    Xq = model.center_ - np.array([[0.1, 0.3], [0.5, 0.01], [0.2, 0.2]])
    with pytest.warns(UserWarning, match="3 of 3 queries"):
        mean, std = model.predict(Xq, return_std=True)
    exact_mean, exact_std = KernelSmoother(bandwidth=0.4).fit(X, y).predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, exact_mean, rtol=1e-10)
    np.testing.assert_allclose(std, exact_std, rtol=1e-8)
    weights = model.attention_weights(Xq)
    exact_weights = KernelSmoother(bandwidth=0.4).fit(X, y).attention_weights(Xq)
    np.testing.assert_allclose(weights, exact_weights, rtol=1e-10, atol=1e-300)


def test_signed_feature_denominators_fall_back_and_stay_finite():
    X, y = _data(300, d=3)
    model = LinearAttentionRegressor(
        feature_map="trig", n_components=16, bandwidth=0.15, random_state=0
    ).fit(X, y)
    Xq = _data(200, d=3, seed=4)[0]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pred = model.predict(Xq)
    n_exact = _exact_count(record)
    assert 0 < n_exact <= len(Xq)
    assert np.all(np.isfinite(pred))
    exact = KernelSmoother(bandwidth=0.15).fit(X, y).predict(Xq)
    assert np.sum(np.abs(pred - exact) < 1e-9) >= n_exact


def test_fallback_without_keys_gives_training_mean():
    X, y = _data(100)
    model = LinearAttentionRegressor(feature_map="relu", center=[0.0, 0.0], random_state=0)
    model.partial_fit(X[:50], y[:50]).partial_fit(X[50:], y[50:])
    with pytest.warns(UserWarning, match="training mean"):
        pred = model.predict([[-0.5, -0.5]])
    np.testing.assert_allclose(pred, y.mean(), rtol=1e-12)


# --------------------------------------------------------------- kernels


class _FittedAttention(AttentionRegressor):
    """An AttentionRegressor reduced to the fitted contract the linear estimator reads: its
    kernel_ (the softmax heads) and head_bias_ (in target units), here a plain attribute."""

    head_bias_ = None


def _fitted_attention(similarity, X, n_heads=2, head_dim=2, seed=0):
    """A _FittedAttention with random heads on standardized inputs."""
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    query_weights = 0.3 * rng.standard_normal((n_heads, d, head_dim))
    key_weights = 0.3 * rng.standard_normal((n_heads, d, head_dim))
    temperature = rng.uniform(0.8, 1.5, n_heads)
    model = _FittedAttention(similarity=similarity)
    model.kernel_ = SoftmaxHeads(
        similarity=similarity,
        center=X.mean(axis=0),
        input_scale=X.std(axis=0),
        query_weights=query_weights,
        key_weights=key_weights,
        scale=1.0 / temperature,
        head_weights=np.array([0.7, 0.5])[:n_heads],
        head_bias=np.zeros(1),
        keys=X,
        log_sample_weight=np.zeros(len(X)),
    )
    model.head_bias_ = np.array([0.2])
    return model


def _exact_attention(model, X, y, Xq):
    """Multi-head softmax Nadaraya–Watson estimate, straight from the contract."""
    heads = model.kernel_
    Z, Zq = (X - heads.center) / heads.input_scale, (Xq - heads.center) / heads.input_scale
    out = np.full(len(Xq), model.head_bias_[0])
    for h in range(len(heads.head_weights)):
        Q, K = Zq @ heads.query_weights[h], Z @ heads.key_weights[h]
        tau = 1.0 / heads.scale[h]
        if heads.similarity == "dot":
            logits = Q @ K.T / tau
        elif heads.similarity == "cosine":
            Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
            K = K / np.linalg.norm(K, axis=1, keepdims=True)
            logits = Q @ K.T / tau
        else:
            logits = -0.5 * np.sum((Q[:, None] - K[None]) ** 2, axis=2) / tau
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        out += heads.head_weights[h] * (w @ y) / w.sum(axis=1)
    return out


@pytest.mark.parametrize("similarity", ["dot", "cosine", "gaussian"])
def test_attention_kernel_approaches_exact_multi_head_estimate(similarity):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -2.0]
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    attention = _fitted_attention(similarity, X)
    Xq = rng.normal(size=(40, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -2.0]
    exact = _exact_attention(attention, X, y, Xq)
    errors = []
    for r in (64, 16384):
        model = LinearAttentionRegressor(
            feature_map="positive", kernel=attention, n_components=r, random_state=0
        )
        errors.append(np.sqrt(np.mean((model.fit(X, y).predict(Xq) - exact) ** 2)))
    assert errors[1] < 0.02
    assert errors[1] < 0.3 * errors[0]


def test_attention_kernel_weights_are_mixture_of_heads():
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(80, 3)), rng.normal(size=80)
    attention = _fitted_attention("dot", X)
    model = LinearAttentionRegressor(
        feature_map="positive", kernel=attention, n_components=32, random_state=0
    ).fit(X, y)
    weights = model.attention_weights(X[:5])
    np.testing.assert_allclose(weights.sum(axis=1), 1.2, rtol=1e-12)
    np.testing.assert_allclose(model.predict(X[:5]), weights @ y + 0.2, rtol=1e-10)


class _AttentionToFit(_FittedAttention):
    """An unfitted stand-in: fit sets the contract and records how many rows it saw."""

    def fit(self, X, y, sample_weight=None):
        fitted = _fitted_attention("gaussian", X)
        self.kernel_, self.head_bias_ = fitted.kernel_, fitted.head_bias_
        self.n_seen_ = len(X)
        return self


def test_unfitted_attention_model_is_fitted_on_subsample():
    X, y = _data(500, d=3)
    model = LinearAttentionRegressor(
        feature_map="positive", kernel=_AttentionToFit(), n_subsample=100, random_state=0
    )
    model.fit(X, y)
    assert model.attention_model_.n_seen_ == 100
    assert np.all(np.isfinite(model.predict(X[:10])))


@pytest.mark.parametrize(
    "options", [dict(warp=3), dict(degree=1), dict(tilt=True, degree=0), dict(tilt="trend")]
)
def test_attention_model_beyond_the_softmax_is_rejected(options):
    learned = pytest.importorskip("kernattn.learned")
    X, y = _data(120, d=2)
    model = LinearAttentionRegressor(feature_map="positive", random_state=0).fit(X, y)
    before = model.predict(X[:5])
    attention = learned.AttentionRegressor(random_state=0, **options)
    for kernel in (attention, clone(attention).fit(X, y)):
        with pytest.raises(ValueError, match=next(iter(options))):
            model.set_params(kernel=kernel).fit(X, y)
        # The failed fit leaves the fitted estimator as it was.
        np.testing.assert_array_equal(model.predict(X[:5]), before)


def test_attention_model_auto_options_mean_the_plain_softmax():
    learned = pytest.importorskip("kernattn.learned")
    X, y = _data(120, d=2)
    # Unfitted, "auto" tilt and warp are fitted as none: the features estimate the softmax.
    model = LinearAttentionRegressor(
        feature_map="positive", kernel=learned.AttentionRegressor(random_state=0), random_state=0
    ).fit(X, y)
    assert model.attention_model_.tilt_ is False and model.attention_model_.warp_ == 0
    # Fitted on two features, the local constant is tilted: that model is rejected.
    fitted = learned.AttentionRegressor(degree=0, random_state=0).fit(X, y)
    assert fitted.tilt_ == "slope"
    with pytest.raises(ValueError, match="tilt='slope'"):
        model.set_params(kernel=fitted).fit(X, y)


def test_attention_regressor_fitted_inside_fit_or_used_as_given():
    learned = pytest.importorskip("kernattn.learned")
    X, y = _data(300, d=3)
    model = LinearAttentionRegressor(
        feature_map="positive", kernel="attention", n_subsample=100, random_state=0
    )
    model.fit(X, y)
    assert isinstance(model.attention_model_, learned.AttentionRegressor)
    assert np.all(np.isfinite(model.predict(X[:20])))
    given = model.attention_model_
    again = LinearAttentionRegressor(feature_map="positive", kernel=given, random_state=0).fit(
        X, y
    )
    assert again.attention_model_ is given
    np.testing.assert_allclose(again.query_projection_, model.query_projection_)


# ------------------------------------------------------- learned projection


def test_projection_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((60, 3))
    Z[10] = Z[11]  # a duplicated input is left out together with its twin
    V, w = rng.standard_normal((60, 2)), rng.uniform(0.5, 2.0, 60)
    omega = (
        PositiveRandomFeatures(32, hyperbolic=True).fit(np.zeros((1, 2)), random_state=0).omega_
    )
    objective = FeatureLeaveOneOut(Z, V, w, omega)
    P = 0.5 * rng.standard_normal((3, 2))
    gradient = objective.loss_and_grad(P.ravel())[1]
    error = check_grad(
        lambda p: objective.loss_and_grad(p)[0],
        lambda p: objective.loss_and_grad(p)[1],
        P.ravel(),
        epsilon=1e-7,
    )
    assert error < 1e-5 * np.linalg.norm(gradient)


def test_projection_loss_is_leave_one_out_of_the_feature_estimate():
    rng = np.random.default_rng(1)
    Z, V = rng.standard_normal((30, 2)), rng.standard_normal((30, 1))
    w = rng.uniform(0.5, 2.0, 30)
    phi = PositiveRandomFeatures(16).fit(np.zeros((1, 2)), random_state=0)
    P = np.array([[0.8, 0.1], [0.0, 0.6]])
    U = Z @ P
    keys = phi.transform(U) * (w * np.exp(-0.5 * np.sum(U**2, axis=1)))[:, None]
    kernel = phi.transform(U) @ keys.T
    np.fill_diagonal(kernel, 0.0)
    Vc = V - np.average(V, axis=0, weights=w)
    loo = kernel @ Vc / kernel.sum(axis=1, keepdims=True)
    expected = np.sum(w[:, None] * (loo - Vc) ** 2) / w.sum()
    loss = FeatureLeaveOneOut(Z, V, w, phi.omega_).loss_and_grad(P.ravel())[0]
    assert loss == pytest.approx(expected, rel=1e-10)


def test_learned_projection_lowers_loo_error_and_ignores_noise_feature():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(300)
    model = LinearAttentionRegressor(
        feature_map="positive",
        learn_projection=True,
        n_components=128,
        bandwidth=1.0,
        random_state=0,
    ).fit(X, y)
    start = FeatureLeaveOneOut(
        X - model.center_, y[:, None], np.ones(300), model.feature_maps_[0].omega_
    ).loss_and_grad(np.eye(2).ravel())[0]
    assert model.loo_error_ < 0.8 * start
    P = model.query_projection_[0]
    assert np.linalg.norm(P[1]) < 0.5 * np.linalg.norm(P[0])


# ------------------------------------------------------------------ parameters


def test_loo_bandwidth_on_small_data_matches_kernel_smoother():
    X, y = _data(80)
    model = LinearAttentionRegressor(feature_map="positive", bandwidth="loo", random_state=0).fit(
        X, y
    )
    np.testing.assert_allclose(
        model.bandwidth_, KernelSmoother(bandwidth="loo").fit(X, y).bandwidth_, rtol=1e-10
    )


def test_array_bandwidth_same_as_kernel_smoother():
    X, y = _data(200)
    h = np.array([0.9, 1.3])
    model = LinearAttentionRegressor(
        feature_map="positive", n_components=8192, bandwidth=h, random_state=0
    ).fit(X, y)
    np.testing.assert_array_equal(model.bandwidth_, h)
    exact = KernelSmoother(bandwidth=h).fit(X, y).predict(X[:20])
    assert np.max(np.abs(model.predict(X[:20]) - exact)) < 0.05


def test_loo_bandwidth_on_subsample_scaled_to_full_size():
    X, y = _data(400)
    model = LinearAttentionRegressor(
        feature_map="positive", bandwidth="loo", n_subsample=100, random_state=0
    )
    model.fit(X, y)
    assert np.all(np.isfinite(model.bandwidth_)) and np.all(model.bandwidth_ > 0)
    # The same subsample (the first draw of the seed), searched exactly, then Scott's rate.
    rows = np.sort(np.random.RandomState(0).choice(400, 100, replace=False))
    h_subsample, loo_error, _ = loo_bandwidth(X[rows], y[rows])
    np.testing.assert_allclose(
        model.bandwidth_, h_subsample * (100 / 400) ** (1 / (2 + 4)), rtol=1e-12
    )
    assert model.loo_error_ == loo_error


def test_loo_bandwidth_on_subsample_reports_an_irrelevant_feature():
    rng = np.random.default_rng(6)
    # Feature 1 is an integer code the target ignores: its bandwidth goes to the upper edge.
    X = np.column_stack([rng.uniform(-1, 1, size=300), rng.integers(0, 3, size=300)])
    y = np.sin(3 * X[:, 0])
    model = LinearAttentionRegressor(
        feature_map="positive", bandwidth="loo", n_subsample=150, random_state=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", BandwidthWarning)
        model.fit(X, y)
    np.testing.assert_array_equal(model.irrelevant_features_, [False, True])


def test_loo_bandwidth_on_a_subsample_warns_at_the_lower_edge(monkeypatch):
    import kernattn.linear._recipe as linear_module

    X = np.random.default_rng(0).uniform(-1, 1, (600, 2))
    y = np.sin(3 * X[:, 0])
    real = linear_module.select_bandwidth

    def on_the_lower_edge(*args, **kwargs):
        return real(*args, **kwargs)._replace(lower_edge=np.array([True, False]))

    monkeypatch.setattr(linear_module, "select_bandwidth", on_the_lower_edge)
    model = LinearAttentionRegressor(bandwidth="loo", n_subsample=200, random_state=0)
    with pytest.warns(
        BandwidthWarning,
        match=r"LinearAttentionRegressor\(bandwidth='loo'\).*feature\(s\) \[0\].*lower end"
        r".*searched on 200 of the 600 rows",
    ):
        model.fit(X, y)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"feature_map": "softplus"}, ValueError, "feature_map.* must be"),
        ({"feature_map": 3}, TypeError, "feature_map.* must be"),
        ({"n_components": 0}, ValueError, "n_components.* must be an int"),
        ({"orthogonal": "yes"}, TypeError, "orthogonal.* must be .*bool"),
        ({"bandwidth": "nope"}, ValueError, "bandwidth.* must be .*float"),
        ({"bandwidth": [1.0]}, ValueError, "bandwidth must be"),
        ({"kernel": "rbf"}, ValueError, "kernel.* must be .*'gaussian'"),
        ({"kernel": 1.5}, TypeError, "kernel.* must be .*'gaussian'"),
        ({"learn_projection": True, "feature_map": "trig"}, ValueError, "positive random"),
        ({"center": [0.0]}, ValueError, "center must be None"),
        ({"feature_map": "trig", "n_components": 0}, ValueError, "n_components"),
        (
            {"feature_map": NystroemFeatures(landmarks=np.zeros((3, 5)))},
            ValueError,
            r"shape \(n, 2\)",
        ),
        ({"feature_map": NystroemFeatures(rcond=2.0)}, ValueError, "rcond must be"),
    ],
)
def test_bad_parameters_raise_and_keep_earlier_fit(params, error, match):
    X, y = _data(50)
    model = LinearAttentionRegressor(feature_map="positive", random_state=0).fit(X, y)
    before = model.predict(X)
    model.set_params(**params)
    with pytest.raises(error, match=match):
        model.fit(X, y)
    np.testing.assert_array_equal(model.predict(X), before)


def test_parameter_constraints_cover_every_parameter():
    params = LinearAttentionRegressor(feature_map="positive").get_params()
    assert set(LinearAttentionRegressor._parameter_constraints) == set(params)


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_rbf_sampler_is_rejected_naming_feature_map_before_any_work(method):
    from sklearn.kernel_approximation import RBFSampler

    X, y = _data(50)
    X[0, 0] = np.nan  # the data would be rejected too, had they been looked at
    model = LinearAttentionRegressor(feature_map=RBFSampler())
    with pytest.raises(TypeError, match="feature_map"):
        getattr(model, method)(X, y)
    assert not hasattr(model, "n_features_in_") and not hasattr(model, "kernel_")


def test_changing_the_callers_data_after_fit_changes_nothing():
    X, y = _data(200)
    model = LinearAttentionRegressor(feature_map="relu", bandwidth=0.4, random_state=0)
    model.fit(X, y)
    # relu features give these queries a zero denominator: they are computed exactly, from
    # the training keys and targets the estimator holds.
    Xq = model.center_ - np.array([[0.1, 0.3], [0.5, 0.01]])
    Xq = np.vstack([Xq, X[:5] + 0.05])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        before = model.predict(Xq, return_std=True)
        weights = model.attention_weights(Xq)
        X[:] = X[::-1] + 3.0
        y[:] = -y
        after = model.predict(Xq, return_std=True)
        np.testing.assert_array_equal(model.attention_weights(Xq), weights)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_n_jobs_does_not_change_predictions():
    X, y = _data(300)
    # Enough query-feature pairs for prediction to run on threads, and far queries that go
    # through the exact path inside them.
    Xq = np.vstack([_data(6000, seed=7)[0] * 1.2, [[40.0, 0.0], [0.0, -60.0]]])
    results = []
    for n_jobs in (1, 2):
        model = LinearAttentionRegressor(
            feature_map="positive", bandwidth=0.3, random_state=0, n_jobs=n_jobs
        )
        model.fit(X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            mean, std = model.predict(Xq, return_std=True)
            results.append((mean, std, model.attention_weights(Xq[-50:])))
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------- Nyström


def _smooth_gaussian_data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.1 * rng.standard_normal(n)
    return X, y


def test_nystroem_tracks_kernel_smoother_at_small_bandwidth():
    # Bandwidth 0.3 next to a spread of 1 in 3-D: positive features are a coarser smoother.
    X, y = _smooth_gaussian_data(2000, seed=0)
    Xq = _smooth_gaussian_data(300, seed=1)[0]
    exact = KernelSmoother(bandwidth=0.3).fit(X, y).predict(Xq)
    errors = {
        name: np.mean(
            (
                LinearAttentionRegressor(feature_map=name, bandwidth=0.3, random_state=0)
                .fit(X, y)
                .predict(Xq)
                - exact
            )
            ** 2
        )
        for name in ("nystroem", "positive")
    }
    assert errors["nystroem"] < 0.05 * errors["positive"]
    assert errors["nystroem"] < 0.02 * np.var(y)


def test_nystroem_at_large_bandwidth_drops_rank_and_matches_kernel_smoother():
    X, y = _data(300)
    Xq = _data(50, seed=9)[0]
    # The Nyström features alone (on 300 rows the default computes every weight exactly).
    model = LinearAttentionRegressor(
        feature_map="nystroem", n_components=64, n_near_keys=0, bandwidth=10.0, random_state=0
    ).fit(X, y)
    assert model.feature_maps_[0].rank_ < 64
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        mean, std = model.predict(Xq, return_std=True)
    exact_mean, exact_std = KernelSmoother(bandwidth=10.0).fit(X, y).predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, exact_mean, atol=1e-8)
    np.testing.assert_allclose(std, exact_std, atol=1e-7)


def test_nystroem_attention_weights_sum_to_one_and_give_predict():
    X, y = _data(300)
    w = np.random.default_rng(0).integers(0, 3, len(y)).astype(float)
    model = LinearAttentionRegressor(
        feature_map="nystroem", n_components=64, bandwidth=0.3, random_state=0
    ).fit(X, y, sample_weight=w)
    Xq = X[:20] + 0.05
    weights = model.attention_weights(Xq)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=0, atol=1e-8)
    assert np.all(weights[:, w == 0] == 0)
    # Prediction takes the near field's exponentials in single precision (relative 6e-8).
    np.testing.assert_allclose(model.predict(Xq), weights @ y, rtol=1e-6, atol=1e-7)


def test_nystroem_std_is_clipped_weighted_spread():
    X, y = _data(300)
    model = LinearAttentionRegressor(
        feature_map="nystroem", n_components=64, n_near_keys=0, bandwidth=0.3, random_state=0
    ).fit(X, y)
    Xq = np.vstack([_data(50, seed=9)[0], [[3.0, 3.0], [-2.0, 5.0]]])
    # The last two queries are over 6 bandwidths from every landmark: computed exactly.
    with pytest.warns(UserWarning, match="2 of 52 queries"):
        mean, std = model.predict(Xq, return_std=True)
    assert np.all(np.isfinite(std))
    # Signed weights: the weighted spread can come out negative and is clipped at 0.
    weights = model.attention_weights(Xq)
    spread = np.sum(weights * (y[None, :] - mean[:, None]) ** 2, axis=1)
    np.testing.assert_allclose(std, np.sqrt(np.maximum(spread, 0.0)), rtol=1e-7, atol=1e-7)


def test_nystroem_landmarks_come_from_subsample_of_projected_positive_weight_keys():
    X, y = _data(300)
    w = np.where(np.arange(300) % 3 == 0, 0.0, 1.0)
    model = LinearAttentionRegressor(
        feature_map=NystroemFeatures(100, landmarks="random"),
        n_near_keys=0,
        bandwidth=0.4,
        n_subsample=50,
        random_state=0,
    ).fit(X, y, sample_weight=w)
    landmarks = model.feature_maps_[0].landmarks_
    # A subsample of 50 distinct keys, fewer than 100 landmarks: all of them are used.
    assert landmarks.shape == (50, 2)
    keys = (X - model.center_) / model.bandwidth_
    squared = np.sum((landmarks[:, None] - keys[None]) ** 2, axis=2)
    nearest = np.argmin(squared, axis=1)
    np.testing.assert_allclose(landmarks, keys[nearest], rtol=1e-12, atol=1e-12)
    assert len(np.unique(nearest)) == 50 and np.all(w[nearest] > 0)


def test_nystroem_partial_fit_with_given_landmarks_equals_fit():
    X, Y, w = _chunk_task()
    landmarks = np.random.default_rng(2).uniform(-2.5, 2.5, (40, 3))
    params = dict(
        feature_map=NystroemFeatures(landmarks=landmarks),
        n_near_keys=0,
        bandwidth=0.5,
        center=[0.1, -0.2, 0.0],
        random_state=3,
    )
    full, chunked = _fit_whole_and_in_chunks(params, X, Y, w)
    np.testing.assert_array_equal(chunked.feature_maps_[0].landmarks_, landmarks)
    _assert_same_predictions(full, chunked)


def test_nystroem_partial_fit_fixes_landmarks_at_first_chunk():
    X, y = _data(600)
    model = LinearAttentionRegressor(feature_map="nystroem", n_components=32, random_state=0)
    model.partial_fit(X[:200], y[:200])
    first = model.feature_maps_[0].landmarks_.copy()
    # Later chunks lie elsewhere: landmarks chosen again would move towards them.
    model.partial_fit(X[200:400] + 3.0, y[200:400]).partial_fit(X[400:] - 3.0, y[400:])
    np.testing.assert_array_equal(model.feature_maps_[0].landmarks_, first)
    keys = (X[:200] - model.center_) / model.bandwidth_
    assert np.all(first >= keys.min(axis=0)) and np.all(first <= keys.max(axis=0))


def test_nystroem_far_queries_are_computed_exactly_and_finite():
    # Far from every landmark the Nyström estimate is an extrapolation: those queries are
    # computed exactly, so they get what the exact smoother gives (the nearest target).
    X, y = _data(300)
    model = LinearAttentionRegressor(
        feature_map="nystroem", n_components=64, n_near_keys=0, bandwidth=0.3, random_state=0
    ).fit(X, y)
    far = np.array([[1e6, 0.0], [-1e8, 1e8], [0.0, -1e12], [1e300, -1e300], [1e300, 1e300]])
    with pytest.warns(UserWarning, match=f"{len(far)} of {len(far)} queries"):
        mean, std = model.predict(far, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    exact = KernelSmoother(bandwidth=0.3).fit(X, y).predict(far[:3])
    np.testing.assert_allclose(mean[:3], exact, atol=1e-10)


def test_nystroem_nan_input_raises():
    X, y = _data(100)
    model = LinearAttentionRegressor(feature_map="nystroem", n_components=16, random_state=0)
    X_nan = X.copy()
    X_nan[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.fit(X_nan, y)
    model.fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        model.predict([[np.nan, 0.0]])


# ------------------------------------------------------------------ near field


@pytest.fixture
def split_always(monkeypatch):
    """The near field at sizes where ``n_near_keys="auto"`` computes every weight exactly
    (the split would cost more there): these tests are about the split itself."""
    import kernattn.linear._cost as cost_module
    import kernattn.linear._regressor as linear_module

    monkeypatch.setattr(linear_module, "EXACT_ROWS", 0)
    monkeypatch.setattr(cost_module, "SPLIT_MARGIN", np.inf)


def _cloud(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    return X, np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)


@pytest.mark.parametrize("bandwidth", [0.08, 0.3])
def test_split_weights_against_dense_exact_weights_within_reported_error(bandwidth, split_always):
    X, y = _cloud()
    Xq = _cloud(300, seed=1)[0]
    model = LinearAttentionRegressor(bandwidth=bandwidth, random_state=0).fit(X, y)
    exact = KernelSmoother(bandwidth=bandwidth).fit(X, y).attention_weights(Xq)
    weights = model.attention_weights(Xq)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-10)
    errors = np.abs(weights - exact).sum(axis=1)
    # The reported error is the mean over left-out training rows; new queries agree with it.
    assert errors.mean() <= 1.5 * model.weight_error_ + 0.01
    assert model.weight_error_ <= model.tol
    # Prediction takes the near field's exponentials in single precision (relative 6e-8).
    np.testing.assert_allclose(model.predict(Xq), weights @ y, rtol=1e-6, atol=1e-7)


def test_near_field_weights_are_exact_kernel_values_and_positive():
    X, y = _cloud(1000)
    Xq = _cloud(50, seed=2)[0]
    model = LinearAttentionRegressor(bandwidth=0.1, n_near_keys=200, random_state=0).fit(X, y)
    kernel = model.kernel_
    weights = model.attention_weights(Xq)
    exact = np.exp(-0.5 * np.sum(((Xq[:, None] - X[None]) / 0.1) ** 2, axis=2))
    cells = kernel.cells_of(kernel.far.project(Xq, 0, "query"))
    for i, c in enumerate(cells):
        near = kernel.near_keys["order"][kernel.near_rows(c)]
        assert np.all(weights[i, near] > 0)
        # On the near keys the weights are the exact kernel's, up to one factor per query.
        ratio = weights[i, near] / exact[i, near]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_near_field_covering_every_key_is_the_exact_smoother():
    X, y = _cloud(500)
    Xq = _cloud(40, seed=3)[0]
    model = LinearAttentionRegressor(bandwidth=0.2, n_near_keys=500, random_state=0).fit(X, y)
    exact = KernelSmoother(bandwidth=0.2).fit(X, y)
    mean, std = model.predict(Xq, return_std=True)
    exact_mean, exact_std = exact.predict(Xq, return_std=True)
    # The near field's kernel values are single-precision exponentials (relative 6e-8).
    np.testing.assert_allclose(mean, exact_mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(std, exact_std, rtol=1e-6, atol=1e-8)
    assert model.weight_error_ < 1e-10 and model.n_near_keys_ == 500


@pytest.mark.parametrize("tol", [0.05, 0.2])
def test_auto_near_field_meets_its_tolerance_on_another_sample(tol, split_always):
    X, y = _cloud()
    model = LinearAttentionRegressor(bandwidth=0.08, tol=tol, random_state=0).fit(X, y)
    assert model.weight_error_ <= tol
    rows = np.random.default_rng(7).choice(len(X), 200, replace=False)
    assert weight_errors(model.kernel_, rows).mean() <= 1.5 * tol
    loose = LinearAttentionRegressor(bandwidth=0.08, tol=0.4, random_state=0).fit(X, y)
    assert loose.n_near_keys_ <= model.n_near_keys_


def test_near_field_far_queries_are_computed_exactly():
    from kernattn.linear import ExactFallbackWarning

    X, y = _cloud(500)
    # A given near field (on 500 rows "auto" would compute every weight exactly).
    model = LinearAttentionRegressor(bandwidth=0.1, n_near_keys=100, random_state=0).fit(X, y)
    # Beyond REACH of every near key the nearest keys may lie in cells that are not near.
    far = np.array([[30.0, 0.0, 0.0], [-1e6, 1e6, 0.0], [0.0, 0.0, -1e12]])
    with pytest.warns(ExactFallbackWarning, match="3 of 3 queries"):
        mean, std = model.predict(far, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    exact = KernelSmoother(bandwidth=0.1).fit(X, y).predict(far)
    np.testing.assert_allclose(mean, exact, atol=1e-6)


def test_near_field_same_seed_same_fit_and_pickles(split_always):
    X, y = _cloud(800)
    a = LinearAttentionRegressor(bandwidth=0.1, random_state=4).fit(X, y)
    b = LinearAttentionRegressor(bandwidth=0.1, random_state=4).fit(X, y)
    np.testing.assert_array_equal(a.predict(X[:50]), b.predict(X[:50]))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)).predict(X[:50]), a.predict(X[:50]))


def test_n_near_keys_needs_nystroem_features():
    X, y = _cloud(100)
    with pytest.raises(ValueError, match="n_near_keys > 0 needs Nyström"):
        LinearAttentionRegressor(feature_map="positive", n_near_keys=10).fit(X, y)


def test_share_of_exact_rows_above_ten_percent_warns_not_linear_time():
    from kernattn.linear import ExactFallbackWarning, NotLinearTimeWarning

    X, y = _data(300, d=3)
    model = LinearAttentionRegressor(feature_map="trig", bandwidth=0.05, random_state=0)
    with pytest.warns(NotLinearTimeWarning, match="no longer linear"):
        model.fit(X, y)
    with pytest.warns(NotLinearTimeWarning, match="no longer linear"):
        model.predict(_data(50, d=3, seed=4)[0])
    assert issubclass(NotLinearTimeWarning, ExactFallbackWarning)
    # The default near field serves the same data without computing rows against every key.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExactFallbackWarning)
        LinearAttentionRegressor(bandwidth=0.05, random_state=0).fit(X, y).predict(X[:50])


# ------------------------------------------------------ rank, near field and exact rule


@pytest.mark.parametrize("bandwidth", [0.08, 1.0])
def test_auto_rank_and_near_field_meet_tol_on_held_out_rows(bandwidth, split_always):
    from kernattn.linear._regressor import CANDIDATE_COMPONENTS

    X, y = _cloud()
    model = LinearAttentionRegressor(bandwidth=bandwidth, random_state=0).fit(X, y)
    assert model.n_components_ in CANDIDATE_COMPONENTS
    assert model.feature_maps_[0] is model.kernel_.feature_map
    assert model.weight_error_ <= model.tol
    # Rows the fit did not measure: the error is within the tolerance there too.
    rows = np.random.default_rng(11).choice(len(X), 300, replace=False)
    assert weight_errors(model.kernel_, rows).mean() <= 1.5 * model.tol


def test_wide_bandwidth_takes_a_small_near_field(split_always):
    X, y = _cloud()
    wide = LinearAttentionRegressor(bandwidth=1.0, random_state=0).fit(X, y)
    narrow = LinearAttentionRegressor(bandwidth=0.08, random_state=0).fit(X, y)
    # Where the far field carries the weight, one cell of about 50 keys is enough.
    assert wide.kernel_.n_near_cells == 1 and wide.n_near_keys_ < 100
    assert narrow.n_near_keys_ > 3 * wide.n_near_keys_


def test_rank_follows_the_cost_of_features(split_always, monkeypatch):
    import kernattn.linear._cost as cost_module

    X, y = _cloud()
    default = LinearAttentionRegressor(bandwidth=0.2, random_state=0).fit(X, y)
    # Were features nearly free, more of them would buy a smaller near field.
    monkeypatch.setattr(cost_module, "FEATURE_COST", 1e-3)
    cheap = LinearAttentionRegressor(bandwidth=0.2, random_state=0).fit(X, y)
    assert cheap.n_components_ > default.n_components_
    assert cheap.n_near_keys_ < default.n_near_keys_
    assert cheap.weight_error_ <= cheap.tol


def test_small_data_gets_the_exact_weights_without_warnings():
    X, y = _cloud(1000)
    Xq = _cloud(30, seed=5)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = LinearAttentionRegressor(bandwidth=0.1, random_state=0).fit(X, y)
        mean, std = model.predict(Xq, return_std=True)
    assert model.exact_weights_ and model.n_components_ == 0
    assert model.weight_error_ == 0.0 and model.n_near_keys_ == len(X)
    exact = KernelSmoother(bandwidth=0.1).fit(X, y)
    exact_mean, exact_std = exact.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, exact_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std, exact_std, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        model.attention_weights(Xq), exact.attention_weights(Xq), rtol=1e-12, atol=1e-300
    )
    # A given near field (or another map) is used as asked, whatever the size.
    given = LinearAttentionRegressor(bandwidth=0.1, n_near_keys=100, random_state=0).fit(X, y)
    assert not given.exact_weights_ and given.n_near_keys_ < len(X)


def test_partial_fit_after_exact_fit_takes_the_far_sums_of_the_training_set():
    X, y = _cloud(1200)
    params = dict(bandwidth=0.3, center=[0.0, 0.0, 0.0], random_state=0)
    model = LinearAttentionRegressor(**params).fit(X[:800], y[:800])
    assert model.exact_weights_
    model.partial_fit(X[800:], y[800:])
    assert not model.exact_weights_ and model.n_components_ > 0
    # The same sums as chunks given to partial_fit from the start (same landmarks' rows).
    chunked = LinearAttentionRegressor(**params).partial_fit(X[:800], y[:800])
    chunked.partial_fit(X[800:], y[800:])
    np.testing.assert_allclose(model.predict(X[:20]), chunked.predict(X[:20]), rtol=1e-9)


def test_split_predicted_dearer_than_exact_computes_the_exact_weights(monkeypatch):
    import kernattn.linear._regressor as linear_module

    # Past the size rule, the split is tried; on 3 000 rows its fit alone costs more than
    # half of the exact weights, so they are computed exactly.
    monkeypatch.setattr(linear_module, "EXACT_ROWS", 0)
    X, y = _cloud()
    model = LinearAttentionRegressor(bandwidth=0.08, random_state=0).fit(X, y)
    assert model.exact_weights_ and model.weight_error_ == 0.0
    np.testing.assert_allclose(
        model.predict(X[:10]),
        KernelSmoother(bandwidth=0.08).fit(X, y).predict(X[:10]),
        rtol=1e-12,
    )
    # partial_fit adds to the far field's sums, which the tried split did take.
    model.partial_fit(X[:100], y[:100])
    with warnings.catch_warnings():
        # The far field alone now: rows it cannot serve get the training mean (warned).
        warnings.simplefilter("ignore", UserWarning)
        assert not model.exact_weights_ and np.all(np.isfinite(model.predict(X[:10])))


def test_the_former_name_of_n_near_keys_still_works_and_warns():
    X, y = _cloud()
    with pytest.warns(FutureWarning, match="renamed n_near_keys"):
        old = LinearAttentionRegressor(n_neighbors=300, bandwidth=0.3, random_state=0).fit(X, y)
    new = LinearAttentionRegressor(n_near_keys=300, bandwidth=0.3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(old.predict(X[:20]), new.predict(X[:20]))
    with pytest.warns(FutureWarning, match="renamed n_near_keys_"):
        assert old.n_neighbors_ == new.n_near_keys_
