"""kernattn.torch.KernelAttention against torch.nn.MultiheadAttention and kernattn's smoothers.

The softmax kernel with the weights of a ``torch.nn.MultiheadAttention`` computes the same
outputs, weights and gradients (plain, causal and padding masks, float32 and float64); the
Gaussian kernel gives the weights of ``KernelSmoother`` and ``AttentionRegressor`` for the
same metric; a linear kernel run causally by prefix sums equals its quadratic form with the
causal mask. Skipped without torch (``pip install "kernattn[torch]"``).
"""

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernattn import AttentionRegressor, KernelSmoother  # noqa: E402
from kernattn.feature_maps import PositiveRandomFeatures  # noqa: E402
from kernattn.torch import KernelAttention  # noqa: E402

TOLERANCE = {
    torch.float32: {"rtol": 2e-5, "atol": 2e-6},
    torch.float64: {"rtol": 1e-11, "atol": 1e-12},
}
E, H, B, L = 12, 3, 2, 7


def _pair(dtype, seed=0):
    """A MultiheadAttention and a KernelAttention with the same weights (random biases)."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=dtype)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    layer = KernelAttention(E, H).to(dtype)
    layer.load_state_dict(mha.state_dict())
    return mha, layer


def _masks():
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, 4:] = True
    return causal, padding


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "both", "float"])
@pytest.mark.parametrize("average", [True, False])
def test_softmax_kernel_equals_multihead_attention(dtype, masks, average):
    mha, layer = _pair(dtype)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(B, L, E, dtype=dtype, generator=generator)
    memory = torch.randn(B, L, E, dtype=dtype, generator=generator)
    causal, padding = _masks()
    kwargs = {
        "none": {},
        "causal": {"attn_mask": causal},
        "padding": {"key_padding_mask": padding},
        "both": {"attn_mask": causal, "key_padding_mask": padding},
        "float": {
            "attn_mask": torch.randn(B * H, L, L, dtype=dtype, generator=generator),
            "key_padding_mask": torch.zeros((), dtype=dtype).masked_fill(padding, -math.inf),
        },
    }[masks]
    expected, expected_weights = mha(x, memory, memory, average_attn_weights=average, **kwargs)
    out, weights = layer(x, memory, memory, average_attn_weights=average, **kwargs)
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])
    torch.testing.assert_close(weights, expected_weights, **TOLERANCE[dtype])
    assert weights.shape == ((B, L, L) if average else (B, H, L, L))


def test_is_causal_equals_the_causal_mask():
    _, layer = _pair(torch.float64)
    x = torch.randn(B, L, E, dtype=torch.float64)
    causal, _ = _masks()
    by_flag = layer(x, is_causal=True)
    by_mask = layer(x, attn_mask=causal)
    torch.testing.assert_close(by_flag[0], by_mask[0], rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(by_flag[1], by_mask[1], rtol=1e-12, atol=1e-13)


def test_parameter_gradients_equal_multihead_attention():
    mha, layer = _pair(torch.float64)
    x = torch.randn(B, L, E, dtype=torch.float64)
    causal, padding = _masks()
    target = torch.randn(B, L, E, dtype=torch.float64)
    for module in (mha, layer):
        out, _ = module(x, x, x, attn_mask=causal, key_padding_mask=padding)
        torch.sum((out - target) ** 2).backward()
    grads = dict(layer.named_parameters())
    for name, parameter in mha.named_parameters():
        torch.testing.assert_close(grads[name].grad, parameter.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "elu", "positive"])
@pytest.mark.parametrize("scale", [None, "learned"])
def test_gradcheck(kernel, scale):
    torch.manual_seed(0)
    layer = KernelAttention(4, 2, kernel=kernel, scale=scale, random_state=0).double()
    x = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    parameters = tuple(p for p in layer.parameters())

    def function(x, *_):
        return layer(x, is_causal=True)[0]

    assert torch.autograd.gradcheck(function, (x, *parameters), eps=1e-6, atol=1e-6)


def test_gaussian_kernel_is_the_kernel_smoother():
    # KernelSmoother(bandwidth=h): exp(-½‖x - x'‖²/h²). With W_q = W_k = I and s = 1/h² the
    # layer's kernel is the same (the bias of the projections is 0).
    rng = np.random.default_rng(0)
    X, Xq, y = rng.normal(size=(20, 3)), rng.normal(size=(6, 3)), rng.normal(size=20)
    h = 0.7
    expected = KernelSmoother(bandwidth=h).fit(X, y).attention_weights(Xq)
    layer = KernelAttention(3, 1, kernel="gaussian", scale=1.0 / h**2, bias=False).double()
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.eye(3, dtype=torch.float64).repeat(3, 1))
    _, weights = layer(torch.as_tensor(Xq)[None], torch.as_tensor(X)[None])
    np.testing.assert_allclose(weights[0].detach().numpy(), expected, rtol=1e-10, atol=1e-14)


def test_gaussian_kernel_is_the_attention_regressor_with_its_metric():
    # AttentionRegressor: logits s·(-½‖u W - u_i W‖²) on u = x (standardize=False); the
    # layer's projections act as x @ weightᵀ, so W_q = W_k = Wᵀ.
    rng = np.random.default_rng(1)
    X, Xq, y = rng.normal(size=(25, 2)), rng.normal(size=(5, 2)), rng.normal(size=25)
    W = np.array([[1.3, 0.2], [-0.4, 0.9]])
    regressor = AttentionRegressor(
        init=W, scale=0.8, standardize=False, max_iter=0, tilt=False, warp=0, alpha=0.0
    ).fit(X, y)
    layer = KernelAttention(2, 1, kernel="gaussian", scale=0.8, bias=False).double()
    with torch.no_grad():
        layer.in_proj_weight[:4].copy_(torch.as_tensor(W.T).repeat(2, 1))
    _, weights = layer(torch.as_tensor(Xq)[None], torch.as_tensor(X)[None])
    np.testing.assert_allclose(
        weights[0].detach().numpy(), regressor.attention_weights(Xq), rtol=1e-9, atol=1e-14
    )


@pytest.mark.parametrize("kernel", ["elu", "positive", PositiveRandomFeatures(16)])
def test_causal_linear_kernel_equals_the_masked_quadratic_form(kernel):
    torch.manual_seed(0)
    layer = KernelAttention(E, H, kernel=kernel, random_state=3).double()
    x = torch.randn(B, L, E, dtype=torch.float64)
    out, weights = layer(x, is_causal=True, average_attn_weights=False)
    # The quadratic form: φ(q)ᵀφ(k) on every pair, the upper triangle set to 0, normalised.
    q, k, v = (layer._project(x, part) for part in range(3))
    root = math.sqrt(1.0 / math.sqrt(layer.head_dim))
    phi_q, phi_k = layer.features(q * root, k * root)
    kernel_matrix = phi_q @ phi_k.transpose(-1, -2)
    kernel_matrix = torch.tril(kernel_matrix)
    expected_weights = kernel_matrix / kernel_matrix.sum(-1, keepdim=True)
    expected = layer.out_proj((expected_weights @ v).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(weights, expected_weights, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)


def test_linear_kernel_padding_removes_the_keys():
    torch.manual_seed(0)
    layer = KernelAttention(E, H, kernel="elu").double()
    x = torch.randn(1, L, E, dtype=torch.float64)
    padding = torch.zeros(1, L, dtype=torch.bool)
    padding[0, 5:] = True
    padded, weights = layer(x, key_padding_mask=padding)
    cut, _ = layer(x, x[:, :5], x[:, :5])
    torch.testing.assert_close(padded, cut, rtol=1e-10, atol=1e-12)
    assert torch.all(weights[..., 5:] == 0)


def test_learned_scale_is_a_parameter_per_head():
    layer = KernelAttention(8, 2, scale="learned")
    assert layer.log_scale.shape == (2,)
    torch.testing.assert_close(layer.head_scale(), torch.full((2,), 0.5))
    x = torch.randn(2, 4, 8)
    layer(x)[0].sum().backward()
    assert layer.log_scale.grad is not None and torch.all(layer.log_scale.grad != 0)


def test_scale_none_and_one():
    _, layer = _pair(torch.float64)
    unscaled = KernelAttention(E, H, scale=1.0).double()
    unscaled.load_state_dict(layer.state_dict())
    x = torch.randn(1, L, E, dtype=torch.float64)
    # Scale 1 on queries multiplied by 1/√d is the default scale.
    with torch.no_grad():
        unscaled.in_proj_weight[:E] /= math.sqrt(E // H)
        unscaled.in_proj_bias[:E] /= math.sqrt(E // H)
    torch.testing.assert_close(unscaled(x)[0], layer(x)[0], rtol=1e-12, atol=1e-13)


def test_need_weights_false_and_shapes():
    layer = KernelAttention(E, H, head_dim=5)
    x = torch.randn(B, L, E)
    out, weights = layer(x, need_weights=False)
    assert out.shape == (B, L, E) and weights is None
    assert layer.in_proj_weight.shape == (3 * H * 5, E)
    out, weights = layer(x[0], x[0, :3], x[0, :3], average_attn_weights=False)
    assert out.shape == (L, E) and weights.shape == (H, L, 3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"kernel": "cosine"}, ValueError, "kernel must be one of 'softmax', 'gaussian'"),
        ({"kernel": 3}, TypeError, "kernel must be one of"),
        ({"kernel": "nystroem"}, ValueError, "fitted to the keys"),
        ({"scale": "learn"}, ValueError, "'learned'"),
        ({"scale": -1.0}, ValueError, "positive"),
        ({"num_heads": 5}, ValueError, "multiple of num_heads"),
    ],
)
def test_bad_parameters_are_named(kwargs, error, match):
    settings = {"embed_dim": E, "num_heads": H} | kwargs
    with pytest.raises(error, match=match):
        KernelAttention(**settings)


def test_bad_shapes_and_masks_are_named():
    layer = KernelAttention(E, H)
    x = torch.randn(B, L, E)
    with pytest.raises(ValueError, match=r"shape \(batch, length, 12\)"):
        layer(torch.randn(B, L, E + 1))
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        layer(x, attn_mask=torch.zeros(L, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        layer(x, key_padding_mask=torch.zeros(B, L + 1, dtype=torch.bool))
    linear = KernelAttention(E, H, kernel="elu")
    with pytest.raises(ValueError, match="not an attn_mask"):
        linear(x, attn_mask=torch.zeros(L, L, dtype=torch.bool))


def test_import_without_torch_names_the_extra():
    # A finder that refuses torch, as an environment without it would.
    code = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import kernattn\n"
        "assert 'kernattn.torch' not in sys.modules\n"
        "try:\n"
        "    import kernattn.torch\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "kernattn[torch]" in done.stdout


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "positive", "elu", "trig"])
@pytest.mark.parametrize("n_queries, n_keys", [(4, 0), (0, 5), (0, 0)])
def test_empty_queries_or_keys_give_what_multihead_attention_gives(kernel, n_queries, n_keys):
    # No keys: every head's output is 0, so the layer returns out_proj's bias, as
    # torch.nn.MultiheadAttention does; no queries: empty outputs. Gradients flow.
    mha, _ = _pair(torch.float64)
    torch.manual_seed(1)
    layer = KernelAttention(E, H, kernel=kernel, random_state=0).double()
    state = {name: value for name, value in mha.state_dict().items()}
    layer.load_state_dict(state, strict=False)
    query = torch.randn(B, n_queries, E, dtype=torch.float64)
    key = torch.randn(B, n_keys, E, dtype=torch.float64)
    for is_causal in (False, True):
        out, weights = layer(query, key, key, is_causal=is_causal)
        expected, expected_weights = mha(query, key, key)
        assert out.shape == expected.shape and weights.shape == expected_weights.shape
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-15)
        out.sum().backward()
        assert torch.all(torch.isfinite(layer.in_proj_weight.grad))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kernel", ["positive", "hyperbolic", "elu"])
def test_exponential_features_of_large_inputs_keep_every_denominator_positive(kernel, dtype):
    # Inputs scaled by 1e3: exp(ωᵀu − ½‖u‖²) and exp(u) underflow for every feature of
    # most rows. From the logs, with the per-feature key maximum moved to the queries, the
    # weights are those of the kernel computed in log space, log κ = logsumexp_f.
    torch.manual_seed(0)
    layer = KernelAttention(E, H, kernel=kernel, random_state=3).to(dtype)
    x = 1e3 * torch.randn(B, L, E, dtype=dtype)
    out, weights = layer(x, average_attn_weights=False)
    assert torch.all(torch.isfinite(out))
    q, k = (layer._project(x, part) for part in range(2))
    root = math.sqrt(1.0 / math.sqrt(layer.head_dim))
    log_q = layer.features._log_features(q * root).double()
    log_k = layer.features._log_features(k * root).double()
    log_kernel = torch.logsumexp(log_q[..., :, None, :] + log_k[..., None, :, :], dim=-1)
    expected = torch.softmax(log_kernel, dim=-1).to(dtype)
    torch.testing.assert_close(weights, expected, rtol=1e-4, atol=1e-5)


def test_a_causal_prefix_that_underflows_names_the_limit():
    torch.manual_seed(0)
    layer = KernelAttention(E, H, kernel="positive", random_state=3).double()
    with pytest.raises(ValueError, match="underflow for inputs of large norm"):
        layer(1e3 * torch.randn(B, 50, E, dtype=torch.float64), is_causal=True)
