"""The Nadaraya–Watson engine, once, against a hand-built kernel and a dense reference.

The estimator here is a stand-in: its ``fit`` hands the engine a :class:`SoftmaxHeads` with
fixed projections, scales and mixture, so every number the engine produces can be checked
against a direct formula written out below (logits, softmax, the mixture of the heads and the
spread of the mixture).
"""

import warnings
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import joblib
import numpy as np
import pytest
from sklearn import config_context
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions
from threadpoolctl import threadpool_limits

import kernattn._core.blocks
from kernattn._core.blocks import available_cores, effective_n_jobs
from kernattn._engine.heads import COSINE_EPS, SIMILARITIES, SoftmaxHeads
from kernattn._engine.regressor import KEY_TILE, NadarayaWatsonRegressor

CENTER = np.array([0.1, -0.2, 0.3])
INPUT_SCALE = np.array([1.0, 1.5, 2.0])
RADIAL = ("gaussian", "epanechnikov", "tricube")


def projections(n_heads, head_dim, similarity, side):
    """Fixed query or key projections of shape (n_heads, 3, head_dim).

    Radial heads get short projections so that the compact kernels' supports cover the data.
    """
    rng = np.random.default_rng(11 if side == "query" else 12)
    size = 0.3 if similarity in RADIAL else 0.8
    return size * rng.standard_normal((n_heads, len(CENTER), head_dim))


def head_scales(n_heads, scale):
    return scale * np.linspace(0.7, 1.3, n_heads)


class HandBuiltHeads(NadarayaWatsonRegressor):
    """A Nadaraya–Watson regressor whose kernel is given, not learned."""

    _parameter_constraints = {
        **NadarayaWatsonRegressor._parameter_constraints,
        "similarity": [StrOptions(set(SIMILARITIES))],
        "head_weights": [tuple],
        "head_bias": [Real],
        "head_dim": [Interval(Integral, 1, None, closed="left")],
        "scale": [Interval(Real, 0, None, closed="neither")],
        "fail": ["boolean"],
    }

    def __init__(
        self,
        similarity="dot",
        head_weights=(0.8, -0.3),
        head_bias=0.25,
        head_dim=2,
        scale=1.0,
        fail=False,
        n_jobs=None,
    ):
        self.similarity = similarity
        self.head_weights = head_weights
        self.head_bias = head_bias
        self.head_dim = head_dim
        self.scale = scale
        self.fail = fail
        self.n_jobs = n_jobs

    def _fit_kernel(self, X, Y, sample_weight):
        self.n_keys_ = len(X)
        if self.fail:
            raise RuntimeError("the kernel could not be fitted")
        H = len(self.head_weights)
        return SoftmaxHeads(
            similarity=self.similarity,
            center=CENTER,
            input_scale=INPUT_SCALE,
            query_weights=projections(H, self.head_dim, self.similarity, "query"),
            key_weights=projections(H, self.head_dim, self.similarity, "key"),
            scale=head_scales(H, self.scale),
            head_weights=np.array(self.head_weights),
            head_bias=np.full(Y.shape[1], self.head_bias),
            keys=X,
            log_sample_weight=self._log_sample_weight,
            dtype=self._dtype,
        )


# --------------------------------------------------------------- the reference


def projected(model, X, h, side):
    """√s · norm((x − c)/σ W) for head ``h``, written out (the cosine's norm is
    √(‖P‖² + ε), which keeps a zero projection finite)."""
    H = len(model.head_weights)
    W = projections(H, model.head_dim, model.similarity, side)[h]
    P = (X - CENTER) / INPUT_SCALE @ W
    if model.similarity == "cosine":
        P = P / np.sqrt((P**2).sum(axis=1, keepdims=True) + COSINE_EPS)
    return np.sqrt(head_scales(H, model.scale)[h]) * P


