r"""A multi-head attention layer for PyTorch whose kernel is a parameter.

:class:`KernelAttention` is :class:`torch.nn.MultiheadAttention` (``batch_first=True``) with
the similarity of a query and a key made explicit. Every head is a Nadaraya–Watson smoother
over the tokens,

.. math::

    \mathrm{out}_i = \frac{\sum_j \kappa(q_i, k_j)\, v_j}{\sum_j \kappa(q_i, k_j)},
    \qquad q = W_q x,\; k = W_k x',\; v = W_v x',

and ``kernel`` chooses :math:`\kappa` with scale :math:`s`:

- ``"softmax"``: :math:`\exp(s\, q^\top k)`, the transformer's scaled dot product;
- ``"gaussian"``: :math:`\exp(-\tfrac12 s \|q - k\|^2)`, the Gaussian smoother in the metric
  learned by :math:`W_q, W_k` (the kernel of :class:`kernattn.AttentionRegressor` when
  :math:`W_q = W_k`). Since :math:`-\tfrac12 s\|q - k\|^2 = s\, q^\top k - \tfrac12 s\|k\|^2
  - \tfrac12 s\|q\|^2` and the last term is the same for every key of a query, it is softmax
  attention with the key bias :math:`-\tfrac12 s\|k\|^2`;
- a feature map of :mod:`kernattn.feature_maps` (its name or the object):
  :math:`\phi(\sqrt s\, q)^\top \phi(\sqrt s\, k)`, linear attention, causal by running sums.
  The exponential maps (``"positive"``, ``"hyperbolic"``, ``"elu"``) are evaluated from their
  logs, each key feature divided by its largest over the keys and each query row by its
  largest entry (factors that cancel in the ratio), so that no query's denominator
  underflows to 0, however large the inputs. One limit remains, causally: the constants
  are taken over all the keys, and a prefix whose keys' log-features all lie more than
  about 700 below the later keys' (85 in float32; inputs of norm beyond about 30, or 10,
  for ``"positive"``) underflows; that raises a ``ValueError`` that says so.

The attention itself is computed by :func:`kernattn.attention.softmax_attention` and
:func:`kernattn.attention.linear_attention` on torch tensors, so it differentiates through
autograd. Install with the torch extra, ``pip install ".[torch]"`` from a clone (the CPU
build of torch is enough: ``pip install torch --index-url
https://download.pytorch.org/whl/cpu`` first); ``import kernattn`` does not import this
module.
"""

import math

try:
    import torch
    from torch import nn
except ImportError as error:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "kernattn.torch needs PyTorch; install it with the torch extra: "
        'pip install "kernattn[torch]" (from a clone: pip install ".[torch]"). The CPU build '
        "is enough and far smaller: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu"
    ) from error

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.sums import constant, shift_of
from kernattn.attention import linear_attention, softmax_attention
from kernattn.feature_maps import (
    FEATURE_MAPS,
    EluFeatureMap,
    FeatureMap,
    PositiveRandomFeatures,
    ReluFeatureMap,
    TrigonometricRandomFeatures,
    check_feature_map,
)

__all__ = ["KernelAttention"]

#: The kernels :class:`KernelAttention` computes as softmax attention; any name of
#: ``kernattn.feature_maps.FEATURE_MAPS`` (or a FeatureMap) gives linear attention.
EXACT_KERNELS = ("softmax", "gaussian")


def _kernel_options():
    names = ", ".join(map(repr, EXACT_KERNELS + FEATURE_MAPS))
    return f"{names} or a kernattn.feature_maps.FeatureMap"


