"""How well a feature map reproduces its kernel, and linear attention softmax attention."""

import numpy as np

from kernattn.attention import softmax_attention
from kernattn.feature_maps._base import FeatureMap
from kernattn.feature_maps._factory import check_feature_map


def kernel_approximation_error(
    Q, K, V=None, *, feature_map="positive", n_components=256, orthogonal=True, random_state=None
):
    r"""How well ``φ(q)ᵀφ(k)`` reproduces its kernel, and linear attention softmax attention.

    The exact kernel is the one the map estimates: :math:`\exp(q^\top k)` for positive
    features, :math:`\exp(-\|q - k\|^2/2)` for trigonometric and Nyström ones, and for a
    deterministic map (elu, relu) the softmax kernel :math:`\exp(q^\top k)` it replaces.
    Softmax attention is taken with that kernel (scale 1).

    Parameters
    ----------
    Q : array_like of shape (n_queries, d)
    K : array_like of shape (n_keys, d)
    V : array_like of shape (n_keys,) or (n_keys, d_v), optional
        Values for the attention comparison.
    feature_map : str or FeatureMap, default="positive"
        A name as in :func:`make_feature_map`, or a map. A fitted map is used as it is; an
        unfitted one is copied and the copy fitted with ``fit(K, queries=Q,
        random_state=random_state)``.
    n_components : int, default=256
        r, for a named map.
    orthogonal : bool, default=True
        For a named random map.
    random_state : int, RandomState instance or None, default=None
        Seeds the fit of an unfitted map.

    Returns
    -------
    errors : dict
        ``kernel_error``: :math:`\|\hat K - K\|_F / \|K\|_F` over all (query, key) pairs;
        ``kernel_rmse``: the root-mean-square of :math:`\hat K - K`; and with ``V`` given,
        ``output_rmse``: the root-mean-square difference of the two attention outputs over
        the queries whose linear-attention denominator is positive, and
        ``n_nonpositive``: how many queries had a denominator :math:`\le 0` (left out).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Q, K = 0.3 * rng.standard_normal((5, 4)), 0.3 * rng.standard_normal((50, 4))
    >>> err = kernel_approximation_error(Q, K, K[:, 0], n_components=4096, random_state=0)
    >>> bool(err["kernel_error"] < 0.05), bool(err["output_rmse"] < 0.05)
    (True, True)
    """
    Q = np.atleast_2d(np.asarray(Q, dtype=float))
    K = np.atleast_2d(np.asarray(K, dtype=float))
    if Q.shape[1] != K.shape[1]:
        raise ValueError(
            f"Q and K must have the same number of columns; got {Q.shape[1]} and {K.shape[1]}"
        )
    if isinstance(feature_map, FeatureMap) and hasattr(feature_map, "n_components_"):
        phi = feature_map
    else:
        phi = check_feature_map(feature_map, n_components=n_components, orthogonal=orthogonal)
        phi.fit(K, queries=Q, random_state=random_state)
    logits = Q @ K.T
    key_bias = None
    if phi.approximates == "gaussian":
        key_bias = -0.5 * np.einsum("ij,ij->i", K, K)
        logits += key_bias - 0.5 * np.einsum("ij,ij->i", Q, Q)[:, None]
    exact = np.exp(logits)
    phi_Q, phi_K = phi.transform(Q), phi.transform(K)
    diff = phi_Q @ phi_K.T - exact
    errors = {
        "kernel_error": float(np.linalg.norm(diff) / np.linalg.norm(exact)),
        "kernel_rmse": float(np.sqrt(np.mean(diff**2))),
    }
    if V is not None:
        V2 = np.asarray(V, dtype=float).reshape(len(K), -1)
        reference = softmax_attention(Q, K, V2, scale=1.0, key_bias=key_bias)
        denominator = phi_Q @ phi_K.sum(axis=0)
        good = denominator > 0
        linear = (phi_Q[good] @ (phi_K.T @ V2)) / denominator[good, None]
        errors["output_rmse"] = (
            float(np.sqrt(np.mean((linear - reference[good]) ** 2))) if good.any() else np.inf
        )
        errors["n_nonpositive"] = int((~good).sum())
    return errors
