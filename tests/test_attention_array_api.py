"""kernattn.attention on arrays of other libraries: the strict array-API namespace (no
function beyond the standard, no numpy behind the caller's back), and jax where installed.

The results must be arrays of the input's library and dtype, equal to the numpy results.
"""

import numpy as np
import pytest

xps = pytest.importorskip("array_api_strict")

from kernattn.attention import (  # noqa: E402
    attention_entropy,
    effective_neighbors,
    linear_attention,
    log_softmax,
    softmax,
    softmax_attention,
)

_ARRAY = type(xps.asarray(0.0))


def _problem(seed=0, batch=(2, 3), n_queries=5, n_keys=7):
    rng = np.random.default_rng(seed)
    Q = rng.normal(size=batch + (n_queries, 4))
    K = rng.normal(size=batch + (n_keys, 4))
    V = rng.normal(size=batch + (n_keys, 2))
    mask = rng.random((n_queries, n_keys)) < 0.7
    mask[1] = False
    return Q, K, V, mask


def _strict(a, dtype=None):
    return xps.asarray(a, dtype=dtype)


def _to_numpy(a):
    return np.from_dlpack(a)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_strict_arrays_round_trip_and_equal_numpy(dtype, is_causal):
    Q, K, V, mask = _problem()
    xp_dtype = getattr(xps, dtype)
    args = [_strict(a, xp_dtype) for a in (Q, K, V)]
    out, weights = softmax_attention(
        *args,
        _strict(mask),
        is_causal,
        return_weights=True,
        key_bias=_strict(np.zeros(7), xp_dtype),
    )
    assert isinstance(out, _ARRAY) and isinstance(weights, _ARRAY)
    assert out.dtype == xp_dtype and weights.dtype == xp_dtype
    expected, expected_weights = softmax_attention(
        *(a.astype(dtype) for a in (Q, K, V)), mask, is_causal, return_weights=True
    )
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-12}
    np.testing.assert_allclose(_to_numpy(out), expected, **tolerance)
    np.testing.assert_allclose(_to_numpy(weights), expected_weights, **tolerance)
    # Without weights: the key tiles of the reduction, not one block of logits.
    np.testing.assert_allclose(
        _to_numpy(softmax_attention(*args, _strict(mask), is_causal)), expected, **tolerance
    )


def test_strict_arrays_with_a_float_mask_and_shared_keys():
    Q, K, V, _ = _problem(batch=(2, 3))
    additive = np.random.default_rng(1).normal(size=(3, 5, 7))
    additive[0, 2] = -np.inf
    out = softmax_attention(_strict(Q), _strict(K[0]), _strict(V[:, :1]), _strict(additive))
    expected = softmax_attention(Q, K[0], V[:, :1], additive)
    np.testing.assert_allclose(_to_numpy(out), expected, rtol=1e-12)
    assert np.all(_to_numpy(out)[:, 0, 2] == 0.0)


def test_strict_linear_attention_plain_and_causal():
    rng = np.random.default_rng(2)
    phi_q, phi_k = rng.uniform(0.1, 1, size=(2, 200, 3)), rng.uniform(0.1, 1, size=(2, 150, 3))
    V = rng.normal(size=(2, 150, 2))
    for is_causal in (False, True):
        out = linear_attention(_strict(phi_q), _strict(phi_k), _strict(V), is_causal=is_causal)
        assert isinstance(out, _ARRAY) and out.dtype == xps.float64
        expected = linear_attention(phi_q, phi_k, V, is_causal=is_causal)
        np.testing.assert_allclose(_to_numpy(out), expected, rtol=1e-12)


def test_strict_softmax_log_softmax_and_diagnostics():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(3, 6))
    mask = rng.random((3, 6)) < 0.5
    mask[0] = False
    weights = softmax(_strict(logits), mask=_strict(mask))
    assert isinstance(weights, _ARRAY)
    np.testing.assert_allclose(_to_numpy(weights), softmax(logits, mask=mask), rtol=1e-14)
    log_weights = log_softmax(_strict(logits), axis=0)
    np.testing.assert_allclose(_to_numpy(log_weights), log_softmax(logits, axis=0), rtol=1e-14)
    entropy = attention_entropy(weights)
    assert isinstance(entropy, _ARRAY)
    np.testing.assert_allclose(_to_numpy(entropy), attention_entropy(softmax(logits, mask=mask)))
    np.testing.assert_allclose(
        _to_numpy(effective_neighbors(weights)), effective_neighbors(softmax(logits, mask=mask))
    )


def test_mixing_libraries_is_refused_naming_them():
    Q, K, V, _ = _problem()
    with pytest.raises(TypeError, match="arrays of one library"):
        softmax_attention(_strict(Q), K, V)


def test_nan_is_refused_by_name_on_strict_arrays():
    Q, K, V, _ = _problem()
    V[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="^value contains NaN"):
        softmax_attention(_strict(Q), _strict(K), _strict(V))


def test_jax_arrays_round_trip():
    jnp = pytest.importorskip("jax.numpy")
    Q, K, V, mask = _problem()
    out = softmax_attention(jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V), jnp.asarray(mask))
    assert type(out).__module__.startswith("jax")
    expected = softmax_attention(Q, K, V, mask).astype(np.asarray(out).dtype)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("n_queries, n_keys", [(4, 0), (0, 5), (0, 0)])
def test_empty_queries_or_keys_on_strict_arrays_give_empty_or_zero_results(
    n_queries, n_keys, is_causal
):
    rng = np.random.default_rng(4)
    shapes = [(2, 3, n_queries, 4), (2, 3, n_keys, 4), (2, 3, n_keys, 2)]
    args = [_strict(rng.normal(size=shape), xps.float32) for shape in shapes]
    out, weights = softmax_attention(*args, is_causal=is_causal, return_weights=True)
    linear = linear_attention(*(xps.exp(a) for a in args[:2]), args[2], is_causal=is_causal)
    for result in (out, linear):
        assert isinstance(result, _ARRAY) and result.dtype == xps.float32
        assert result.shape == (2, 3, n_queries, 2)
        np.testing.assert_array_equal(_to_numpy(result), np.zeros((2, 3, n_queries, 2)))
    assert isinstance(weights, _ARRAY) and weights.shape == (2, 3, n_queries, n_keys)
