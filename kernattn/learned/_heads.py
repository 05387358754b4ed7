r"""The heads of a fitted learned kernel, looked at one by one: the spread of their logits,
and their mixture refitted to a subset of them (stacked regression, Breiman 1996).

Plain functions of a :class:`~kernattn._engine.heads.SoftmaxHeads` kernel and the training
arrays; :class:`~kernattn.AttentionRegressor` calls them for ``logit_variance`` and
``prune_heads``.
"""

import numpy as np
from scipy.optimize import nnls

from kernattn._core.blocks import map_query_blocks
from kernattn._core.loo import DuplicateGroups
from kernattn.learned._objective import Layout, LeaveOneOutObjective


def logit_variance(kernel, X, sample_weight, n_jobs=None):
    """Per head: the mean over the queries ``X`` of the logits' variance across the keys,
    weighted by the keys' ``sample_weight`` (without their ``log s_i`` term)."""
    H = kernel.n_heads
    p = sample_weight / sample_weight.sum()
    log_sw = kernel.log_sample_weight

    def block(rows):
        total = np.zeros(H)
        for h in range(H):
            logits = kernel.logits(kernel.queries(X[rows], h), h).astype(float)
            logits -= log_sw
            logits -= (logits @ p)[:, None]
            logits **= 2
            total[h] = np.sum(logits @ p)
        return total

    parts = map_query_blocks(block, len(X), 2 * kernel.n_keys, n_jobs=n_jobs, cache=False)
    total = np.zeros(H)
    for part in parts:
        total += part
    return total / max(len(X), 1)


def convex_least_squares(F, Y, sample_weight, unit):
    """Head weights on the simplex (non-negative, summing to 1, no bias) minimizing the
    weighted squared error of ``Σ_h a_h F[:, h]`` against ``Y``.

    Non-negative least squares with the constraint ``Σ_h a_h = 1`` as one more row weighted
    far above the data (its residual is then below rounding of the data's), normalized
    exactly at the end. Rows (i, output) are weighted as in the affine refit.
    """
    _, H, t = F.shape
    design = F.transpose(0, 2, 1).reshape(-1, H)
    root = _root_weights(sample_weight, t, unit)
    A = design * root[:, None]
    b = Y.ravel() * root
    weight = 1e4 * max(np.linalg.norm(A), np.linalg.norm(b), 1.0)
    A = np.vstack([A, np.full((1, H), weight)])
    b = np.append(b, weight)
    a = nnls(A, b)[0]
    return a / a.sum() if a.sum() > 0 else np.full(H, 1.0 / H)


def _root_weights(sample_weight, t, unit):
    """The square roots of the rows' weights, rows (i, output) in C order: the sample
    weight times ``unit / largest unit`` of the output."""
    return np.sqrt(np.repeat(sample_weight, t)) * np.tile(unit / unit.max(), len(sample_weight))


def refit_mixture(kernel, X, values, sample_weight, unit, convex, n_jobs=None):
    """Weighted non-negative least squares of the targets on the heads' leave-one-out
    estimates: head weights and the bias (centered units).

    ``X`` the training inputs (warped already), ``values`` the centered targets divided by
    ``unit``, one power of two per output (exact): the squares of targets near 1e200 would
    overflow, of targets near 1e-200 underflow. Each output's rows are weighted by ``unit
    / largest unit`` (a power of two), so the least squares are the plain ones divided by
    that largest unit: the head weights are those of the unscaled problem, and the bias is
    multiplied back at the end. ``convex``: weights on the simplex and no bias."""
    H = kernel.n_heads
    _, d, head_dim = kernel.query_weights.shape
    t = values.shape[1]
    layout = Layout(H, d, head_dim, t, False, False, "affine")
    objective = LeaveOneOutObjective(
        (X - kernel.center) / kernel.input_scale,
        values,
        sample_weight,
        DuplicateGroups(X),
        layout,
        kernel.similarity,
        kernel.scale,
        0.0,
        n_jobs=n_jobs,
    )
    theta = layout.pack(kernel.query_weights, kernel.key_weights, None, np.ones(H), np.zeros(t))
    F = objective.head_estimates(theta)  # (n, H, t)
    ok = ~np.isnan(F[:, 0, 0])
    F, Y, sw = F[ok], values[ok], sample_weight[ok]
    # Non-negative weights, as in stacked regression (Breiman, 1996): leave-one-out
    # estimates are anti-correlated with their own targets (a head that attends almost
    # uniformly predicts (Σ_j y_j − y_i)/(n − 1)), and unconstrained least squares turns
    # that into a weight near −n that fits the training targets and nothing else.
    total = sw.sum()
    if convex:
        return convex_least_squares(F, Y, sw, unit), np.zeros(t)
    F_mean = np.einsum("i,iht->ht", sw, F) / total
    Y_mean = sw @ Y / total
    # Rows (i, output): y_io − ȳ_o ≈ Σ_h a_h (F_iho − F̄_ho), intercept from the means.
    design = (F - F_mean).transpose(0, 2, 1).reshape(-1, H)
    root = _root_weights(sw, t, unit)
    a = nnls(design * root[:, None], (Y - Y_mean).ravel() * root)[0]
    with np.errstate(over="ignore"):
        return a, (Y_mean - np.einsum("h,ht->t", a, F_mean)) * unit
