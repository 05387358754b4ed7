r"""Where the training of a learned attention kernel starts.

The start is a flat parameter vector of :class:`~kernattn.learned._objective.Layout`: every
head's projection :math:`W` (queries and keys alike), the initial scales and a uniform
convex mixture. :func:`start_parameters` makes it from an ``init`` of
:class:`~kernattn.AttentionRegressor` (``"loo"``: the diagonal projection
:math:`W = \mathrm{diag}(1/h)/\sqrt{s}` of the smoother's leave-one-out bandwidths
:math:`h`, :func:`bandwidth_projection`; otherwise :func:`~kernattn.learned._optimize.\
initial_projections` scaled to unit logit variance); :func:`warm_parameters` takes a
previous fit's kernel back into that vector (``warm_start``). Plain settings in, arrays out.

The bandwidth search of ``init="loo"`` runs on the standardized inputs and targets: it is
``KernelSmoother(bandwidth="loo")``'s search in other units, which ends at the same
bandwidths up to its tolerance where the criterion has one clear minimum, but can end in
another, nearly level minimum than the search on the raw data (a rounding difference on the
path decides; on R's ``ISLR::Auto`` one fold in five). With ``head_dim < n_features`` the
features of the smallest bandwidths get a column each. Heads after the first start
distinct (:func:`~kernattn.learned._optimize.initial_projections`): heads that start
identical receive identical gradients and stay identical. With several heads and a convex
mixture the heads are first trained under equal weights: a mixture learned from the start
gives all the weight to the head that is best at the start, and the others never learn.
"""

import numpy as np

from kernattn._core.numerics import normalized_weights, power_of_two_scale
from kernattn.bandwidth import select_bandwidth
from kernattn.learned._optimize import initial_projections, scale_to_unit_variance


def given_projections(init, n_heads, n_features, head_dim):
    """The projections of an array ``init``, one per head: an array of shape
    ``(n_features, head_dim)`` for every head or ``(n_heads, n_features, head_dim)``."""
    W = np.asarray(init, dtype=float)
    if W.shape not in ((n_features, head_dim), (n_heads, n_features, head_dim)):
        raise ValueError(
            "init must be 'identity', 'pca', 'random' or an array of shape (n_features, "
            f"head_dim) = ({n_features}, {head_dim}) or (n_heads, n_features, head_dim); got "
            f"{W.shape!r}"
        )
    return np.broadcast_to(W, (n_heads, n_features, head_dim)).copy()


def initial_scale(scale, n_heads, head_dim):
    r"""Every head's multiplier of the similarity to start from: :math:`1/\sqrt{d_{head}}`
    for ``scale`` ``None`` or ``"learned"``, the given float otherwise."""
    if scale is None or isinstance(scale, str):
        value = 1.0 / np.sqrt(head_dim)
    else:
        value = float(scale)
    return np.full(n_heads, value)


def target_scale(values, sample_weight):
    """The weighted root mean square of the centered targets (over every output; 1 for
    constant targets), computed in units of a power of two near their size (no overflow)."""
    unit = float(power_of_two_scale(values))
    weights = normalized_weights(sample_weight)
    rms = np.sqrt(np.sum(weights @ (values / unit) ** 2) / weights.sum()) * unit
    return rms if rms > 0 and np.isfinite(rms) else 1.0


def is_convex(head_weights):
    """Non-negative weights with a positive sum (a convex mixture once normalized)."""
    return bool(np.all(head_weights >= 0) and head_weights.sum() > 0)


def uniform_start(layout, W, scale):
    """The parameters of projections ``W`` (queries and keys), scales ``scale`` and the
    heads mixed with equal weights, without bias."""
    a = np.full(layout.n_heads, 1.0 / layout.n_heads)
    return layout.pack(W, W, np.log(scale), a, np.zeros(layout.n_outputs))


#: The relative tolerance of the leave-one-out bandwidth search the kernel starts from
#: (``select_bandwidth``'s ``tol``; the smoother's is 1e-9): training moves the projection
#: on from there, and the search's last steps at 1e-9 only widen the bandwidths of features
#: that do not matter (on Friedman #1 two thirds of its evaluations, for a criterion lower
#: by 1e-5). ``max_iter=0`` keeps the same start, so that ``shrinkage=1`` returns to it.
START_TOL = 1e-6


