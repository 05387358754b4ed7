r"""Linear attention fitted in two passes over training rows in parts, wherever they are.

The key sums of :class:`~kernattn.LinearAttentionRegressor` are sums over rows, so any split
of the training set into parts (:class:`~kernattn._core.rows.Rows`: chunks read from disk, the
partitions of a dask collection) can be summed part by part and merged. What the kernel
needs from the data before the sums (the center, the bandwidth, Nyström landmarks, the target
offset) comes from a first pass of the same shape (:mod:`kernattn._engine.summary`): full-data
statistics and a uniform sample of ``n_subsample`` rows, on which what the in-memory fit
computes on a subsample (the ``"loo"`` and ``"silverman"`` bandwidths, rescaled by Scott's
factor :math:`(n_{sub}/n)^{1/(d+4)}`, Nyström landmarks, an attention model, a learned
projection) is computed.

With ``n`` at most ``n_subsample`` the sample is the whole training set in its order, and
with Scott's rule or a given bandwidth the features are drawn as in memory: the two passes
give the in-memory fit up to the order of the sums. This module holds the tasks a part runs
(:func:`feature_sums`, :func:`cell_sums`) and their merges, which take every head's sums out
at the larger of two shifts (:func:`kernattn._core.sums.merge`), and the checks of a chunk
(:func:`chunk_arrays`, for :func:`~kernattn.fit_chunks`).
"""

import copy

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.blocks import single_threaded_blas
from kernattn._core.numerics import has_spread, power_of_two_scale
from kernattn._core.rows import as_part
from kernattn._core.sums import merge
from kernattn.bandwidth import resolve_bandwidth
from kernattn.feature_maps import NystroemFeatures
from kernattn.linear._cost import (
    ERROR_KEYS,
    ERROR_QUERIES,
    KEYS_PER_CELL,
    near_key_cap,
    split_cost,
)
from kernattn.linear._near_field import NearFieldKernel
from kernattn.linear._near_search import ErrorProbe, grow_near_cells, search_rank

#: Most cells of a near field fitted in parts, and most cells × features: its per-cell sums
#: (cells × features × moments) stay a few tens of MB (8 192 cells at 256 features). The
#: centers are drawn with the first pass's sample.
MAX_CELLS = 8192
CELL_FEATURES = MAX_CELLS * 256


def feature_sums(X, y, w, part, kernel, y_offset):
    """One part's key sums: its rows of positive weight added to an empty copy of
    ``kernel`` (a :class:`~kernattn.linear._feature_kernel.FeatureKernel` without keys)."""
    X, Y, w = as_part(X, y, w)
    active = w > 0
    summed = kernel.without_keys().accumulate(X[active], Y[active] - y_offset, w[active])
    return summed.key_sums, summed.key_log_scale, summed.key_radius, summed.target_sums


def cell_sums(X, y, w, part, kernel, y_offset):
    """One part's key sums and, per cell of the near field ``kernel`` (a
    :class:`~kernattn.linear._near_field.NearFieldKernel` without keys), its feature sums
    and key count."""
    X, Y, w = as_part(X, y, w)
    active = w > 0
    summed = copy.copy(kernel)
    summed.far = kernel.far.without_keys()
    summed.accumulate(X[active], Y[active] - y_offset, w[active])
    far = summed.far
    sums = (far.key_sums, far.key_log_scale, far.key_radius, far.target_sums)
    return sums, summed.cell_sums, summed.cell_counts


def merge_feature_sums(*parts):
    """Key sums of several parts, each head's taken out at the larger of their shifts."""
    sums, scale, radius, targets = parts[0]
    for other_sums, other_scale, other_radius, other_targets in parts[1:]:
        scale, sums = merge(scale, sums, other_scale, other_sums)
        radius, targets = np.maximum(radius, other_radius), targets + other_targets
    return sums, scale, radius, targets


def merge_cell_sums(*parts):
    """:func:`merge_feature_sums` of the parts' key sums, and their per-cell sums taken out
    at the same shift (one head), the key counts added."""
    sums, cells, counts = parts[0]
    for other_sums, other_cells, other_counts in parts[1:]:
        _, cells = merge(sums[1][0], cells, other_sums[1][0], other_cells)
        sums = merge_feature_sums(sums, other_sums)
        counts = counts + other_counts
    return sums, cells, counts


def sample_prefix(summary, n_sample):
    """The summary with the ``n_sample`` rows of its sample that have the smallest sampling
    keys (the sample is sorted by them): the sample of a first pass that kept as many."""
    out = copy.copy(summary)
    out.n_sample = n_sample
    out.sample = tuple(column[:n_sample] for column in summary.sample)
    return out