class _TorchFeatures(nn.Module):
    """A fitted feature map of :mod:`kernattn.feature_maps` evaluated on torch tensors.

    The draws (frequencies, offsets) are buffers: they follow ``.to()`` and ``.double()``,
    are saved in the ``state_dict`` and are not trained. The formulas are those of the
    numpy maps (``transform``), written with torch operations so that gradients flow.
    """

    def __init__(self, feature_map):
        super().__init__()
        self.feature_map = feature_map
        if isinstance(feature_map, PositiveRandomFeatures):
            self.register_buffer("omega", torch.as_tensor(feature_map.scaled_omega_.T.copy()))
            self.register_buffer("offset", torch.as_tensor(feature_map.log_offset_.copy()))
        elif isinstance(feature_map, TrigonometricRandomFeatures):
            self.register_buffer("omega", torch.as_tensor(feature_map.omega_.T.copy()))
        for name in ("omega", "offset"):
            if hasattr(self, name):
                setattr(self, name, getattr(self, name).to(torch.get_default_dtype()))

    def forward(self, queries, keys):
        """φ(queries) and φ(keys) over the last axis, each up to factors that cancel in the
        linear-attention ratio, so that no feature overflows or underflows to 0 alone.

        For the positive (log-domain) maps, feature ``j`` of every key is divided by the
        largest over the keys, :math:`e^{c_j}`, and multiplied into the queries' feature
        ``j`` instead (``φ(q)ᵀφ(k)`` is unchanged); each query row is then divided by its
        largest entry. Every query keeps a feature of weight 1 whose key sum is at least 1,
        so a denominator of non-causal attention is never 0, however large the inputs (the
        estimate of random features is then that of the few largest features). ``c`` is
        taken over all keys: a causal prefix whose keys are all far below the later ones
        (their log-features ~700 lower in float64, ~85 in float32) can still underflow.
        """
        feature_map = self.feature_map
        if isinstance(feature_map, TrigonometricRandomFeatures):
            return self._trigonometric(queries), self._trigonometric(keys)
        if isinstance(feature_map, ReluFeatureMap):
            return torch.relu(queries), torch.relu(keys)
        log_q, log_k = self._log_features(queries), self._log_features(keys)
        if log_k.numel() == 0 or log_q.numel() == 0:
            # No keys (or queries): nothing to stabilise, and amax has no identity.
            return torch.exp(log_q), torch.exp(log_k)
        # Constants of the shift only: detached, their gradients cancel in the ratio.
        top_k = shift_of(constant(log_k), axis=-2)
        log_q = log_q + top_k
        top_q = shift_of(constant(log_q), axis=-1)
        return torch.exp(log_q - top_q), torch.exp(log_k - top_k)

    def _log_features(self, u):
        """log φ(u), up to a constant per row (which cancels)."""
        if isinstance(self.feature_map, PositiveRandomFeatures):
            # −½‖u‖² is the same for every feature of a row: it cancels for queries, and
            # is kept for keys, where it weighs one key against another.
            return u @ self.omega + self.offset - 0.5 * torch.sum(u * u, dim=-1, keepdim=True)
        # elu(u) + 1: 1 + u above 0, exp(u) below, in logs without evaluating log1p below −1.
        return torch.log1p(torch.clamp(u, min=0.0)) + torch.clamp(u, max=0.0)

    def _trigonometric(self, u):
        feature_map = self.feature_map
        angles = u @ self.omega
        pairs = feature_map.n_components_ // 2
        columns = [torch.cos(angles[..., :pairs]), torch.sin(angles[..., :pairs])]
        if feature_map.phase_ is not None:
            columns.append(torch.cos(angles[..., pairs:] + feature_map.phase_))
        return torch.cat(columns, dim=-1) / math.sqrt(feature_map.n_components_ / 2)


def _fitted_features(kernel, head_dim, random_state):
    feature_map = check_feature_map(kernel, "kernel")
    if not isinstance(
        feature_map,
        (PositiveRandomFeatures, EluFeatureMap, ReluFeatureMap, TrigonometricRandomFeatures),
    ) or (isinstance(feature_map, PositiveRandomFeatures) and isinstance(feature_map.A, str)):
        raise ValueError(
            f"kernel {kernel!r} is fitted to the keys of a data set and cannot be the fixed "
            "kernel of a layer; use 'positive', 'hyperbolic', 'trig', 'elu', 'relu' or a "
            "PositiveRandomFeatures with a numeric A"
        )
    # The draws need only the input dimension: fit on one row of zeros.
    feature_map.fit(np.zeros((1, head_dim)), random_state=random_state)
    return _TorchFeatures(feature_map)


