"""The functional core: softmax and linear attention against direct formulas."""

import numpy as np
import pytest
from sklearn import config_context

from kernattn.attention import linear_attention, log_softmax, softmax, softmax_attention


def naive_softmax_attention(Q, K, V, scale, key_bias=0.0):
    logits = scale * Q @ K.T + key_bias
    weights = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return weights @ V, weights


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    return rng.normal(size=(7, 4)), rng.normal(size=(11, 4)), rng.normal(size=(11, 3))


def test_softmax_attention_matches_naive_formula(qkv):
    Q, K, V = qkv
    bias = np.linspace(-1, 1, len(K))
    out, weights = softmax_attention(Q, K, V, scale=0.7, key_bias=bias, return_weights=True)
    expected_out, expected_weights = naive_softmax_attention(Q, K, V, 0.7, bias)
    np.testing.assert_allclose(out, expected_out, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-13, atol=1e-15)


def test_default_scale_is_inverse_sqrt_key_dimension(qkv):
    Q, K, V = qkv
    expected, _ = naive_softmax_attention(Q, K, V, 1 / np.sqrt(K.shape[1]))
    np.testing.assert_allclose(softmax_attention(Q, K, V), expected, rtol=1e-13)


def test_one_dimensional_values_give_one_dimensional_output(qkv):
    Q, K, V = qkv
    out = softmax_attention(Q, K, V[:, 0])
    assert out.shape == (len(Q),)
    np.testing.assert_allclose(out, softmax_attention(Q, K, V)[:, 0], rtol=1e-14)


def test_blocked_computation_equals_single_block(qkv):
    Q, K, V = qkv
    Q = np.vstack([Q] * 30)
    full = softmax_attention(Q, K, V)
    # A working memory this small forces one query row per block.
    with config_context(working_memory=1e-6):
        blocked = softmax_attention(Q, K, V)
    np.testing.assert_allclose(full, blocked, rtol=1e-14, atol=1e-15)


def test_huge_logits_do_not_overflow():
    Q = np.array([[1e3], [-1e3]])
    K = np.array([[1e3], [0.0], [-1e3]])
    out, weights = softmax_attention(Q, K, np.arange(3.0), scale=1.0, return_weights=True)
    np.testing.assert_allclose(out, [0.0, 2.0], rtol=1e-15, atol=1e-300)
    assert np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)


def test_minus_inf_key_bias_removes_a_key(qkv):
    Q, K, V = qkv
    bias = np.zeros(len(K))
    bias[0] = -np.inf
    np.testing.assert_allclose(
        softmax_attention(Q, K, V, key_bias=bias), softmax_attention(Q, K[1:], V[1:]), rtol=1e-13
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"Q": np.ones((2, 3))}, "same number of columns"),
        ({"V": np.ones((5, 2))}, "V must have shape"),
        ({"key_bias": np.ones(3)}, "key_bias must have shape"),
        ({"Q": np.ones(4)}, "2-D array"),
    ],
)
def test_softmax_attention_rejects_bad_shapes(kwargs, match):
    args = {"Q": np.ones((2, 4)), "K": np.ones((4, 4)), "V": np.ones(4)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        softmax_attention(args["Q"], args["K"], args["V"], key_bias=kwargs.get("key_bias"))


def test_softmax_rows_sum_to_one_and_reject_all_minus_inf():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=300, size=(5, 9))
    weights = softmax(logits)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(log_softmax(logits)), weights, atol=1e-15)
    with pytest.raises(ValueError, match="finite logit"):
        softmax(np.full((1, 3), -np.inf))


def test_linear_attention_matches_direct_ratio():
    rng = np.random.default_rng(2)
    phi_Q, phi_K = rng.uniform(0.1, 1, size=(6, 5)), rng.uniform(0.1, 1, size=(9, 5))
    V = rng.normal(size=(9, 2))
    kernel = phi_Q @ phi_K.T
    expected = kernel @ V / kernel.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(linear_attention(phi_Q, phi_K, V), expected, rtol=1e-13)


def test_linear_attention_rejects_non_positive_denominator():
    phi = np.array([[1.0, -1.0], [-1.0, 1.0]])
    with pytest.raises(ValueError, match="non-positive"):
        linear_attention(phi, phi, np.ones(2))


# ---------------------------------------------------------------- hostile inputs


def test_removed_key_gets_exactly_zero_weight(qkv):
    Q, K, V = qkv
    V = V.copy()
    # A removed key with a huge value: any weight left on it would show in the output.
    V[0] = 1e300
    bias = np.zeros(len(K))
    bias[0] = -np.inf
    out, weights = softmax_attention(Q, K, V, key_bias=bias, return_weights=True)
    assert np.all(weights[:, 0] == 0.0)
    np.testing.assert_allclose(out, softmax_attention(Q, K[1:], V[1:]), rtol=1e-13)
    np.testing.assert_array_equal(softmax([[0.0, -np.inf, 1.0]])[:, 1], [0.0])


