r"""A head's estimate and the spread of the values around it, and their mixture over heads.

The engine's units: the values are the centered targets divided by one power of two per
output (``value_scale``); the kernel sums are of the value columns ``[v, v², 1]``. A head's
*moments* are its estimate :math:`E_w[v]` and, for ``return_std``, the spread
:math:`E_w[(v - \hat y)^2]` of the values around it under the head's non-negative weights:

- the kernel average: the reduction's sums of the value columns
  (:func:`kernel_moments`), the spread redone around each row's own estimate where
  :math:`E_w[v^2] - E_w[v]^2` cancels (:func:`accurate_spread`);
- a local polynomial (:func:`polynomial_fit`, :func:`spread_about`) and a blend of the local
  constant with a line (:func:`blended_moments`);
- weights held in memory, tilted ones (:func:`weighted_moments`).

The heads' moments mix as :math:`\hat y = \sum_h a_h m^h_1 + b` with the spread of the
mixture of their weights in the shares :math:`|a_h| / \sum_g |a_g|` (:func:`mixture`).
"""

import numpy as np

from kernattn._core.blocks import KEY_TILE, iter_query_blocks
from kernattn._core.loo import DuplicateGroups
from kernattn._engine.distribution import head_proportions
from kernattn._local.fits import BlendedLine, LocalPolynomials

# A spread below this fraction of the second moment lost digits to cancellation (a relative
# error of about 1e-16 / this) and is recomputed around the row's estimate.
WELL_CONDITIONED = 1e-4
#: The training rows whose leave-one-out local polynomial ``held_back_`` is measured on, at
#: most (evenly spread over the rows in the order of their inputs).
HELD_BACK_ROWS = 512


def accurate_spread(exact, X, h, first, spread, second, centered_values):
    """The spread ``E_w[v²] − E_w[v]²``, redone around each row's own estimate where the
    difference cancels.

    The values are centered on the global mean; where a query's weights sit on values far
    from it (compared with their spread), ``E_w[v²]`` and ``E_w[v]²`` agree in most of their
    digits. Those rows (rare: they need a spread below ``1e-4 E_w[v²]``) are redone from the
    exact kernel's moments about their own mean (``exact.centered``, the one reduction with
    Chan's update: no cancellation), ``Σ_i w_i (v_i − ŷ)² = M₂/W + (m − ŷ)²`` around the
    row's estimate ``ŷ``; ``centered_values()`` gives the values they are taken of.
    """
    with np.errstate(invalid="ignore"):
        cancelled = ~(spread > WELL_CONDITIONED * second)
    redo = np.flatnonzero(np.any(cancelled, axis=1))
    if not len(redo):
        return spread
    spread = spread.astype(np.float64)
    total, mean, m2 = exact.centered(X[redo], h, centered_values())
    redone = m2 / total[:, None] + (mean - first[redo]) ** 2
    # Only the outputs that cancelled: the others keep their moments' spread.
    rows, outputs = np.nonzero(cancelled[redo])
    spread[redo[rows], outputs] = redone[rows, outputs]
    return spread


def kernel_moments(sums, t, return_std):
    """The kernel average's estimate ``E_w[v]`` and second moment ``E_w[v²]`` (``None``
    without ``return_std``) from the kernel sums of the value columns ``[v, v², 1]``
    (``t`` outputs)."""
    denominator = sums[:, -1:]
    first = sums[:, :t] / denominator
    if not return_std:
        return first, None
    return first, sums[:, t : 2 * t] / denominator


def polynomial_fit(kernel, X, h, local, t):
    """Head ``h``'s local polynomial ``local`` at a block of queries on ``kernel``: its
    :class:`~kernattn._local.polynomial.LocalPolynomialFit` (``t`` outputs)."""
    Q = local.queries(kernel, X, h)
    return local.estimate(local.sums(kernel, X, h), Q, t)


def spread_about(fit, center):
    """``E_w[(v − center)²]`` under the kernel weights from a local fit's kernel averages,
    ``Var_w(v) + (v̄ − center)²``, and the second moment ``E_w[v²]`` (for
    :func:`accurate_spread`, where the difference cancels)."""
    ybar, second = fit.ybar, fit.second_values
    return second - ybar**2 + (ybar - center) ** 2, second