def bandwidth_projection(objective, head_dim, scale, rng, sample_weight, rows=None, n_jobs=None):
    r"""The projection of the smoother with leave-one-out bandwidths :math:`h_j` (in
    standardized units) on the training ``rows``: :math:`W = \mathrm{diag}(1/h) /
    \sqrt{s}`, so that :math:`-\tfrac{s}{2}\|(u - u')W\|^2 = -\tfrac12 \sum_j ((u_j -
    u'_j)/h_j)^2`. With ``head_dim < n_features`` the features of the smallest
    bandwidths get a column each; ``None`` when the rows hold one distinct input.
    ``sample_weight`` relative: rescaled to a mean of 1, so that the search's start
    (Scott's rule, which counts weights as repeated rows) reads the number of rows and
    the start does not depend on the weights' unit."""
    rows = np.arange(len(objective.Z)) if rows is None else rows
    if len(np.unique(objective.groups.ids[rows])) < 2:
        return None
    weights = np.asarray(sample_weight, dtype=float)[rows]
    weights = weights / weights.max()
    selection = select_bandwidth(
        objective.Z[rows],
        objective.Y[rows],
        weights / weights.mean(),
        criterion="loo",
        n_jobs=n_jobs,
        random_state=rng.randint(2**31 - 1),
        tol=START_TOL,
    )
    h = selection.bandwidth
    d = len(h)
    if head_dim >= d:
        # Diagonal (the penalty on off-diagonal entries leaves it alone), padded.
        return np.eye(d, head_dim) / h[:, None] / np.sqrt(scale)
    base = np.zeros((d, head_dim))
    order = np.argsort(h, kind="stable")[:head_dim]
    base[order, np.arange(head_dim)] = 1.0 / h[order]
    return base / np.sqrt(scale)


def start_parameters(
    objective,
    scale,
    probe,
    rng,
    *,
    init,
    user_init,
    sample_weight,
    n_jobs=None,
    rows=None,
):
    """New parameters to start from, chosen on the training ``rows`` (all for ``None``):
    the projections ``user_init`` as given, or those of ``init`` (``"loo"``, ``"identity"``,
    ``"pca"``, ``"random"``), scaled to unit logit variance on the ``probe`` rows unless
    they are the smoother's Gaussian bandwidths."""
    layout = objective.layout
    if user_init is not None:
        W = user_init
    else:
        head_dim = layout.shape[2]
        base = None
        if init == "loo":
            base = bandwidth_projection(
                objective,
                head_dim,
                scale[0],
                rng,
                sample_weight,
                rows,
                n_jobs=n_jobs,
            )
        W = initial_projections(
            "identity" if init == "loo" else init,
            objective.Z,
            objective.sw,
            layout.n_heads,
            head_dim,
            rng,
            base=base,
        )
        if base is None or objective.similarity != "gaussian":
            W = scale_to_unit_variance(objective, W, scale, probe)
    return uniform_start(layout, W, scale)


def warm_parameters(layout, previous, warp_slopes, width_factor, target_unit):
    """A previous fit's parameters (``warm_start``): its kernel ``previous`` (``None``: no
    fit), the slopes of its warp and the width factor in its scales, or ``None`` when
    their shapes do not match ``layout``."""
    if (
        previous is not None
        and previous.query_weights is not None
        and previous.query_weights.shape == layout.shape
        and previous.head_bias.shape == (layout.n_outputs,)
        and (not layout.convex or is_convex(previous.head_weights))
    ):
        # head_bias is in centered units: the new targets may have another mean. The
        # local lines' width factor is not part of the learned scale; a warp of the same
        # shape is kept (its knots follow the new data).
        keep_warp = warp_slopes is not None and warp_slopes.shape == layout.warp_shape
        return layout.pack(
            previous.query_weights,
            previous.key_weights,
            np.log(previous.scale / width_factor),
            previous.head_weights,
            previous.head_bias / target_unit,
            np.log(warp_slopes) if keep_warp else None,
        )
    return None
