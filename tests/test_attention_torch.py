"""kernattn.attention on torch tensors, against PyTorch's own attention.

``torch.nn.functional.scaled_dot_product_attention`` is the anchor: the same arguments give
the same outputs and the same gradients (plain, causal, boolean and float masks, L ≠ S,
broadcast batch shapes), in float32 and float64, on the CPU and, where one is present, on a
CUDA device. Skipped without torch (``pip install "kernattn[torch]"``).
"""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from kernattn import KernelSmoother  # noqa: E402
from kernattn.attention import (  # noqa: E402
    attention_entropy,
    linear_attention,
    log_softmax,
    softmax,
    softmax_attention,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# Tolerances against PyTorch: both sum the same terms in different orders.
TOLERANCE = {
    torch.float32: {"rtol": 2e-5, "atol": 2e-6},
    torch.float64: {"rtol": 1e-12, "atol": 1e-13},
}
GRADIENT_TOLERANCE = {
    torch.float32: {"rtol": 1e-4, "atol": 2e-5},
    torch.float64: {"rtol": 1e-10, "atol": 1e-12},
}


def _tensors(shapes, dtype, device, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=dtype).to(device) for shape in shapes]


# (query, key, value, mask) shapes: batch shapes that broadcast, L ≠ S both ways.
SHAPES = {
    "2-D": ((5, 4), (7, 4), (7, 3), (5, 7)),
    "heads": ((3, 6, 8), (3, 6, 8), (3, 6, 5), (6, 6)),
    "batch-heads": ((2, 3, 9, 4), (2, 3, 5, 4), (2, 3, 5, 6), (2, 1, 9, 5)),
    "shared-keys": ((2, 3, 5, 4), (1, 3, 8, 4), (2, 1, 8, 2), (5, 8)),
    "key-padding": ((2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 3), (2, 1, 1, 6)),
}


def _mask(kind, shape, dtype, device, seed=1):
    generator = torch.Generator().manual_seed(seed)
    if kind == "bool":
        mask = torch.rand(shape, generator=generator) < 0.7
        # A row of the mask with no key: SDPA's answer for it is 0, as ours.
        mask[..., 0, :] = False
        return mask.to(device)
    if kind == "float":
        mask = torch.randn(shape, generator=generator, dtype=dtype)
        mask[torch.rand(shape, generator=generator) < 0.2] = -math.inf
        return mask.to(device)
    return None


