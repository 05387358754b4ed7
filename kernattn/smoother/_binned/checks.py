"""Checks of the binned tier's arguments: points, bandwidths, degrees, targets, weights."""

import numpy as np

#: Inputs the binned sums support (the grid has G^d cells).
MAX_DIMS = 2


def check_points(X, n_dims=None, name="X"):
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 1-D or 2-D array of shape (n, d); got {X.ndim} dims")
    d = X.shape[1]
    if not 1 <= d <= MAX_DIMS:
        raise ValueError(
            f"binned sums support 1 or {MAX_DIMS} inputs; {name} has {d} columns "
            "(use the exact algorithm)"
        )
    if n_dims is not None and d != n_dims:
        raise ValueError(f"{name} has {d} columns; the grid has {n_dims}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinity")
    return X


def check_bandwidth(bandwidth, n_dims):
    h = np.asarray(bandwidth, dtype=float)
    if h.ndim > 1 or h.size not in (1, n_dims) or not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(
            f"bandwidth must be a positive float or {n_dims} positive floats; got {bandwidth!r}"
        )
    return np.broadcast_to(h, (n_dims,)).astype(float)


def check_degree(degree):
    if not isinstance(degree, (int, np.integer)) or degree < 0:
        raise ValueError(f"degree must be a non-negative integer; got {degree!r}")
    return int(degree)


def check_targets(Y, n):
    Y = np.asarray(Y, dtype=float)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or len(Y) != n:
        raise ValueError(f"Y must have shape ({n},) or ({n}, n_outputs); got {Y.shape}")
    if not np.all(np.isfinite(Y)):
        raise ValueError("Y contains NaN or infinity")
    return Y


def check_weights(sample_weight, n):
    if sample_weight is None:
        return None
    s = np.asarray(sample_weight, dtype=float)
    if s.shape != (n,) or not np.all(np.isfinite(s) & (s >= 0)) or not np.any(s > 0):
        raise ValueError(
            f"sample_weight must be {n} finite non-negative floats, not all 0; got shape {s.shape}"
        )
    return s
