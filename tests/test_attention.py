"""The functional core on numpy arrays: softmax and linear attention against direct formulas,
batched heads, masks, causal attention, and inputs that would break a naive formula.

The same functions on torch tensors (against PyTorch's own attention) and on other array
libraries are tested in test_attention_torch.py and test_attention_array_api.py.
"""

import tracemalloc

import numpy as np
import pytest
from sklearn import config_context

from kernattn.attention import (
    attention_entropy,
    effective_neighbors,
    linear_attention,
    log_softmax,
    softmax,
    softmax_attention,
)


def naive_softmax_attention(Q, K, V, scale, key_bias=0.0, mask=None):
    """The formula as written, on (…, L, d) arrays; ``mask`` boolean (True takes part)."""
    key_bias = np.asarray(key_bias)
    logits = scale * Q @ np.swapaxes(K, -1, -2) + (
        key_bias[..., None, :] if key_bias.ndim else key_bias
    )
    kernel = np.exp(logits - logits.max(axis=-1, keepdims=True))
    if mask is not None:
        kernel = np.where(mask, kernel, 0.0)
    total = kernel.sum(axis=-1, keepdims=True)
    weights = kernel / np.where(total > 0, total, 1.0)
    return weights @ V, weights


def causal_mask(n_queries, n_keys):
    """PyTorch's causal mask: ``torch.ones(L, S).tril()``, top-left aligned."""
    return np.tril(np.ones((n_queries, n_keys), dtype=bool))


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


def test_arguments_have_pytorch_names_and_order(qkv):
    Q, K, V = qkv
    mask = np.ones((len(Q), len(K)), dtype=bool)
    positional = softmax_attention(Q, K, V, mask, False, 0.5)
    named = softmax_attention(query=Q, key=K, value=V, attn_mask=mask, is_causal=False, scale=0.5)
    np.testing.assert_array_equal(positional, named)


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
        ({"query": np.ones((2, 3))}, "same last dimension"),
        ({"value": np.ones((5, 2))}, "value must have shape"),
        ({"key_bias": np.ones(3)}, "key_bias must have shape"),
        ({"query": np.ones(4)}, "query must have shape .* at least 2 dimensions"),
        ({"key": np.ones(4)}, "key must have shape .* at least 2 dimensions"),
        ({"attn_mask": np.ones((3, 4), dtype=bool)}, "attn_mask must broadcast"),
        ({"query": np.ones((3, 2, 4)), "key": np.ones((2, 4, 4))}, "batch dimensions"),
    ],
)
def test_softmax_attention_rejects_bad_shapes(kwargs, match):
    args = {"query": np.ones((2, 4)), "key": np.ones((4, 4)), "value": np.ones(4)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        softmax_attention(**args)


def test_softmax_rows_sum_to_one_and_an_all_minus_inf_row_is_zero():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=300, size=(5, 9))
    weights = softmax(logits)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(log_softmax(logits)), weights, atol=1e-15)
    np.testing.assert_array_equal(softmax(np.full((1, 3), -np.inf)), np.zeros((1, 3)))


def test_softmax_along_another_axis_and_in_place():
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(4, 6))
    np.testing.assert_allclose(softmax(logits, axis=0), softmax(logits.T).T, rtol=1e-15)
    expected = softmax(logits)
    original = logits.copy()
    other = np.empty_like(logits)
    softmax(logits, out=other)
    np.testing.assert_array_equal(other, expected)
    # Another output leaves the logits alone; the logits themselves as output are overwritten.
    np.testing.assert_array_equal(logits, original)
    assert softmax(logits, out=logits) is logits
    np.testing.assert_array_equal(logits, expected)


