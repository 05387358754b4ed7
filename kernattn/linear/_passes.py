r"""Linear attention fitted in two passes over training rows in parts, wherever they are.

The key sums of :class:`~kernattn.LinearAttentionRegressor` are sums over rows, so any split
of the training set into parts (:class:`~kernattn._rows.Rows`: chunks read from disk, the
partitions of a dask collection) can be summed part by part and merged. What the kernel
needs from the data before the sums (the center, the bandwidth, Nyström landmarks, the target
offset) comes from a first pass of the same shape (:mod:`kernattn._summary`): full-data
statistics and a uniform sample of ``n_subsample`` rows, on which what the in-memory fit
computes on a subsample (the ``"loo"`` and ``"silverman"`` bandwidths, rescaled by Scott's
factor :math:`(n_{sub}/n)^{1/(d+4)}`, Nyström landmarks, an attention model, a learned
projection) is computed.

With ``n`` at most ``n_subsample`` the sample is the whole training set in its order, and
with Scott's rule or a given bandwidth the features are drawn as in memory: the two passes
give the in-memory fit up to the order of the sums. This module holds the tasks a part runs
(:func:`feature_sums`, :func:`cell_sums`) and their merges, which take every head's sums out
at the larger of two shifts (:func:`kernattn._sums.merge`), and the checks of a chunk
(:func:`chunk_arrays`, for :func:`~kernattn.fit_chunks`).
"""

import copy

import numpy as np

from kernattn._rows import as_part
from kernattn._sums import merge


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