def test_finite_logits_far_below_the_maximum_are_floored_not_removed():
    weights = softmax([0.0, -1e4])
    assert weights[1] == np.exp(-700.0)


def test_log_softmax_of_an_all_minus_inf_row_is_minus_inf():
    logits = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    result = log_softmax(logits)
    np.testing.assert_array_equal(result, [[-np.inf, -np.inf], [0.0, -np.inf]])
    np.testing.assert_array_equal(log_softmax(logits, axis=0)[:, 1], [-np.inf, -np.inf])
    with pytest.raises(ValueError, match="finite logit"):
        softmax(logits)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_log_softmax_and_softmax_reject_nan_and_plus_inf(bad):
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        log_softmax([0.0, bad])
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        softmax([0.0, bad])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected_naming_V(qkv, bad):
    Q, K, V = qkv
    V = V.copy()
    V[3, 1] = bad
    with pytest.raises(ValueError, match="^V contains NaN or infinite"):
        softmax_attention(Q, K, V)
    with pytest.raises(ValueError, match="^V contains NaN or infinite"):
        linear_attention(np.abs(Q), np.abs(K), V)


@pytest.mark.parametrize("name", ["Q", "K"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_queries_or_keys_are_rejected_naming_them(qkv, name, bad):
    arrays = dict(zip("QKV", (a.copy() for a in qkv), strict=True))
    arrays[name][0, 0] = bad
    with pytest.raises(ValueError, match=f"^{name} contains NaN or infinite"):
        softmax_attention(arrays["Q"], arrays["K"], arrays["V"])
    phi = {"Q": "phi_Q", "K": "phi_K"}[name]
    with pytest.raises(ValueError, match=f"^{phi} contains NaN or infinite"):
        linear_attention(
            **{"phi_Q": np.abs(arrays["Q"]), "phi_K": np.abs(arrays["K"]), "V": arrays["V"]}
        )


@pytest.mark.parametrize("name", ["Q", "K", "V", "key_bias"])
def test_complex_inputs_are_rejected_naming_the_argument(qkv, name):
    Q, K, V = qkv
    arguments = {"Q": Q, "K": K, "V": V, "key_bias": np.zeros(len(K))}
    arguments[name] = arguments[name] * (1 + 1j)
    with pytest.raises(TypeError, match=f"^{name} must be real"):
        softmax_attention(**arguments)


@pytest.mark.parametrize("name", ["phi_Q", "phi_K", "V"])
def test_complex_features_or_values_are_rejected_naming_the_argument(name):
    arguments = {"phi_Q": np.ones((2, 3)), "phi_K": np.ones((4, 3)), "V": np.ones(4)}
    arguments[name] = arguments[name] + 1j
    with pytest.raises(TypeError, match=f"^{name} must be real"):
        linear_attention(**arguments)
    with pytest.raises(TypeError, match="^logits must be real"):
        softmax(np.ones(3) * 1j)


def test_non_numeric_arrays_are_rejected_naming_the_argument(qkv):
    Q, K, V = qkv
    with pytest.raises(TypeError, match="^V must be an array of real numbers"):
        softmax_attention(Q, K, np.array(["a"] * len(K)))


@pytest.mark.parametrize(
    "scale, error",
    [
        (np.nan, ValueError),
        (np.inf, ValueError),
        (-np.inf, ValueError),
        ("0.5", TypeError),
        (True, TypeError),
        ([0.5, 0.5], TypeError),
        (1j, TypeError),
    ],
)
def test_bad_scale_is_reported_naming_scale(qkv, scale, error):
    Q, K, V = qkv
    with pytest.raises(error, match="^scale must be a finite real number or None"):
        softmax_attention(Q, K, V, scale=scale)
    # Checked first: the other arguments being wrong too does not hide it.
    with pytest.raises(error, match="^scale must be"):
        softmax_attention(Q, K[:, :2], V, scale=scale)


def test_zero_and_negative_scales_are_allowed(qkv):
    Q, K, V = qkv
    np.testing.assert_allclose(softmax_attention(Q, K, V, scale=0.0), np.tile(V.mean(0), (7, 1)))
    np.testing.assert_allclose(
        softmax_attention(Q, K, V, scale=np.float32(-0.5)),
        naive_softmax_attention(Q, K, V, -0.5)[0],
        rtol=1e-13,
    )
    np.testing.assert_allclose(
        softmax_attention(Q, K, V, scale=np.array(2)), naive_softmax_attention(Q, K, V, 2)[0]
    )


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.nan, "^key_bias must be finite, or -inf"),
        (np.inf, "^key_bias must be finite, or -inf"),
    ],
)
def test_nan_or_plus_inf_key_bias_is_rejected_naming_key_bias(qkv, bad, match):
    Q, K, V = qkv
    bias = np.zeros(len(K))
    bias[2] = bad
    with pytest.raises(ValueError, match=match):
        softmax_attention(Q, K, V, key_bias=bias)