def test_softmax_and_log_softmax_with_a_mask_remove_entries():
    rng = np.random.default_rng(12)
    logits = rng.normal(size=(2, 3, 5))
    mask = rng.random((3, 5)) < 0.6
    mask[1] = False
    weights = softmax(logits, mask=mask)
    expected = np.where(mask, np.exp(logits), 0.0)
    total = expected.sum(axis=-1, keepdims=True)
    expected = expected / np.where(total > 0, total, 1.0)
    np.testing.assert_allclose(weights, expected, rtol=1e-14, atol=1e-300)
    assert np.all(weights[:, 1] == 0.0)
    log_weights = log_softmax(logits, mask=mask)
    assert np.all(np.isneginf(log_weights[:, ~mask]))
    np.testing.assert_allclose(np.exp(log_weights), weights, rtol=1e-14, atol=1e-300)
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        softmax(logits, mask=mask.astype(float))
    with pytest.raises(ValueError, match="mask must broadcast"):
        softmax(logits, mask=mask[:, :4])


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
    np.testing.assert_array_equal(softmax(logits), [[0.0, 0.0], [1.0, 0.0]])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_log_softmax_and_softmax_reject_nan_and_plus_inf(bad):
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        log_softmax([0.0, bad])
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        softmax([0.0, bad])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected_naming_value(qkv, bad):
    Q, K, V = qkv
    V = V.copy()
    V[3, 1] = bad
    with pytest.raises(ValueError, match="^value contains NaN or infinite"):
        softmax_attention(Q, K, V)
    with pytest.raises(ValueError, match="^value contains NaN or infinite"):
        linear_attention(np.abs(Q), np.abs(K), V)


@pytest.mark.parametrize("name", ["query", "key"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_queries_or_keys_are_rejected_naming_them(qkv, name, bad):
    arrays = dict(zip(["query", "key", "value"], (a.copy() for a in qkv), strict=True))
    arrays[name][0, 0] = bad
    with pytest.raises(ValueError, match=f"^{name} contains NaN or infinite"):
        softmax_attention(**arrays)
    phi = {"query": "phi_q", "key": "phi_k"}[name]
    with pytest.raises(ValueError, match=f"^{phi} contains NaN or infinite"):
        linear_attention(
            phi_q=np.abs(arrays["query"]), phi_k=np.abs(arrays["key"]), value=arrays["value"]
        )


@pytest.mark.parametrize("name", ["query", "key", "value", "key_bias", "attn_mask"])
def test_complex_inputs_are_rejected_naming_the_argument(qkv, name):
    Q, K, V = qkv
    arguments = {"query": Q, "key": K, "value": V, "key_bias": np.zeros(len(K))}
    arguments["attn_mask"] = np.zeros((len(Q), len(K)))
    arguments[name] = arguments[name] * (1 + 1j)
    error = r"^attn_mask must be boolean" if name == "attn_mask" else f"^{name} must be real"
    with pytest.raises(TypeError, match=error):
        softmax_attention(**arguments)


@pytest.mark.parametrize("name", ["phi_q", "phi_k", "value"])
def test_complex_features_or_values_are_rejected_naming_the_argument(name):
    arguments = {"phi_q": np.ones((2, 3)), "phi_k": np.ones((4, 3)), "value": np.ones(4)}
    arguments[name] = arguments[name] + 1j
    with pytest.raises(TypeError, match=f"^{name} must be real"):
        linear_attention(**arguments)
    with pytest.raises(TypeError, match="^logits must be real"):
        softmax(np.ones(3) * 1j)


def test_non_numeric_arrays_are_rejected_naming_the_argument(qkv):
    Q, K, V = qkv
    with pytest.raises(TypeError, match="^value must be an array of real numbers"):
        softmax_attention(Q, K, np.array(["a"] * len(K)))


def test_an_integer_mask_is_refused_as_ambiguous(qkv):
    Q, K, V = qkv
    with pytest.raises(TypeError, match="attn_mask must be boolean .* or real floating"):
        softmax_attention(Q, K, V, np.ones((len(Q), len(K)), dtype=int))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_plus_inf_in_a_float_mask_is_refused(qkv, bad):
    Q, K, V = qkv
    mask = np.zeros((len(Q), len(K)))
    mask[1, 2] = bad
    with pytest.raises(ValueError, match="^attn_mask must be finite, or -inf"):
        softmax_attention(Q, K, V, mask)


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


def test_removing_every_key_gives_zeros_not_nan(qkv):
    Q, K, V = qkv
    # V away from 0, so that a result clipped into the range of V would show.
    out, weights = softmax_attention(
        Q, K, V + 10.0, key_bias=np.full(len(K), -np.inf), return_weights=True
    )
    np.testing.assert_array_equal(out, np.zeros((len(Q), V.shape[1])))
    np.testing.assert_array_equal(weights, np.zeros((len(Q), len(K))))


def test_attention_without_keys_gives_zeros_and_without_features_is_an_error():
    out, weights = softmax_attention(
        np.ones((2, 3)), np.ones((0, 3)), np.ones((0, 4)), return_weights=True
    )
    assert out.shape == (2, 4) and weights.shape == (2, 0)
    assert np.all(out == 0.0)
    np.testing.assert_array_equal(
        linear_attention(np.ones((2, 3)), np.ones((0, 3)), np.ones(0)), [0, 0]
    )
    with pytest.raises(ValueError, match="at least one feature"):
        softmax_attention(np.ones((2, 0)), np.ones((3, 0)), np.ones(3))


def test_no_queries_give_an_empty_result(qkv):
    _, K, V = qkv
    assert softmax_attention(np.ones((0, 4)), K, V).shape == (0, 3)
    assert softmax_attention(np.ones((2, 0, 4)), K, V, is_causal=True).shape == (2, 0, 3)
    assert linear_attention(np.ones((0, 4)), np.abs(K), V, is_causal=True).shape == (0, 3)


def test_one_key_gives_its_value_to_every_query():
    rng = np.random.default_rng(13)
    Q, K, V = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 1, 3)), rng.normal(size=(2, 1, 4))
    out, weights = softmax_attention(Q, K, V, is_causal=True, return_weights=True)
    np.testing.assert_array_equal(out, np.broadcast_to(V, (2, 5, 4)))
    np.testing.assert_array_equal(weights, np.ones((2, 5, 1)))


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