def _broadcast_for_sdpa(q, k, v, mask):
    """SDPA (math and flash kernels alike) wants query, key and value of one batch shape."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return (
        q.expand(batch + q.shape[-2:]),
        k.expand(batch + k.shape[-2:]),
        v.expand(batch + v.shape[-2:]),
        mask,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", list(SHAPES))
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_equals_scaled_dot_product_attention(device, dtype, shapes, mask_kind, is_causal):
    shapes = SHAPES[shapes]
    q, k, v = _tensors(shapes[:3], dtype, device)
    mask = _mask(mask_kind, shapes[3], dtype, device)
    out = softmax_attention(q, k, v, mask, is_causal)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == q.device
    args = _broadcast_for_sdpa(q, k, v, mask)
    if is_causal and mask is not None:
        # SDPA takes one or the other: the causal mask folded into the explicit one.
        causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=device).tril()
        if mask.dtype == torch.bool:
            mask = mask & causal
        else:
            mask = mask.masked_fill(~causal, -math.inf)
        expected = F.scaled_dot_product_attention(*args[:3], attn_mask=mask)
    else:
        expected = F.scaled_dot_product_attention(*args, is_causal=is_causal)
    # Rows of a float mask that are all −inf: SDPA's answer is 0 there too (torch >= 2.5).
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_kind", [None, "bool"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_key_sets_of_several_tiles_equal_scaled_dot_product_attention(dtype, mask_kind, is_causal):
    # 2 600 keys: several tiles of the reduction (1 024 keys in float32, 512 in float64),
    # whose sums are rescaled in place in the result, with broadcast batch dimensions.
    q, k, v = _tensors([(2, 3, 300, 8), (1, 3, 2600, 8), (2, 1, 2600, 4)], dtype, "cpu")
    mask = _mask(mask_kind, (300, 2600), dtype, "cpu")
    out = softmax_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    # SDPA takes a mask or is_causal: both, as one mask.
    causal = torch.ones(300, 2600, dtype=torch.bool).tril() if is_causal else None
    if mask is not None and causal is not None:
        mask, causal = mask & causal, None
    expected = F.scaled_dot_product_attention(
        *_broadcast_for_sdpa(q, k, v, mask)[:3], attn_mask=mask, is_causal=causal is not None
    )
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", ["2-D", "batch-heads", "shared-keys"])
@pytest.mark.parametrize(
    "mask_kind, is_causal", [(None, False), (None, True), ("bool", False), ("float", True)]
)
def test_gradients_equal_those_of_scaled_dot_product_attention(
    device, dtype, shapes, mask_kind, is_causal
):
    shapes = SHAPES[shapes]
    ours = [t.requires_grad_() for t in _tensors(shapes[:3], dtype, device)]
    theirs = [t.detach().clone().requires_grad_() for t in ours]
    mask = _mask(mask_kind, shapes[3], dtype, device)
    weights = _tensors([shapes[0][:-1] + (shapes[2][-1],)], dtype, device, seed=5)[0]
    out = softmax_attention(*ours, mask, is_causal and mask is None)
    (out * weights).sum().backward()
    expected = F.scaled_dot_product_attention(
        *_broadcast_for_sdpa(*theirs, mask), is_causal=is_causal and mask is None
    )
    (expected * weights).sum().backward()
    for name, a, b in zip(["query", "key", "value"], ours, theirs, strict=True):
        assert a.grad is not None and torch.isfinite(a.grad).all(), name
        torch.testing.assert_close(a.grad, b.grad, **GRADIENT_TOLERANCE[dtype], msg=name)


def test_gradients_pass_gradcheck_including_the_key_bias_and_a_float_mask():
    q, k, v = (
        t.requires_grad_()
        for t in _tensors([(2, 4, 3), (2, 6, 3), (2, 6, 2)], torch.float64, "cpu")
    )
    bias = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)

    def attention(q, k, v, bias, mask):
        return softmax_attention(q, k, v, mask, True, 0.7, key_bias=bias)

    assert torch.autograd.gradcheck(attention, (q, k, v, bias, mask))


def test_a_fully_masked_row_has_zero_output_and_finite_gradients():
    q, k, v = (
        t.requires_grad_()
        for t in _tensors([(2, 4, 3), (2, 6, 3), (2, 6, 2)], torch.float32, "cpu")
    )
    mask = torch.ones(2, 4, 6, dtype=torch.bool)
    mask[1, 2] = False
    out, weights = softmax_attention(q, k, v + 3.0, mask, return_weights=True)
    assert torch.all(out[1, 2] == 0) and torch.all(weights[1, 2] == 0)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_weights_are_softmax_of_the_logits():
    q, k, v = _tensors([(2, 5, 4), (2, 7, 4), (2, 7, 3)], torch.float64, "cpu")
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(3)) < 0.6
    out, weights = softmax_attention(q, k, v, mask, return_weights=True)
    logits = (q @ k.mT / 2).masked_fill(~mask, -math.inf)
    expected = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)
    torch.testing.assert_close(weights, expected, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(out, weights @ v, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(softmax(logits), expected, rtol=1e-13, atol=1e-15)
    log_weights = log_softmax(q @ k.mT, mask=mask)
    torch.testing.assert_close(
        log_weights.exp(),
        torch.nan_to_num(torch.softmax((q @ k.mT).masked_fill(~mask, -math.inf), -1), nan=0.0),
    )


def test_float32_stays_float32_and_integers_become_the_default_float():
    q, k, v = _tensors([(3, 4), (5, 4), (5, 2)], torch.float32, "cpu")
    assert softmax_attention(q, k, v).dtype == torch.float32
    assert softmax_attention(q.double(), k, v).dtype == torch.float64
    ints = torch.arange(12).reshape(3, 4)
    assert softmax_attention(ints, ints, ints).dtype == torch.get_default_dtype()
    half = softmax_attention(q.half(), k.half(), v.half())
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), softmax_attention(q, k, v), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", ["query", "key", "value"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_and_infinity_are_refused_by_name(name, bad):
    arrays = dict(
        zip(
            ["query", "key", "value"],
            _tensors([(3, 4), (5, 4), (5, 2)], torch.float32, "cpu"),
            strict=True,
        )
    )
    arrays[name][1, 1] = bad
    with pytest.raises(ValueError, match=f"^{name} contains NaN or infinite"):
        softmax_attention(**arrays)


def test_arrays_of_two_libraries_are_refused_naming_them():
    q, k, v = _tensors([(3, 4), (5, 4), (5, 2)], torch.float32, "cpu")
    with pytest.raises(TypeError, match="arrays of one library; got .*numpy.*torch|torch.*numpy"):
        softmax_attention(q, k.numpy(), v)


_MEMORY_PROBE = """
import resource, threading, time
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
def peak_growth(function):
    # The largest resident memory during function() (sampled every half millisecond), less
    # the resident memory before it.
    before, peak, done = resident(), [0], threading.Event()
    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], resident())
            time.sleep(0.0005)
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = function()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], resident()) - before, result
import torch
from kernattn.attention import softmax_attention
torch.set_num_threads(1)  # on a busy machine torch's threads wait for each other
n = 16384
q, k, v = (torch.randn(n, 16) for _ in range(3))
# A first call through the same key tiles, on few queries: what it loads and allocates once
# (libraries' kernels and workspaces) is not the computation's.
softmax_attention(q[:512], k, v)
grown, out = peak_growth(lambda: softmax_attention(q, k, v, is_causal=True))
assert bool(torch.isfinite(out).all())
print(grown)
"""


def test_exact_attention_at_length_16384_holds_no_length_squared_matrix():
    # One head, float32: 16384 × 16384 logits would take 1 GiB. A fresh process, so that
    # its peak resident memory is this computation's.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    grown = int(done.stdout.split()[-1])
    assert grown < 256 * 2**20, f"peak resident memory grew by {grown / 2**20:.0f} MiB"


def test_the_gaussian_smoother_is_softmax_attention_on_tensors():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 5, size=(200, 2)), rng.normal(size=200)
    queries = rng.uniform(0, 5, size=(30, 2))
    h = 0.4
    expected = KernelSmoother(bandwidth=h).fit(X, y).predict(queries)
    # Centering changes no distance, and keeps the key bias −½‖k‖² small.
    center = X.mean(axis=0)
    keys = torch.tensor((X - center) / h)
    out = softmax_attention(
        torch.tensor((queries - center) / h),
        keys,
        torch.tensor(y),
        scale=1.0,
        key_bias=-0.5 * (keys**2).sum(dim=-1),
    )
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
    # In float32 too, to float32's precision.
    out32 = softmax_attention(
        torch.tensor((queries - center) / h, dtype=torch.float32),
        keys.float(),
        torch.tensor(y, dtype=torch.float32),
        scale=1.0,
        key_bias=-0.5 * (keys.float() ** 2).sum(dim=-1),
    )
    np.testing.assert_allclose(out32.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_queries, n_keys", [(300, 300), (100, 260), (260, 100)])
def test_causal_linear_attention_equals_the_masked_quadratic_form(
    device, dtype, n_queries, n_keys
):
    generator = torch.Generator().manual_seed(4)
    phi_q = (torch.rand(2, n_queries, 6, generator=generator, dtype=dtype) + 0.1).to(device)
    phi_k = (torch.rand(2, n_keys, 6, generator=generator, dtype=dtype) + 0.1).to(device)
    v = torch.randn(2, n_keys, 3, generator=generator, dtype=dtype).to(device)
    out = linear_attention(phi_q, phi_k, v, is_causal=True)
    assert out.dtype == dtype and out.device == phi_q.device
    causal = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril()
    kernel = (phi_q @ phi_k.mT).masked_fill(~causal, 0.0)
    torch.testing.assert_close(out, kernel @ v / kernel.sum(-1, keepdim=True), **TOLERANCE[dtype])
    # Without the mask: the plain ratio.
    kernel = phi_q @ phi_k.mT
    torch.testing.assert_close(
        linear_attention(phi_q, phi_k, v),
        kernel @ v / kernel.sum(-1, keepdim=True),
        **TOLERANCE[dtype],
    )


def test_causal_linear_attention_differentiates_as_the_masked_quadratic_form():
    # Several blocks of the prefix sums (128 positions each).
    generator = torch.Generator().manual_seed(5)
    ours = [
        torch.rand(2, 300, 4, generator=generator, dtype=torch.float64) + 0.1,
        torch.rand(2, 300, 4, generator=generator, dtype=torch.float64) + 0.1,
        torch.randn(2, 300, 2, generator=generator, dtype=torch.float64),
    ]
    ours = [t.requires_grad_() for t in ours]
    theirs = [t.detach().clone().requires_grad_() for t in ours]
    weights = torch.randn(2, 300, 2, generator=generator, dtype=torch.float64)
    (linear_attention(*ours, is_causal=True) * weights).sum().backward()
    phi_q, phi_k, v = theirs
    kernel = (phi_q @ phi_k.mT).tril()
    ((kernel @ v / kernel.sum(-1, keepdim=True)) * weights).sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)
    small = [t.detach()[:1, :7].clone().requires_grad_() for t in ours]
    assert torch.autograd.gradcheck(
        lambda a, b, c: linear_attention(a, b, c, is_causal=True), small
    )


def test_entropy_of_tensor_weights_is_a_tensor():
    _, weights = softmax_attention(
        *_tensors([(2, 5, 3), (2, 8, 3), (2, 8, 1)], torch.float32, "cpu"), return_weights=True
    )
    entropy = attention_entropy(weights)
    assert isinstance(entropy, torch.Tensor) and entropy.shape == (2, 5)
    expected = attention_entropy(weights.numpy())
    np.testing.assert_allclose(entropy.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert torch.all(entropy <= math.log(8) + 1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("n_queries, n_keys", [(4, 0), (0, 5), (0, 0)])
def test_empty_queries_or_keys_give_what_scaled_dot_product_attention_gives(
    n_queries, n_keys, is_causal
):
    # SDPA's convention: no queries, an empty result; no keys, an output of zeros (a sum
    # over no keys). Both stay in the autograd graph, with zero gradients.
    q, k, v = _tensors(
        [(2, 3, n_queries, 4), (2, 3, n_keys, 4), (2, 3, n_keys, 5)], torch.float32, "cpu"
    )
    for t in (q, k, v):
        t.requires_grad_()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out, weights = softmax_attention(q, k, v, is_causal=is_causal, return_weights=True)
    assert out.dtype == torch.float32 and weights.shape == (2, 3, n_queries, n_keys)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    out.sum().backward()
    for t in (q, k, v):
        torch.testing.assert_close(t.grad, torch.zeros_like(t), rtol=0, atol=0)
    linear = linear_attention(q.detach().exp(), k.detach().exp(), v, is_causal=is_causal)
    torch.testing.assert_close(linear, expected.detach(), rtol=0, atol=0)
    # A 1-D value of S entries, a key bias and a boolean mask of the empty shapes.
    out = softmax_attention(
        q,
        k,
        v[0, 0, :, 0],
        torch.ones(n_queries, n_keys, dtype=torch.bool),
        is_causal,
        key_bias=torch.zeros(n_keys),
    )
    torch.testing.assert_close(out, torch.zeros(2, 3, n_queries), rtol=0, atol=0)