def test_removing_every_key_is_a_clear_error(qkv):
    Q, K, V = qkv
    with pytest.raises(ValueError, match="key_bias is -inf for every key"):
        softmax_attention(Q, K, V, key_bias=np.full(len(K), -np.inf))


def test_attention_without_keys_or_key_dimension_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one key"):
        softmax_attention(np.ones((2, 3)), np.ones((0, 3)), np.ones(0))
    with pytest.raises(ValueError, match="at least one column"):
        softmax_attention(np.ones((2, 0)), np.ones((3, 0)), np.ones(3))
    with pytest.raises(ValueError, match="linear attention needs at least one key"):
        linear_attention(np.ones((2, 3)), np.ones((0, 3)), np.ones(0))


@pytest.mark.parametrize(
    "q_size, k_size, scale",
    [(1.0, 1.0, 1e300), (1e200, 1e200, 1e-300), (1e300, 1e300, 1.0), (1e-300, 1e300, 1e300)],
)
def test_logits_beyond_the_float_range_give_the_weights_of_the_largest_logit(
    qkv, q_size, k_size, scale
):
    Q, K, V = qkv
    out, weights = softmax_attention(Q * q_size, K * k_size, V, scale=scale, return_weights=True)
    nearest = np.argmax(Q @ K.T, axis=1)
    # The other keys keep the floor's weight, exp(-700) of the largest (see softmax).
    np.testing.assert_allclose(weights, np.eye(len(K))[nearest], rtol=0, atol=1e-300)
    np.testing.assert_allclose(out, V[nearest], rtol=1e-15)


def test_huge_key_bias_and_values_stay_finite():
    bias = np.array([1e308, -1e308, 1e308])
    V = np.array([1.7e308, 1.7e308, -1.7e308])
    out, weights = softmax_attention(
        np.ones((1, 1)), np.ones((3, 1)), V, key_bias=bias, return_weights=True
    )
    np.testing.assert_allclose(weights, [[0.5, 0.0, 0.5]], rtol=0, atol=1e-300)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("size", [1e155, 1e300, 1e-300])
def test_linear_attention_is_finite_for_huge_and_tiny_positive_features(size):
    rng = np.random.default_rng(3)
    phi_Q, phi_K = rng.uniform(0.1, 1, size=(6, 5)), rng.uniform(0.1, 1, size=(9, 5))
    V = rng.normal(size=(9, 2))
    expected = linear_attention(phi_Q, phi_K, V)
    np.testing.assert_allclose(linear_attention(phi_Q * size, phi_K * size, V), expected)
    np.testing.assert_allclose(linear_attention(phi_Q, phi_K, V * 1e300), expected * 1e300)


def test_linear_attention_overflow_with_signed_features_is_an_error():
    phi_Q = np.array([[1.0, -1.0 + 1e-15]])
    with pytest.raises(ValueError, match="overflowed"):
        linear_attention(phi_Q, np.eye(2), np.array([1e300, -1e300]))


# ------------------------------------------------------------------- properties

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402

_unit = st.floats(-1.0, 1.0, allow_subnormal=False)
_exponent = st.integers(-300, 300)


def _scaled(draw, shape, elements=_unit):
    return draw(arrays(float, shape, elements=elements)) * 10.0 ** draw(_exponent)


@st.composite
def _attention_problem(draw):
    n_queries, n_keys, d_k, d_v = (draw(st.integers(1, 5)) for _ in range(4))
    Q = _scaled(draw, (n_queries, d_k))
    K = _scaled(draw, (n_keys, d_k))
    V = _scaled(draw, (n_keys, d_v))
    scale = draw(st.sampled_from([-1.0, 1.0])) * 10.0 ** draw(_exponent)
    bias = _scaled(draw, n_keys) if draw(st.booleans()) else None
    return Q, K, V, scale, bias


@settings(max_examples=300, deadline=None)
@given(_attention_problem())
def test_softmax_attention_is_a_finite_weighted_average_at_any_scale(problem):
    Q, K, V, scale, bias = problem
    out, weights = softmax_attention(Q, K, V, scale=scale, key_bias=bias, return_weights=True)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(np.isfinite(out))
    assert np.all((V.min(axis=0) <= out) & (out <= V.max(axis=0)))


@st.composite
def _positive_features(draw):
    n_queries, n_keys, r, d_v = (draw(st.integers(1, 5)) for _ in range(4))
    positive = st.floats(1e-3, 1.0)
    phi_Q = _scaled(draw, (n_queries, r), positive)
    phi_K = _scaled(draw, (n_keys, r), positive)
    V = _scaled(draw, (n_keys, d_v))
    return phi_Q, phi_K, V


@settings(max_examples=300, deadline=None)
@given(_positive_features())
def test_linear_attention_with_positive_features_is_finite_within_the_values(problem):
    phi_Q, phi_K, V = problem
    out = linear_attention(phi_Q, phi_K, V)
    assert np.all(np.isfinite(out))
    assert np.all((V.min(axis=0) <= out) & (out <= V.max(axis=0)))