# ------------------------------------------------- batches, masks, causal attention


def test_batched_heads_equal_one_head_at_a_time():
    rng = np.random.default_rng(20)
    Q, K, V = (
        rng.normal(size=(2, 3, 6, 4)),
        rng.normal(size=(2, 3, 9, 4)),
        rng.normal(size=(2, 3, 9, 5)),
    )
    out, weights = softmax_attention(Q, K, V, return_weights=True)
    assert out.shape == (2, 3, 6, 5) and weights.shape == (2, 3, 6, 9)
    for b in range(2):
        for h in range(3):
            expected, expected_weights = softmax_attention(
                Q[b, h], K[b, h], V[b, h], return_weights=True
            )
            np.testing.assert_allclose(out[b, h], expected, rtol=1e-14, atol=1e-15)
            np.testing.assert_allclose(weights[b, h], expected_weights, rtol=1e-14, atol=1e-300)


def test_batch_dimensions_broadcast_as_in_pytorch():
    rng = np.random.default_rng(21)
    Q = rng.normal(size=(2, 3, 6, 4))
    K = rng.normal(size=(3, 9, 4))  # shared across the batch
    V = rng.normal(size=(2, 1, 9, 5))  # shared across the heads
    bias = rng.normal(size=(2, 1, 9))
    mask = rng.random((6, 9)) < 0.7  # one mask for every head
    out = softmax_attention(Q, K, V, mask, key_bias=bias)
    full = [np.broadcast_to(a, (2, 3) + a.shape[-2:]) for a in (K, V)]
    expected, _ = naive_softmax_attention(Q, *full, 0.5, np.broadcast_to(bias, (2, 3, 9)), mask)
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-15)


