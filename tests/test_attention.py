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