def weighted_moments(weights, values, return_std):
    """The estimate of a block's weights against the kept keys (rows summing to 1) and,
    with ``return_std``, the spread of the ``values`` around it under them."""
    first = weights @ values
    if not return_std:
        return first, None, None
    spread = np.stack(
        [
            np.einsum("ij,ij->i", weights, (values[:, o][None, :] - first[:, o][:, None]) ** 2)
            for o in range(values.shape[1])
        ],
        axis=1,
    )
    return first, spread, None


def blend(share, constant, line, line_spread=None):
    r"""The blend :math:`\hat y = (1 - s)\,\hat y_0 + s\,\hat y_1` of a local constant's
    moments ``constant = (ŷ₀, spread₀)`` and a line's estimate ``line``; with
    ``line_spread(ŷ)`` (the spread of the values around ŷ under the line's kernel weights)
    also the spread under the mixture :math:`(1 - s)\,w_0 + s\,w_1` of the two weights."""
    first, spread = constant
    mean = (1.0 - share) * first + share * line
    if line_spread is None:
        return mean, None
    return mean, (1.0 - share) * (spread + (first - mean) ** 2) + share * line_spread(mean)


def mixture(per_head, head_weights, head_bias, return_std):
    r"""Mixed estimate and spread of the heads' moments ``per_head`` (``(first, spread,
    held back)`` per head, ``head_weights`` :math:`a_h` theirs; ``head_bias`` :math:`b` in
    the engine's units) and the rows that some head held back.

    The estimate is :math:`\sum_h a_h m^h_1 + b`. The spread is that of the mixture of the
    heads' weights with proportions :math:`\pi_h = |a_h| / \sum_g |a_g|` around the
    estimate, :math:`\sum_h \pi_h (\mathrm{Var}_h + (m^h_1 - \hat y)^2)`: never negative,
    and the weighted variance of the targets for one head.
    """
    fallback = np.zeros(len(per_head[0][0]), dtype=bool)
    for _, _, rows in per_head:
        if rows is not None:
            fallback |= rows
    if len(per_head) == 1 and head_weights[0] == 1.0 and not np.any(head_bias):
        mean = per_head[0][0]
    else:
        mean = np.zeros_like(per_head[0][0]) + head_bias
        for a, (first, _, _) in zip(head_weights, per_head, strict=True):
            mean += a * first
    if not return_std:
        return mean, None, fallback
    variance = np.zeros_like(mean)
    for p, (first, spread, _) in zip(head_proportions(head_weights), per_head, strict=True):
        variance += p * (spread + (first - mean) ** 2)
    return mean, np.maximum(variance, 0.0), fallback


def held_back_share(kernel, inputs, t):
    """The share of the training rows whose leave-one-out local polynomial is held back in
    some head of ``kernel`` (``held_back_``), measured on at most ``HELD_BACK_ROWS`` of
    them, evenly spread over the rows in the order of their inputs (deterministic);
    ``inputs`` are the positive-weight rows as the kernel compares them (its keys, in their
    order), ``t`` the number of outputs. Each row is fitted from the others, its exact
    duplicates left out with it, as the bandwidth criteria do; a row with no other input is
    not counted."""
    # Each line with the kernel it is fitted on and its head there (a blend's line is head
    # 0 of its own kernel).
    lines = []
    for h, local in enumerate(kernel.local):
        if isinstance(local, LocalPolynomials):
            lines.append((kernel, h, local))
        elif isinstance(local, BlendedLine):
            lines.append((local.kernel, 0, local.line))
    n = len(inputs)
    if not lines or n < 2:
        return 0.0
    rows = np.unique(np.linspace(0, n - 1, min(n, HELD_BACK_ROWS)).round().astype(int))
    groups = DuplicateGroups(inputs)
    held_back = np.zeros(len(rows), dtype=bool)
    counted = np.ones(len(rows), dtype=bool)
    for block in iter_query_blocks(len(rows), min(n, KEY_TILE)):
        queries = rows[block]
        left_out = groups.pairs_of(queries)
        for line_kernel, h, local in lines:
            sums = local.sums(line_kernel, inputs[queries], h, left_out=left_out)
            alone = ~(sums[:, local.total] > 0)
            fit = local.estimate(sums, local.queries(line_kernel, inputs[queries], h), t)
            held_back[block] |= fit.held_back & ~alone
            counted[block] &= ~alone
    return float(held_back[counted].mean()) if np.any(counted) else 0.0