def test_a_one_dimensional_value_is_shared_by_every_head():
    rng = np.random.default_rng(22)
    Q, K, v = rng.normal(size=(3, 5, 2)), rng.normal(size=(3, 7, 2)), rng.normal(size=7)
    out = softmax_attention(Q, K, v)
    assert out.shape == (3, 5)
    np.testing.assert_allclose(out, softmax_attention(Q, K, v[:, None])[..., 0], rtol=1e-15)


@pytest.mark.parametrize("n_queries, n_keys", [(6, 6), (4, 9), (9, 4)])
def test_causal_attention_is_the_lower_triangle_aligned_top_left(n_queries, n_keys):
    rng = np.random.default_rng(23)
    Q, K, V = (rng.normal(size=(2, n, 3)) for n in (n_queries, n_keys, n_keys))
    out, weights = softmax_attention(Q, K, V, is_causal=True, return_weights=True)
    expected, expected_weights = naive_softmax_attention(
        Q, K, V, 1 / np.sqrt(3), mask=causal_mask(n_queries, n_keys)
    )
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-13, atol=1e-300)
    assert np.all(weights[:, ~causal_mask(n_queries, n_keys)] == 0.0)


def test_causal_attention_over_many_key_tiles_skips_none_it_needs():
    # More keys than a tile (512), causal and masked, in blocks of a few rows.
    rng = np.random.default_rng(24)
    Q, K, V = rng.normal(size=(1300, 3)), rng.normal(size=(1200, 3)), rng.normal(size=(1200, 2))
    mask = rng.random((1300, 1200)) < 0.9
    expected, _ = naive_softmax_attention(
        Q, K, V, 1 / np.sqrt(3), mask=mask & causal_mask(1300, 1200)
    )
    with config_context(working_memory=0.05):
        out = softmax_attention(Q, K, V, mask, is_causal=True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)


def test_a_boolean_mask_removes_keys_and_a_float_mask_is_added():
    rng = np.random.default_rng(25)
    Q, K, V = rng.normal(size=(5, 3)), rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    mask = rng.random((5, 8)) < 0.5
    mask[:, 0] = True
    out = softmax_attention(Q, K, V, mask)
    for i in range(5):
        np.testing.assert_allclose(
            out[i], softmax_attention(Q[i : i + 1], K[mask[i]], V[mask[i]])[0], rtol=1e-13
        )
    additive = rng.normal(size=(5, 8))
    additive[~mask] = -np.inf
    np.testing.assert_allclose(
        softmax_attention(Q, K, V, np.where(mask, 0.0, -np.inf)), out, rtol=1e-14
    )
    logits = Q @ K.T / np.sqrt(3) + additive
    expected = softmax(logits) @ V
    np.testing.assert_allclose(softmax_attention(Q, K, V, additive), expected, rtol=1e-13)


def test_a_fully_masked_row_gets_zeros_and_zero_weights():
    rng = np.random.default_rng(26)
    Q, K, V = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 6, 3)), rng.normal(size=(2, 6, 2))
    mask = np.ones((2, 4, 6), dtype=bool)
    mask[0, 1] = False
    mask[1, 3] = False
    for return_weights in (False, True):
        result = softmax_attention(Q, K, V + 5.0, mask, return_weights=return_weights)
        out = result[0] if return_weights else result
        assert np.all(out[0, 1] == 0.0) and np.all(out[1, 3] == 0.0)
        np.testing.assert_allclose(out[0, 0], softmax_attention(Q[0, :1], K[0], V[0] + 5.0)[0])
        if return_weights:
            assert np.all(result[1][0, 1] == 0.0) and np.all(result[1][1, 3] == 0.0)
            np.testing.assert_allclose(result[1][0, 0].sum(), 1.0)


def test_mask_and_causal_apply_together():
    rng = np.random.default_rng(27)
    Q, K, V = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    mask = rng.random((5, 5)) < 0.7
    expected, _ = naive_softmax_attention(Q, K, V, 1 / np.sqrt(3), mask=mask & causal_mask(5, 5))
    np.testing.assert_allclose(softmax_attention(Q, K, V, mask, True), expected, rtol=1e-13)