def chunk_arrays(chunk, i, n_features):
    """``(X, y, sample_weight)`` of one chunk, checked."""
    if not isinstance(chunk, tuple | list) or len(chunk) not in (2, 3):
        raise TypeError(
            f"every chunk must be a tuple (X, y) or (X, y, sample_weight); chunk {i} is a "
            f"{type(chunk).__name__}"
        )
    X = np.asarray(chunk[0])
    y = np.asarray(chunk[1])
    w = np.asarray(chunk[2], dtype=float).reshape(-1) if len(chunk) == 3 else None
    if X.ndim != 2 or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"X of chunk {i} must be a 2-D array of numbers; got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"chunk {i} has {X.shape[1]} features; chunk 0 has {n_features}")
    if len(y) != len(X) or (w is not None and len(w) != len(X)):
        raise ValueError(
            f"chunk {i} has {len(X)} rows of X, {len(y)} of y"
            + ("" if w is None else f" and {len(w)} sample weights")
        )
    return X, y, w


def cell_kernel(kernel, summary):
    """A near field on ``kernel`` (its sums empty) whose cell centers are the projected
    rows of the first pass's sample, about one per ``KEYS_PER_CELL`` rows (at most
    ``MAX_CELLS``, and at most ``CELL_FEATURES`` cells × features); ``None`` when the
    keys lie beyond a finite distance (a bandwidth near 1e-300), where the far field
    serves alone, as in memory."""
    X_s = summary.sample[2]
    most = min(MAX_CELLS, CELL_FEATURES // max(kernel.n_components, 1))
    n_cells = max(1, min(summary.count // KEYS_PER_CELL, most, len(X_s)))
    with np.errstate(over="ignore", invalid="ignore"):
        centers = kernel.project(X_s[:n_cells], 0, "key")
    if not np.all(np.abs(centers) < 1e100):
        return None
    return NearFieldKernel(kernel, np.unique(centers, axis=0), 1)


def near_share_on_sample(near, summary, seed, *, tol, n_subsample, choose_rank):
    """``n_near_keys="auto"`` in parts: the share of the keys the near field computes
    exactly, chosen on the first pass's sample, and its measured weight error; with
    ``n_components="auto"``, the far field's map too (set on ``near``, whose sums must
    still be empty).

    The sample (up to ``MAX_CELLS`` uniform rows) gets a near field of its own, in
    memory, with cells of ``KEYS_PER_CELL`` sampled rows, and the in-memory searches
    run on it (:func:`~kernattn.linear._near_search.search_rank` with every candidate
    map fitted on the sample and its cost at the full key count, then
    :func:`~kernattn.linear._near_search.grow_near_cells`, the far sums estimated on the
    sampled keys, at most the share of keys that keeps prediction linear). The split's
    weights over a region of the input space depend on the share of the keys it holds,
    not on their number, so the full near field takes the same share of its cells; its
    error is that measured on the sample.

    Returns the share of the keys, the errors measured on the sample's rows, whether their
    mean meets ``tol``, and the far field's map when ``choose_rank`` chose one (else
    ``None``).
    """
    _, _, X_s, Y_s, w_s = summary.sample
    n, n_s = int(summary.count), len(X_s)
    sample_far = near.far.empty()
    with np.errstate(over="ignore", invalid="ignore"):
        centers = sample_far.project(X_s[: max(1, n_s // KEYS_PER_CELL)], 0, "key")
    kernel = NearFieldKernel(sample_far, np.unique(centers, axis=0), 1).bind(X_s, w_s)
    values = Y_s - summary.y_mean
    # The sample is in a random order: its first rows are a uniform sample of it.
    rows = np.arange(min(ERROR_QUERIES, n_s))
    cap = near_key_cap(n, n_subsample) * n_s / n
    rng = check_random_state(seed)
    first = 1
    feature_map = None
    with single_threaded_blas():
        kernel.sort_keys(X_s, values, w_s)
        probe = ErrorProbe(kernel, rows, ERROR_KEYS, rng.randint(2**31 - 1))
        if choose_rank:
            feature_map, first = _rank_on_sample(
                kernel, probe, near, n, cap, rng, tol, n_subsample
            )
            kernel.set_feature_map(feature_map)
            near.set_feature_map(feature_map)
        kernel.accumulate(X_s, values, w_s)
        probe.use_kernel()
        errors, met = grow_near_cells(kernel, probe, tol, cap, first)
    return kernel.mean_near_keys / kernel.n_keys, errors, met, feature_map


def _rank_on_sample(kernel, probe, near, n, cap, rng, tol, n_subsample):
    """The Nyström map of the lowest predicted cost meeting ``tol`` on the sample's
    near field ``kernel`` (maps fitted on the first ``n_subsample`` rows of the sample,
    costs at ``n`` keys), and its number of near cells there."""
    n_s = kernel.n_keys
    keys_kept = kernel.near_keys
    first_rows = keys_kept["order"] < n_subsample
    keys = keys_kept["keys"][first_rows]
    weights = np.exp(keys_kept["log_weight"][first_rows])
    t = kernel.n_outputs

    def fit_map(r):
        return NystroemFeatures(min(r, len(keys))).fit(
            keys, sample_weight=weights, random_state=rng
        )

    def cost_of(feature_map):
        share = kernel.mean_near_keys / n_s
        return split_cost(n, feature_map.n_components_, share * n, share * near.n_cells, t)

    return search_rank(kernel, probe, n, cap, fit_map, cost_of, tol, n_subsample)


def value_units(summary):
    """The target offset (the weighted mean) and the power of two the centered values are
    summed in, from the first pass's extremes of the targets (as the in-memory fit takes
    them from the values)."""
    # max|y − offset| from the extremes: the power of two the values are summed in.
    spread = np.maximum(summary.y_max - summary.y_mean, summary.y_mean - summary.y_min)
    return summary.y_mean, power_of_two_scale(spread[None, :], axis=0)


def ordered_sample(summary):
    """The first pass's sample ``(X, Y, w)`` in the order of the training rows."""
    _, order, X_s, Y_s, w_s = summary.sample
    rows = np.argsort(order, kind="stable")
    return X_s[rows], Y_s[rows], w_s[rows]


def gaussian_center_bandwidth(summary, sample, center, bandwidth, n_jobs=None):
    """The Gaussian kernel's center and bandwidth from the first pass: the given
    ``center`` or the weighted mean; a given ``bandwidth`` as it is (``None`` here), Scott's
    rule from the full-data spread, or a rule or search on the ``sample`` rescaled to n by
    Scott's rate :math:`(n_{sub}/n)^{1/(d+4)}`. Returns the center, the bandwidth and the
    leave-one-out error of a search (else ``None``)."""
    d = len(summary.x_mean)
    center = summary.x_mean if center is None else center
    if not isinstance(bandwidth, str):
        return center, None, None
    sigma = np.sqrt(summary.x_m2 / summary.total)
    if bandwidth == "scott":
        h = sigma * summary.total ** (-1.0 / (d + 4))
        # A constant feature gets 1, as in rule_of_thumb_bandwidth.
        return center, np.where(has_spread(sigma, summary.max_abs), h, 1.0), None
    X_s, Y_s, w_s = sample
    h, loo_error = resolve_bandwidth(bandwidth, X_s, Y_s, w_s, n_jobs=n_jobs)
    # Scott's rate: the bandwidth of the sample shrinks like n^(-1/(d+4)).
    return center, h * (len(w_s) / summary.count) ** (1.0 / (d + 4)), loo_error


def near_field_in_parts(rows, near, summary, seed, *, n_near, tol, n_subsample, choose_rank):
    """The near field of a fit in parts: its share of the keys (``n_near / n``, or chosen
    on the sample with ``n_near="auto"``, :func:`near_share_on_sample`), then its sums
    taken part by part (:func:`cell_sums`), its near cells set and every cell's far sums
    computed.

    Returns the near field (``near``, or one of fewer, larger cells where the map chosen
    has more features than the cells were drawn for), the weight error measured on the
    sample (``None`` for a given ``n_near``), whether it meets ``tol``, and the far field's
    map chosen with it (else ``None``).
    """
    weight_error, met, feature_map = None, True, None
    if n_near == "auto":
        # Before the sums: it may choose another map for the far field.
        share, errors, met, feature_map = near_share_on_sample(
            near, summary, seed, tol=tol, n_subsample=n_subsample, choose_rank=choose_rank
        )
        weight_error = float(errors.mean())
        if near.n_cells * near.n_components > CELL_FEATURES:
            # More features than the cells were drawn for: fewer, larger cells.
            near = cell_kernel(near.far, summary)
    else:
        share = n_near / int(summary.count)
    sums, cells, counts = rows.reduce(cell_sums, merge_cell_sums, near, summary.y_mean)
    far = near.far
    far.key_sums, far.key_log_scale, far.key_radius, far.target_sums = sums
    near.set_cell_sums(cells, counts)
    # The near cells hold about that share of the keys.
    near.set_near_cells(int(np.ceil(share * near.n_cells)))
    # Every cell's far sums once: each query block only reads them.
    near.precompute()
    return near, weight_error, met, feature_map