def reference_head_weights(model, X_fit, sample_weight, queries, h):
    """Head ``h``'s weights: softmax over the keys of its logits plus log s_i."""
    Q = projected(model, queries, h, "query")
    K = projected(model, X_fit, h, "key")
    r2 = ((Q[:, None, :] - K[None, :, :]) ** 2).sum(axis=-1)
    if model.similarity in ("dot", "cosine"):
        logits = Q @ K.T
        kernel = np.exp(logits - logits.max(axis=1, keepdims=True))
    elif model.similarity == "gaussian":
        kernel = np.exp(-0.5 * r2)
    elif model.similarity == "epanechnikov":
        kernel = np.clip(1.0 - r2, 0.0, None)
    else:
        kernel = np.clip(1.0 - r2**1.5, 0.0, None) ** 3
    kernel = kernel * sample_weight
    total = kernel.sum(axis=1, keepdims=True)
    assert np.all(total > 0), "a reference query has no key inside its kernel's support"
    return kernel / total


def reference_prediction(model, X, y, sample_weight, queries):
    """ŷ = ȳ + Σ_h a_h Σ_i w^h_i (y_i − ȳ) + b, and the spread of the mixture around it:
    Σ_h π_h [Σ_i w^h_i (y_i − m_h)² + (m_h − ŷ)²], π_h = |a_h| / Σ_g |a_g|, m_h = w^h y."""
    a = np.array(model.head_weights)
    offset = np.average(y, weights=sample_weight)
    weights = [reference_head_weights(model, X, sample_weight, queries, h) for h in range(len(a))]
    means = [w @ y for w in weights]
    mixed = sum(a_h * (m - offset) for a_h, m in zip(a, means, strict=True))
    mean = offset + mixed + model.head_bias
    proportions = np.abs(a) / np.abs(a).sum()
    variance = sum(
        p * ((w * (y[None, :] - m[:, None]) ** 2).sum(axis=1) + (m - mean) ** 2)
        for p, w, m in zip(proportions, weights, means, strict=True)
    )
    return mean, np.sqrt(variance), weights


def winning_key(model, X_fit, queries, h):
    """The key a query far out along its direction ends up attending to: the nearest one in
    the head's projection for radial heads, the largest qᵀk for dot heads. Computed with the
    query scaled down, so that 1e300 does not overflow."""
    Q = projected(model, queries, h, "query")
    K = projected(model, X_fit, h, "key")
    size = np.abs(Q).max(axis=1, keepdims=True)
    score = (Q / size) @ K.T
    if model.similarity in RADIAL:
        score -= 0.5 * (K**2).sum(axis=1) / size
    return score.argmax(axis=1)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=60)
    sample_weight = rng.uniform(0.2, 3.0, size=60)
    queries = rng.uniform(-1, 1, size=(25, 3))
    return X, y, sample_weight, queries