def test_float32_stays_float32_and_integers_become_float64():
    rng = np.random.default_rng(28)
    Q, K, V = (rng.normal(size=(2, n, 4)).astype(np.float32) for n in (5, 7, 7))
    out, weights = softmax_attention(Q, K, V, is_causal=True, return_weights=True)
    assert out.dtype == np.float32 and weights.dtype == np.float32
    expected = softmax_attention(*(a.astype(float) for a in (Q, K, V)), is_causal=True)
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)
    assert linear_attention(np.abs(Q), np.abs(K), V, is_causal=True).dtype == np.float32
    assert softmax(Q).dtype == np.float32 and log_softmax(Q).dtype == np.float32
    assert (
        softmax_attention(np.ones((2, 1), int), np.ones((3, 1), int), np.arange(3)).dtype == float
    )


def test_exact_attention_holds_no_queries_by_keys_matrix():
    # 4096 × 4096 float64 logits would take 128 MiB; the key tiles keep a few MiB.
    rng = np.random.default_rng(29)
    n = 4096
    Q, K, V = rng.normal(size=(n, 8)), rng.normal(size=(n, 8)), rng.normal(size=(n, 4))
    tracemalloc.start()
    try:
        softmax_attention(Q, K, V, is_causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_linear_attention_on_batched_heads_equals_one_head_at_a_time():
    rng = np.random.default_rng(30)
    phi_q, phi_k = rng.uniform(0.1, 1, size=(2, 3, 6, 5)), rng.uniform(0.1, 1, size=(3, 9, 5))
    V = rng.normal(size=(2, 1, 9, 2))
    out = linear_attention(phi_q, phi_k, V)
    assert out.shape == (2, 3, 6, 2)
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(
                out[b, h], linear_attention(phi_q[b, h], phi_k[h], V[b, 0]), rtol=1e-14
            )


@pytest.mark.parametrize("n_queries, n_keys", [(300, 300), (200, 350), (350, 200)])
def test_causal_linear_attention_equals_the_masked_quadratic_form(n_queries, n_keys):
    # More positions than a block of the prefix sums (128).
    rng = np.random.default_rng(31)
    phi_q = rng.uniform(0.1, 1, size=(2, n_queries, 5))
    phi_k = rng.uniform(0.1, 1, size=(2, n_keys, 5))
    V = rng.normal(size=(2, n_keys, 3))
    kernel = np.where(causal_mask(n_queries, n_keys), phi_q @ np.swapaxes(phi_k, -1, -2), 0.0)
    expected = kernel @ V / kernel.sum(axis=-1, keepdims=True)
    out = linear_attention(phi_q, phi_k, V, is_causal=True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)


def test_causal_linear_attention_survives_keys_growing_beyond_the_float_range():
    # The first keys are 1e-250, the last 1e+250: one scale for all keys would underflow the
    # first ones to 0 (0/0 for the first queries); the running scale keeps them.
    n = 512
    rng = np.random.default_rng(32)
    sizes = 10.0 ** np.repeat(np.linspace(-250, 250, 4), n // 4)
    phi_q = rng.uniform(0.1, 1, size=(n, 3))
    phi_k = rng.uniform(0.1, 1, size=(n, 3)) * sizes[:, None]
    V = rng.normal(size=(n, 2))
    out = linear_attention(phi_q, phi_k, V, is_causal=True)
    assert np.all(np.isfinite(out))
    first = n // 4
    np.testing.assert_allclose(
        out[:first],
        linear_attention(phi_q[:first], phi_k[:first] * 1e250, V[:first], is_causal=True),
        rtol=1e-12,
    )
    assert np.all((V.min(axis=0) <= out) & (out <= V.max(axis=0)))


def test_entropy_and_effective_neighbors_of_attention_weights():
    rng = np.random.default_rng(33)
    _, weights = softmax_attention(
        rng.normal(size=(2, 5, 3)),
        rng.normal(size=(2, 8, 3)),
        rng.normal(size=(2, 8, 1)),
        return_weights=True,
    )
    entropy = attention_entropy(weights)
    expected = -np.sum(np.where(weights > 0, weights * np.log(weights), 0.0), axis=-1)
    np.testing.assert_allclose(entropy, expected, rtol=1e-12)
    n_eff = effective_neighbors(weights)
    assert n_eff.shape == (2, 5) and np.all((n_eff >= 1 - 1e-12) & (n_eff <= 8 + 1e-9))
    np.testing.assert_allclose(effective_neighbors(np.full((1, 8), 0.125)), [8.0])
    np.testing.assert_array_equal(attention_entropy(np.zeros((1, 3))), [0.0])


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


@st.composite
def _masked_problem(draw):
    n_queries, n_keys, d = (draw(st.integers(1, 6)) for _ in range(3))
    Q = draw(arrays(float, (n_queries, d), elements=_unit)) * 3
    K = draw(arrays(float, (n_keys, d), elements=_unit)) * 3
    V = draw(arrays(float, (n_keys, 2), elements=_unit))
    mask = draw(arrays(bool, (n_queries, n_keys)))
    return Q, K, V, mask, draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(_masked_problem())
def test_masked_weights_are_non_negative_and_sum_to_one_or_zero(problem):
    Q, K, V, mask, causal = problem
    out, weights = softmax_attention(Q, K, V, mask, causal, return_weights=True)
    taking_part = mask & causal_mask(*mask.shape) if causal else mask
    assert np.all(weights[~taking_part] == 0.0)
    sums = weights.sum(axis=1)
    some = taking_part.any(axis=1)
    np.testing.assert_allclose(sums[some], 1.0, rtol=1e-12)
    assert np.all(sums[~some] == 0.0) and np.all(out[~some] == 0.0)
    assert np.all(np.isfinite(out))


@settings(max_examples=200, deadline=None)
@given(_masked_problem(), st.randoms(use_true_random=False))
def test_permuting_the_keys_does_not_change_the_output(problem, random):
    Q, K, V, mask, _ = problem
    order = list(range(len(K)))
    random.shuffle(order)
    bias = np.linspace(-1.0, 1.0, len(K))
    out = softmax_attention(Q, K, V, mask, key_bias=bias)
    permuted = softmax_attention(Q, K[order], V[order], mask[:, order], key_bias=bias[order])
    np.testing.assert_allclose(permuted, out, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("n_queries, n_keys", [(4, 0), (0, 5), (0, 0)])
def test_empty_queries_or_keys_keep_the_dtype_and_the_batch(n_queries, n_keys, is_causal):
    rng = np.random.default_rng(3)
    Q = rng.normal(size=(2, 1, n_queries, 4)).astype(np.float32)
    K = rng.normal(size=(3, n_keys, 4)).astype(np.float32)
    V = rng.normal(size=(n_keys, 2)).astype(np.float32)
    out, weights = softmax_attention(Q, K, V, is_causal=is_causal, return_weights=True)
    linear = linear_attention(np.exp(Q), np.exp(K), V, is_causal=is_causal)
    for result in (out, linear):
        assert result.dtype == np.float32 and result.shape == (2, 3, n_queries, 2)
        np.testing.assert_array_equal(result, 0.0)
    assert weights.dtype == np.float32 and weights.shape == (2, 3, n_queries, n_keys)


def test_positive_features_that_underflow_are_named_in_the_error():
    # φ(u) = exp(ωᵀu − ½‖u‖²) of inputs of norm 1e3 is 0 in every feature.
    rng = np.random.default_rng(2)
    omega = rng.normal(size=(16, 4))

    def positive(u):
        return np.exp(u @ omega.T - 0.5 * np.sum(u * u, axis=-1, keepdims=True))

    Q, K = 1e3 * rng.normal(size=(5, 4)), 1e3 * rng.normal(size=(6, 4))
    with pytest.raises(ValueError, match="of 0: no feature is positive .* underflow"):
        linear_attention(positive(Q), positive(K), rng.normal(size=6))