class KernelAttention(nn.Module):
    r"""Multi-head attention over (batch, length, embed_dim) with a chosen kernel.

    Each of the ``num_heads`` heads projects its inputs to queries, keys and values of
    dimension ``head_dim`` and returns the Nadaraya–Watson estimate of the values at every
    query, :math:`\sum_j \kappa(q_i, k_j) v_j / \sum_j \kappa(q_i, k_j)`; the heads are
    concatenated and projected back to ``embed_dim``. The parameters and their names are
    those of :class:`torch.nn.MultiheadAttention` (``in_proj_weight``, ``in_proj_bias``,
    ``out_proj``), so a ``state_dict`` of one loads into the other; with ``kernel="softmax"``
    the two compute the same function.

    Parameters
    ----------
    embed_dim : int
        E, the last dimension of the inputs and the output.
    num_heads : int
        H.
    kernel : str or kernattn.feature_maps.FeatureMap, default="softmax"
        ``"softmax"``: :math:`\kappa(q, k) = \exp(s\, q^\top k)`. ``"gaussian"``:
        :math:`\exp(-\tfrac12 s \|q - k\|^2)`, computed as softmax attention with the key
        bias :math:`-\tfrac12 s \|k\|^2` (the query's own term cancels). A name of
        ``kernattn.feature_maps.FEATURE_MAPS`` or a feature map object: linear attention
        :math:`\phi(\sqrt s\, q)^\top \phi(\sqrt s\, k)` (``"positive"`` estimates the
        softmax kernel, ``"elu"`` is the elu + 1 map of linear transformers); maps fitted
        to data (``"nystroem"``, ``"optimal"``) are refused. Random features are drawn
        once, here, and kept as buffers.
    scale : float, "learned" or None, default=None
        s. ``None`` is :math:`1/\sqrt{d}` for head dimension d (as
        :func:`torch.nn.functional.scaled_dot_product_attention`); ``1.0`` is no scaling;
        ``"learned"`` a positive parameter per head, ``log_scale`` of shape (H,), started at
        :math:`\log(1/\sqrt d)`.
    head_dim : int, optional
        d, the dimension of each head's queries, keys and values; default
        ``embed_dim // num_heads`` (``embed_dim`` must then be a multiple of ``num_heads``).
    bias : bool, default=True
        Biases of the input and output projections.
    random_state : int, numpy Generator or RandomState, optional
        The draw of random features. ``None`` takes a seed from torch's generator, so that
        ``torch.manual_seed`` makes the layer reproducible.

    Attributes
    ----------
    in_proj_weight : Parameter of shape (3 H d, E)
        :math:`W_q, W_k, W_v` stacked.
    in_proj_bias : Parameter of shape (3 H d,) or None
    out_proj : torch.nn.Linear
        From H d to E.
    log_scale : Parameter of shape (H,)
        Only with ``scale="learned"``.
    features : torch.nn.Module or None
        The fitted feature map for a linear kernel.

    See Also
    --------
    kernattn.attention.softmax_attention, kernattn.attention.linear_attention :
        the functions that compute the heads.
    kernattn.AttentionRegressor : the Gaussian kernel with a learned metric, fitted by
        leave-one-out.

    Examples
    --------
    >>> import torch
    >>> from kernattn.torch import KernelAttention
    >>> _ = torch.manual_seed(0)
    >>> layer = KernelAttention(8, num_heads=2, kernel="gaussian")
    >>> x = torch.randn(3, 5, 8)
    >>> out, weights = layer(x, x, x, is_causal=True)
    >>> tuple(out.shape), tuple(weights.shape)
    ((3, 5, 8), (3, 5, 5))
    >>> bool(torch.allclose(weights.sum(-1), torch.ones(3, 5)))
    True
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        kernel="softmax",
        scale=None,
        *,
        head_dim=None,
        bias=True,
        random_state=None,
    ):
        super().__init__()
        for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(
                    f"embed_dim ({embed_dim}) must be a multiple of num_heads ({num_heads}), "
                    "or pass head_dim"
                )
            head_dim = embed_dim // num_heads
        elif isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
            raise ValueError(f"head_dim must be a positive int or None; got {head_dim!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        inner = num_heads * head_dim

        if isinstance(kernel, str) and kernel in EXACT_KERNELS:
            self.kernel, self.features = kernel, None
        elif isinstance(kernel, (str, FeatureMap)):
            if isinstance(kernel, str) and kernel not in FEATURE_MAPS:
                raise ValueError(f"kernel must be one of {_kernel_options()}; got {kernel!r}")
            if random_state is None:
                random_state = int(torch.randint(2**31 - 1, ()))
            self.features = _fitted_features(kernel, head_dim, check_random_state(random_state))
            self.kernel = kernel
        else:
            raise TypeError(f"kernel must be one of {_kernel_options()}; got {kernel!r}")

        self.log_scale = None
        if isinstance(scale, str):
            if scale != "learned":
                raise ValueError(
                    f"scale must be a positive float, None (1/√head_dim) or 'learned'; got "
                    f"{scale!r}"
                )
            self.log_scale = nn.Parameter(torch.full((num_heads,), -0.5 * math.log(head_dim)))
        elif scale is not None:
            if isinstance(scale, bool) or not isinstance(scale, (int, float)):
                raise TypeError(
                    f"scale must be a positive float, None (1/√head_dim) or 'learned'; got "
                    f"{scale!r}"
                )
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"scale must be a finite positive float; got {scale!r}")
        self.scale = scale

        self.in_proj_weight = nn.Parameter(torch.empty(3 * inner, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * inner)) if bias else None
        self.out_proj = nn.Linear(inner, embed_dim, bias=bias)
        # The initialisation of torch.nn.MultiheadAttention.
        nn.init.xavier_uniform_(self.in_proj_weight)
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self):
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"head_dim={self.head_dim}, kernel={self.kernel!r}, scale={self.scale!r}"
        )

    def head_scale(self):
        """s of every head, a tensor of shape (H,) (differentiable with ``scale="learned"``)."""
        if self.log_scale is not None:
            return torch.exp(self.log_scale)
        s = 1.0 / math.sqrt(self.head_dim) if self.scale is None else float(self.scale)
        return torch.full((self.num_heads,), s, dtype=self.in_proj_weight.dtype)

    def _project(self, x, part):
        inner = self.num_heads * self.head_dim
        rows = slice(part * inner, (part + 1) * inner)
        bias = None if self.in_proj_bias is None else self.in_proj_bias[rows]
        y = nn.functional.linear(x, self.in_proj_weight[rows], bias)
        # (B, T, H d) -> (B, H, T, d)
        return y.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def _check_inputs(self, query, key, value):
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
            if x.dim() != query.dim() or x.dim() not in (2, 3) or x.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"query, key and value must have shape (batch, length, {self.embed_dim}) "
                    f"(or unbatched (length, {self.embed_dim})); got {name} of shape "
                    f"{tuple(x.shape)}"
                )
        if key.shape[:-1] != value.shape[:-1] or key.shape[:-2] != query.shape[:-2]:
            raise ValueError(
                "key and value must have the same batch and length, and the batch of query; "
                f"got query {tuple(query.shape)}, key {tuple(key.shape)}, value "
                f"{tuple(value.shape)}"
            )

    def _mask(self, attn_mask, key_padding_mask, batch, n_queries, n_keys, dtype):
        """One mask for softmax_attention, broadcastable to (B, H, L, S): boolean (True takes
        part) when both masks are boolean or absent, else additive floats."""
        masks = []
        if attn_mask is not None:
            shapes = {(n_queries, n_keys), (batch * self.num_heads, n_queries, n_keys)}
            if tuple(attn_mask.shape) not in shapes:
                raise ValueError(
                    f"attn_mask must have shape (L, S) = ({n_queries}, {n_keys}) or "
                    f"(batch * num_heads, L, S) = ({batch * self.num_heads}, {n_queries}, "
                    f"{n_keys}); got {tuple(attn_mask.shape)}"
                )
            if attn_mask.dim() == 3:
                attn_mask = attn_mask.reshape(batch, self.num_heads, n_queries, n_keys)
            masks.append(attn_mask)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (batch, n_keys):
                raise ValueError(
                    f"key_padding_mask must have shape (batch, S) = ({batch}, {n_keys}); got "
                    f"{tuple(key_padding_mask.shape)}"
                )
            masks.append(key_padding_mask[:, None, None, :])
        if not masks:
            return None
        # torch.nn.MultiheadAttention's convention: True in a boolean mask means "ignore".
        if all(m.dtype == torch.bool for m in masks):
            ignored = masks[0] if len(masks) == 1 else masks[0] | masks[1]
            return ~ignored
        additive = [
            torch.zeros((), dtype=dtype).masked_fill(m, -math.inf)
            if m.dtype == torch.bool
            else m.to(dtype)
            for m in masks
        ]
        return additive[0] if len(additive) == 1 else additive[0] + additive[1]

    def forward(
        self,
        query,
        key=None,
        value=None,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Parameters
        ----------
        query : Tensor of shape (B, L, E) or (L, E)
        key, value : Tensor of shape (B, S, E) or (S, E), optional
            Default: ``query``.
        key_padding_mask : Tensor of shape (B, S), optional
            Boolean (True: the key is padding, ignored) or additive floats.
        need_weights : bool, default=True
            Also return the attention weights.
        attn_mask : Tensor of shape (L, S) or (B H, L, S), optional
            Boolean (True: the pair is not allowed, as in ``torch.nn.MultiheadAttention``)
            or additive floats. Softmax and Gaussian kernels only; a linear kernel takes
            ``is_causal`` and ``key_padding_mask``.
        average_attn_weights : bool, default=True
            Weights averaged over the heads (B, L, S), else per head (B, H, L, S).
        is_causal : bool, default=False
            Query i attends to keys j ≤ i (together with ``attn_mask``).

        Returns
        -------
        output : Tensor of shape (B, L, E) or (L, E)
        weights : Tensor of shape (B, L, S) or (B, H, L, S), or None
            Rows sum to 1 (0 for a query with no key left, whose output is 0). For a linear
            kernel, the implied weights φ(qᵢ)ᵀφ(kⱼ) / Σₗ φ(qᵢ)ᵀφ(kₗ).
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query[None], key[None], value[None]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask[None]
        batch, n_queries, n_keys = query.shape[0], query.shape[1], key.shape[1]
        q, k, v = self._project(query, 0), self._project(key, 1), self._project(value, 2)

        # A fixed scale is a float for softmax_attention; a learned one multiplies the queries.
        if self.log_scale is None:
            s = 1.0 / math.sqrt(self.head_dim) if self.scale is None else float(self.scale)
        else:
            s = torch.exp(self.log_scale).to(q.dtype)[:, None, None]
        if self.features is None:
            mask = self._mask(attn_mask, key_padding_mask, batch, n_queries, n_keys, q.dtype)
            key_bias = None
            if self.kernel == "gaussian":
                key_bias = -0.5 * torch.sum(k * k, dim=-1)
                key_bias = key_bias * (s if isinstance(s, float) else s[..., 0])
            result = softmax_attention(
                q if isinstance(s, float) else q * s,
                k,
                v,
                attn_mask=mask,
                is_causal=is_causal,
                scale=s if isinstance(s, float) else 1.0,
                key_bias=key_bias,
                return_weights=need_weights,
            )
            out, weights = result if need_weights else (result, None)
        else:
            if attn_mask is not None:
                raise ValueError(
                    f"kernel {self.kernel!r} is linear attention, which sums over the keys "
                    "once: it takes is_causal and key_padding_mask, not an attn_mask (use "
                    "kernel='softmax' or 'gaussian' for arbitrary masks)"
                )
            root = math.sqrt(s) if isinstance(s, float) else torch.sqrt(s)
            phi_q, phi_k = self.features(q * root, k * root)
            if key_padding_mask is not None:
                kept = self._mask(None, key_padding_mask, batch, n_queries, n_keys, q.dtype)
                if kept.dtype != torch.bool:
                    raise TypeError(
                        "a linear kernel takes a boolean key_padding_mask (True: padding); "
                        f"got dtype {kept.dtype}"
                    )
                # A padded key with zero features drops out of both sums.
                phi_k = phi_k * kept[:, :, 0, :, None].to(phi_k.dtype)
            out = linear_attention(phi_q, phi_k, v, is_causal=is_causal)
            weights = None
            if need_weights:
                # With the identity as values, the output rows are the implied weights.
                eye = torch.eye(n_keys, dtype=phi_k.dtype, device=phi_k.device)
                weights = linear_attention(phi_q, phi_k, eye, is_causal=is_causal)

        out = self.out_proj(out.transpose(1, 2).flatten(-2))
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if unbatched:
            out = out[0]
            weights = None if weights is None else weights[0]
        return out, weights