# ------------------------------------------------------------------ the estimate


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_predict_and_std_equal_the_dense_mixture_of_heads(data, similarity):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity=similarity).fit(X, y, sample_weight=sample_weight)
    mean, std = model.predict(queries, return_std=True)
    expected_mean, expected_std, _ = reference_prediction(model, X, y, sample_weight, queries)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(std, expected_std, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(model.predict(queries), mean)


def test_std_stays_accurate_where_the_neighbors_targets_are_far_from_the_mean():
    rng = np.random.default_rng(4)
    # Two clusters of inputs far apart, whose targets are 1e8 apart and spread by about 1.
    far_group = np.arange(300) >= 150
    X = rng.uniform(-1, 1, size=(300, 3)) + np.where(far_group, 100.0, -100.0)[:, None]
    y = np.where(far_group, 1e8, 0.0) + np.sin(3 * X[:, 1])
    model = HandBuiltHeads(similarity="gaussian", head_weights=(1.0,), head_bias=0.0)
    model.fit(X, y)
    queries = X[far_group][:10] + 0.01
    _, std = model.predict(queries, return_std=True)
    _, expected, _ = reference_prediction(model, X, y, np.ones(len(X)), queries)
    assert np.all((expected > 0.1) & (expected < 2.0))
    np.testing.assert_allclose(std, expected, rtol=1e-6)


def test_one_head_with_unit_weight_is_the_plain_nadaraya_watson_estimate(data):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(head_weights=(1.0,), head_bias=0.0).fit(X, y, sample_weight)
    mean, std = model.predict(queries, return_std=True)
    weights = reference_head_weights(model, X, sample_weight, queries, 0)
    np.testing.assert_allclose(mean, weights @ y, rtol=1e-11, atol=1e-12)
    spread = (weights * (y[None, :] - mean[:, None]) ** 2).sum(axis=1)
    np.testing.assert_allclose(std, np.sqrt(spread), rtol=1e-9, atol=1e-12)


def test_multi_output_predictions_are_the_columns_predicted_one_at_a_time(data):
    X, y, sample_weight, queries = data
    Y = np.column_stack([y, np.cos(X[:, 0]), 100 + 3 * y])
    model = HandBuiltHeads(similarity="gaussian").fit(X, Y, sample_weight)
    mean, std = model.predict(queries, return_std=True)
    assert mean.shape == std.shape == (len(queries), 3)
    for column in range(3):
        expected_mean, expected_std, _ = reference_prediction(
            model, X, Y[:, column], sample_weight, queries
        )
        np.testing.assert_allclose(mean[:, column], expected_mean, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(std[:, column], expected_std, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("similarity", ["dot", "gaussian", "epanechnikov"])
def test_attention_weights_per_head_and_mixed(data, similarity):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity=similarity).fit(X, y, sample_weight)
    _, _, expected = reference_prediction(model, X, y, sample_weight, queries)
    a = np.array(model.head_weights)
    for h in range(len(a)):
        weights = model.attention_weights(queries, head=h)
        np.testing.assert_allclose(weights, expected[h], rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    mixed = model.attention_weights(queries)
    np.testing.assert_allclose(mixed, a[0] * expected[0] + a[1] * expected[1], atol=1e-13)
    np.testing.assert_allclose(mixed.sum(axis=1), a.sum(), rtol=1e-12)
    # Mixed weights reproduce the estimate: the bias, and ȳ for the part of the targets'
    # offset the head weights do not carry, come on top.
    offset = np.average(y, weights=sample_weight)
    np.testing.assert_allclose(
        model.predict(queries),
        mixed @ y + model.head_bias + (1 - a.sum()) * offset,
        rtol=1e-11,
        atol=1e-12,
    )


def test_rows_with_zero_sample_weight_get_zero_weight_and_change_nothing(data):
    X, y, sample_weight, queries = data
    sample_weight = sample_weight.copy()
    sample_weight[::4] = 0.0
    kept = sample_weight > 0
    model = HandBuiltHeads(similarity="gaussian").fit(X, y, sample_weight)
    reduced = HandBuiltHeads(similarity="gaussian").fit(X[kept], y[kept], sample_weight[kept])
    weights = model.attention_weights(queries)
    assert weights.shape == (len(queries), len(X))
    np.testing.assert_array_equal(weights[:, ~kept], 0.0)
    np.testing.assert_allclose(weights[:, kept], reduced.attention_weights(queries), atol=1e-14)
    np.testing.assert_allclose(model.predict(queries), reduced.predict(queries), rtol=1e-12)


@pytest.mark.parametrize("head", [2, -1, 1.0, True, [0], "0"])
def test_bad_head_index_is_rejected_with_the_number_of_heads(data, head):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads().fit(X, y)
    with pytest.raises(ValueError, match="head"):
        model.attention_weights(queries, head=head)


# ------------------------------------------------------------------ diagnostics


def test_entropy_and_effective_neighbors_follow_the_weights(data):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity="gaussian").fit(X, y, sample_weight)
    _, _, weights = reference_prediction(model, X, y, sample_weight, queries)
    expected = np.column_stack(
        [-(w * np.log(np.where(w > 0, w, 1.0))).sum(axis=1) for w in weights]
    )
    entropy = model.attention_entropy(queries)
    assert entropy.shape == (len(queries), 2)
    np.testing.assert_allclose(entropy, expected, rtol=1e-10)
    np.testing.assert_allclose(model.effective_neighbors(queries), np.exp(expected), rtol=1e-10)
    assert np.all(entropy <= np.log(len(X)))


def test_uniform_weights_have_entropy_log_n(data):
    X, y, _, queries = data
    # A vanishing scale makes every logit 0: each head spreads its weight evenly.
    model = HandBuiltHeads(similarity="dot", scale=1e-300).fit(X, y)
    np.testing.assert_allclose(model.attention_entropy(queries), np.log(len(X)), rtol=1e-12)
    np.testing.assert_allclose(model.effective_neighbors(queries), len(X), rtol=1e-12)


@pytest.mark.parametrize("similarity", RADIAL)
def test_one_hot_weights_have_entropy_zero_and_one_effective_neighbor(data, similarity):
    X, y, _, queries = data
    far = queries + 1e6  # every head puts all its weight on its nearest key
    model = HandBuiltHeads(similarity=similarity).fit(X, y)
    for h in range(2):
        assert np.all(model.attention_weights(far, head=h).max(axis=1) == 1.0)
    np.testing.assert_allclose(model.attention_entropy(far), 0.0, atol=1e-12)
    np.testing.assert_allclose(model.effective_neighbors(far), 1.0, rtol=1e-12)
    # One head on one key: nothing to disagree about.
    single = HandBuiltHeads(similarity=similarity, head_weights=(1.0,), head_bias=0.0)
    single.fit(X, y)
    _, std = single.predict(far, return_std=True)
    np.testing.assert_allclose(std, 0.0, atol=1e-12)


# ------------------------------------------------------------- far queries


@pytest.mark.parametrize("similarity", ["dot", "gaussian", "epanechnikov", "tricube"])
@pytest.mark.parametrize("distance", [1e6, -1e6, 1e300, -1e300])
def test_far_query_gets_the_target_of_the_key_it_ends_up_on(data, similarity, distance):
    X, y, sample_weight, queries = data
    direction = np.array([1.0, 0.5, -0.25])
    far = queries[:5] + distance * direction
    model = HandBuiltHeads(similarity=similarity).fit(X, y, sample_weight)
    mean, std = model.predict(far, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
    offset = np.average(y, weights=sample_weight)
    a = np.array(model.head_weights)
    winners = [winning_key(model, X, far, h) for h in range(2)]
    pairs = zip(a, winners, strict=True)
    expected = offset + sum(a_h * (y[w] - offset) for a_h, w in pairs) + 0.25
    np.testing.assert_allclose(mean, expected, rtol=1e-12, atol=1e-12)
    for h in range(2):
        weights = model.attention_weights(far, head=h)
        np.testing.assert_array_equal(weights.argmax(axis=1), winners[h])
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("similarity", ["dot", "gaussian", "tricube"])
def test_far_query_whose_projection_overflows_still_gets_a_training_target(data, similarity):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity=similarity, scale=1e20).fit(X, y, sample_weight)
    expected = model.predict(queries + 1e150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(model.predict(queries + 1e300), expected, rtol=1e-12)


@pytest.mark.parametrize(
    "distance",
    [1e15, 1e300],
)
def test_far_query_of_cosine_heads_gets_the_limit_along_its_direction(data, distance):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity="cosine").fit(X, y, sample_weight)
    # Only the direction of a cosine query counts, and far out it is the same for all.
    expected, _, _ = reference_prediction(model, X, y, sample_weight, queries[:1] + 1e15)
    np.testing.assert_allclose(model.predict(queries + distance), expected[0], rtol=1e-9)


# ----------------------------------------------------- blocks, tiles, threads


@pytest.fixture
def large():
    rng = np.random.default_rng(3)
    n_keys = 2 * KEY_TILE + 100  # more keys than one tile holds
    X = rng.uniform(-1, 1, size=(n_keys, 3))
    y = np.sin(3 * X[:, 0]) * X[:, 1]
    sample_weight = rng.uniform(0.5, 2.0, size=n_keys)
    # Enough queries for threads even one key tile at a time (2^20 query-key pairs); the
    # last ones are far from every key.
    queries = rng.uniform(-1.2, 1.2, size=(2**20 // KEY_TILE + 64, 3))
    queries[-20:] += 1e4
    return X, y, sample_weight, queries


@pytest.mark.parametrize("similarity", ["dot", "gaussian", "tricube"])
def test_tiny_blocks_on_two_threads_give_the_single_threaded_result(
    large, similarity, started_pools
):
    X, y, sample_weight, queries = large
    model = HandBuiltHeads(similarity=similarity, n_jobs=1).fit(X, y, sample_weight)
    mean, std = model.predict(queries, return_std=True)
    weights = model.attention_weights(queries[:60])
    entropy = model.attention_entropy(queries)
    model.set_params(n_jobs=2)
    with config_context(working_memory=1e-3):
        blocked_mean, blocked_std = model.predict(queries, return_std=True)
        blocked_weights = model.attention_weights(queries[:60])
        blocked_entropy = model.attention_entropy(queries)
    assert started_pools and set(started_pools) == {2}
    np.testing.assert_allclose(blocked_mean, mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(blocked_std, std, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(blocked_weights, weights, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(blocked_entropy, entropy, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("similarity", ["gaussian", "epanechnikov"])
def test_keys_in_tiles_equal_the_dense_formula(large, similarity):
    X, y, sample_weight, queries = large
    near, far = queries[:-20], queries[-20:]
    model = HandBuiltHeads(similarity=similarity).fit(X, y, sample_weight)
    assert model.kernel_.n_keys > KEY_TILE
    mean, std = model.predict(near, return_std=True)
    expected_mean, expected_std, _ = reference_prediction(model, X, y, sample_weight, near)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std, expected_std, rtol=1e-9, atol=1e-12)
    # Rows that underflow in every tile are redone from their nearest key.
    offset = np.average(y, weights=sample_weight)
    winners = [winning_key(model, X, far, h) for h in range(2)]
    a = np.array(model.head_weights)
    pairs = zip(a, winners, strict=True)
    expected = offset + sum(a_h * (y[w] - offset) for a_h, w in pairs) + 0.25
    np.testing.assert_allclose(model.predict(far), expected, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------ float32


@pytest.mark.parametrize("similarity", ["dot", "cosine", "gaussian", "tricube"])
def test_float32_input_gives_float32_predictions_close_to_float64(data, similarity):
    X, y, sample_weight, queries = data
    X32, q32 = X.astype(np.float32), queries.astype(np.float32)
    exact = HandBuiltHeads(similarity=similarity).fit(X32.astype(float), y, sample_weight)
    expected_mean, expected_std = exact.predict(q32.astype(float), return_std=True)
    model = HandBuiltHeads(similarity=similarity).fit(X32, y, sample_weight)
    mean, std = model.predict(q32, return_std=True)
    assert mean.dtype == std.dtype == np.float32
    scale = np.abs(y).max()
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(std, expected_std, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize(
    "name", ["KernelSmoother", "AttentionRegressor", "LinearAttentionRegressor"]
)
def test_every_output_follows_the_fitted_dtype(name):
    # As scikit-learn's array-API estimators: float32 in, float32 out, for the queries of
    # either precision; a float64 fit stays float64.
    import kernattn

    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=80)
    for dtype in (np.float32, np.float64):
        model = getattr(kernattn, name)().fit(X.astype(dtype), y.astype(dtype))
        for queries in (X[:7].astype(np.float32), X[:7]):
            mean, std = model.predict(queries, return_std=True)
            outputs = [model.predict(queries), mean, std, model.attention_weights(queries)]
            outputs += [model.attention_weights(queries, head=0)]
            outputs += [model.attention_entropy(queries), model.effective_neighbors(queries)]
            assert [a.dtype for a in outputs] == [dtype] * len(outputs)


@pytest.mark.parametrize("similarity", ["dot", "gaussian"])
def test_far_float64_query_against_a_float32_fit_is_finite_and_quiet(data, similarity):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity=similarity).fit(X.astype(np.float32), y, sample_weight)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.all(np.isfinite(model.predict(queries + 1e300)))


# ------------------------------------------------------ fitting and parameters


def test_failed_fit_leaves_the_earlier_fit_intact(data):
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity="gaussian").fit(X, y, sample_weight)
    before = model.predict(queries, return_std=True)
    state = {name: getattr(model, name) for name in ("X_fit_", "y_fit_", "kernel_", "n_keys_")}
    model.set_params(fail=True)
    with pytest.raises(RuntimeError, match="could not be fitted"):
        model.fit(X[:10, :2], y[:10])
    assert model.n_features_in_ == 3
    for name, value in state.items():
        assert getattr(model, name) is value
    np.testing.assert_array_equal(model.predict(queries, return_std=True), before)


def test_failed_first_fit_leaves_the_estimator_unfitted(data):
    X, y, _, queries = data
    model = HandBuiltHeads(fail=True)
    with pytest.raises(RuntimeError):
        model.fit(X, y)
    assert not hasattr(model, "n_keys_") and not hasattr(model, "n_features_in_")
    with pytest.raises(NotFittedError):
        model.predict(queries)


def test_changing_the_callers_arrays_after_fit_changes_nothing(data):
    X, y, sample_weight, queries = data
    X, y, sample_weight = X.copy(), y.copy(), sample_weight.copy()
    model = HandBuiltHeads(similarity="gaussian").fit(X, y, sample_weight)
    expected = model.predict(queries, return_std=True)
    kept = X.copy(), y.copy()
    X[:] = 0.0
    y[:] = 5.0
    sample_weight[:10] = 0.0
    np.testing.assert_array_equal(model.X_fit_, kept[0])
    np.testing.assert_array_equal(model.y_fit_, kept[1])
    np.testing.assert_array_equal(model.predict(queries, return_std=True), expected)


def test_fitted_sample_weight_is_a_copy(data):
    X, y, sample_weight, _ = data
    sample_weight = sample_weight.copy()
    model = HandBuiltHeads().fit(X, y, sample_weight)
    kept = sample_weight.copy()
    sample_weight[:] = 7.0
    np.testing.assert_array_equal(model.sample_weight_, kept)


@pytest.mark.parametrize("params", [{"head_dim": True}, {"n_jobs": True}, {"n_jobs": False}])
def test_bools_are_refused_for_integer_parameters(data, params):
    X, y, _, _ = data
    name = next(iter(params))
    with pytest.raises(ValueError, match=f"'{name}' parameter .* must not be a bool"):
        HandBuiltHeads(**params).fit(X, y)


def test_boolean_parameters_still_take_bools(data):
    X, y, _, _ = data
    with pytest.raises(RuntimeError, match="could not be fitted"):
        HandBuiltHeads(fail=True).fit(X, y)


def test_n_jobs_zero_is_refused(data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="'n_jobs' .* got 0"):
        HandBuiltHeads(n_jobs=0).fit(X, y)


@pytest.mark.parametrize("n_jobs", [1, 2, -1, -5, None])
def test_any_valid_n_jobs_gives_the_same_predictions(large, n_jobs):
    X, y, sample_weight, queries = large
    expected = HandBuiltHeads(similarity="gaussian", n_jobs=1).fit(X, y).predict(queries)
    model = HandBuiltHeads(similarity="gaussian", n_jobs=n_jobs).fit(X, y)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------- threads over blocks


def test_n_jobs_none_means_every_core():
    cores = available_cores()
    # Pin every thread pool to the core count: the test then does not depend on an
    # OMP_NUM_THREADS the environment may set.
    with threadpool_limits(limits=cores):
        assert effective_n_jobs(None) == cores
        assert effective_n_jobs(-1) == cores
        assert effective_n_jobs(1) == 1


def test_a_thread_limit_around_the_call_is_honored():
    with threadpool_limits(limits=1):
        assert effective_n_jobs(None) == 1
        assert effective_n_jobs(-1) == 1
        assert effective_n_jobs(4) == 1


def test_joblib_parallel_config_sets_the_default_number_of_threads():
    cores = available_cores()
    with threadpool_limits(limits=cores):
        with joblib.parallel_config(n_jobs=3):
            assert effective_n_jobs(None) == min(3, cores)
            # An explicit n_jobs wins over the configured default.
            assert effective_n_jobs(1) == 1
        with joblib.parallel_config(n_jobs=3), threadpool_limits(limits=1):
            assert effective_n_jobs(None) == 1


@pytest.fixture
def started_pools(monkeypatch):
    """The max_workers of every thread pool kernattn's blocks start (under a thread limit of
    the cores)."""
    started = []

    class RecordingPool(ThreadPoolExecutor):
        def __init__(self, max_workers=None, *args, **kwargs):
            started.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(kernattn._core.blocks, "ThreadPoolExecutor", RecordingPool)
    # The tests count threads against the cores, whatever limit the environment set when the
    # thread libraries were loaded (OMP_NUM_THREADS=1, say).
    with threadpool_limits(limits=max(available_cores(), 2)):
        yield started


@pytest.fixture
def large_dot_problem():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(2048, 3))
    y = X[:, 0] - X[:, 1]
    queries = rng.uniform(-1, 1, size=(1024, 3))  # 2^21 query-key pairs
    return X, y, queries


def test_large_predict_starts_a_pool_of_the_cores_by_default(large_dot_problem, started_pools):
    if available_cores() < 2:
        pytest.skip("needs at least 2 cores")
    X, y, queries = large_dot_problem
    model = HandBuiltHeads().fit(X, y)
    expected = HandBuiltHeads(n_jobs=1).fit(X, y).predict(queries)
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-13, atol=1e-15)
    assert len(started_pools) == 1
    assert 2 <= started_pools[0] <= available_cores()


def test_large_predict_of_a_radial_kernel_starts_a_pool(started_pools):
    if available_cores() < 2:
        pytest.skip("needs at least 2 cores")
    rng = np.random.default_rng(6)
    n_queries = 2**19 // KEY_TILE  # below the thread threshold one tile at a time
    X = rng.uniform(-1, 1, size=(2**22 // n_queries, 3))  # 2^22 query-key pairs in all
    queries = rng.uniform(-1, 1, size=(n_queries, 3))
    HandBuiltHeads(similarity="gaussian").fit(X, X[:, 0]).predict(queries)
    assert len(started_pools) == 1 and started_pools[0] >= 2


def test_large_predict_starts_no_pool_under_a_limit_of_one_thread(
    large_dot_problem, started_pools
):
    X, y, queries = large_dot_problem
    model = HandBuiltHeads().fit(X, y)
    with threadpool_limits(limits=1):
        model.predict(queries)
        model.attention_entropy(queries)
    assert started_pools == []


def test_large_predict_starts_no_pool_with_n_jobs_one(large_dot_problem, started_pools):
    X, y, queries = large_dot_problem
    model = HandBuiltHeads(n_jobs=1).fit(X, y)
    model.predict(queries, return_std=True)
    model.attention_weights(queries[:200])
    assert started_pools == []


def test_large_predict_uses_the_threads_joblib_is_configured_with(
    large_dot_problem, started_pools
):
    if available_cores() < 2:
        pytest.skip("needs at least 2 cores")
    X, y, queries = large_dot_problem
    model = HandBuiltHeads().fit(X, y)
    with joblib.parallel_config(n_jobs=2):
        model.predict(queries)
    assert started_pools == [2]


def test_small_predict_starts_no_pool(data, started_pools):
    X, y, _, queries = data
    HandBuiltHeads(n_jobs=2).fit(X, y).predict(queries)
    assert started_pools == []


# ------------------------------------------------------------ squared weights' sums


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_sums_of_squared_weights_follow_the_running_maximum(data, similarity):
    """A head's sums with the squared weights (what the local polynomials' variance bound
    needs), in the same pass: Σ_j e_j C_j and Σ_j e_j² D_j on one shift, in key tiles
    whose maxima rise (the dot heads' running maximum rescales the squared sums by the
    square of the plain factor), with left-out pairs, and for rows far from every key."""
    X, y, sample_weight, queries = data
    model = HandBuiltHeads(similarity=similarity, scale=4.0).fit(X, y, sample_weight)
    kernel = model.kernel_
    if similarity not in ("epanechnikov", "tricube"):  # (outside every compact support)
        queries = np.vstack([queries, [[30.0, -30.0, 30.0]]])
    rng = np.random.default_rng(3)
    columns = np.column_stack([np.ones(len(X)), rng.normal(size=(len(X), 2))])
    squared = np.column_stack([np.ones(len(X)), rng.normal(size=(len(X), 3))])
    left_out = (np.array([0, 0, 4]), np.array([2, 5, 7]))
    keys = model._active  # the kernel's keys: the rows in the order the fit took them
    for h in range(kernel.n_heads):
        weights = reference_head_weights(model, X[keys], sample_weight[keys], queries, h)
        for pairs in (None, left_out):
            w = weights.copy()
            if pairs is not None:
                w[pairs] = 0.0
            with config_context(working_memory=1e-4), np.errstate(under="ignore"):
                sums = kernel.sums(queries, h, columns, squared=squared, total=0, left_out=pairs)
            plain, second = sums[:, :3], sums[:, 3:]
            # Ratios to the sum of the weights (the shift cancels), squared for D.
            np.testing.assert_allclose(
                plain / plain[:, :1], (w @ columns) / w.sum(axis=1, keepdims=True), rtol=1e-9
            )
            np.testing.assert_allclose(
                second / plain[:, :1] ** 2,
                (w**2 @ squared) / w.sum(axis=1, keepdims=True) ** 2,
                rtol=1e-9,
                atol=1e-12,
            )


def test_an_out_of_core_source_in_the_row_registry_serves_fit_and_predict(monkeypatch):
    # The engine knows sources of rows only through the registry a backend fills: here a
    # stand-in source whose rows are arrays, fitted through its Rows and predicted by its
    # backend.
    import kernattn._core.rows as rows

    monkeypatch.setattr(rows, "_SOURCES", list(rows._SOURCES))

    class Source:
        def __init__(self, data):
            self.data = data

    def source_rows(X, y, sample_weight):
        return rows.ArrayRows(X.data, y.data, None, n_parts=3)

    def source_predict(model, X, return_std=False):
        return model.predict(X.data, return_std=return_std)

    rows.register_source(lambda data: isinstance(data, Source), source_rows, source_predict)
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    queries = rng.normal(size=(7, 3))
    model = HandBuiltHeads().fit(Source(X), Source(y))
    expected = HandBuiltHeads().fit(X, y)
    np.testing.assert_array_equal(model.predict(Source(queries)), expected.predict(queries))
    mean, std = model.predict(Source(queries), return_std=True)
    np.testing.assert_array_equal(std, expected.predict(queries, return_std=True)[1])
