"""Dask collections as the estimators read them: arrays, dataframes and series checked and
turned into dask arrays with matching row chunks."""

import dask.array as da
import numpy as np


def is_dataframe(data):
    return hasattr(data, "to_dask_array")


def as_dask_array(data, name, ndim=None):
    """A dask array from a dask array, dataframe or series (row lengths computed)."""
    if is_dataframe(data):
        data = data.to_dask_array(lengths=True)
    elif not isinstance(data, da.Array):
        raise TypeError(
            f"{name} must be a dask array or dataframe when another argument is one; got "
            f"{type(data).__name__}"
        )
    if np.isnan(data.shape[0]) or any(np.isnan(c) for c in data.chunks[0]):
        data = data.compute_chunk_sizes()
    if ndim is not None and data.ndim not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dimensions; got {data.ndim}"
        )
    if not (np.issubdtype(data.dtype, np.number) or data.dtype == bool):
        raise ValueError(f"{name} must hold numbers; got dtype {data.dtype}")
    return data


def rows_like(data, X, name):
    """``data`` (dask, numpy or None) as a dask array with the row chunks of ``X``."""
    if data is None:
        return None
    if not isinstance(data, da.Array) and not is_dataframe(data):
        data = np.asarray(data)
        data = da.from_array(data, chunks=(X.chunks[0],) + data.shape[1:])
    data = as_dask_array(data, name)
    if data.shape[0] != X.shape[0]:
        raise ValueError(
            f"{name} has {data.shape[0]} rows; X has {X.shape[0]} (one per training sample)"
        )
    if data.chunks[0] != X.chunks[0]:
        data = data.rechunk((X.chunks[0],) + data.chunks[1:])
    return data


def feature_names(X):
    """The string column names of a dataframe, or ``None``."""
    if hasattr(X, "columns"):
        columns = list(X.columns)
        if all(isinstance(c, str) for c in columns):
            return np.asarray(columns, dtype=object)
    return None


def query_array(estimator, X):
    """The queries as a float dask array of ``n_features_in_`` columns, one column chunk;
    a dataframe's column names checked against those seen at fit."""
    names = feature_names(X)
    fitted = getattr(estimator, "feature_names_in_", None)
    if fitted is not None and names is not None and not np.array_equal(fitted, names):
        raise ValueError(
            "The feature names should match those that were passed during fit; got "
            f"{list(names)}, expected {list(fitted)}"
        )
    if isinstance(X, np.ndarray) or not (isinstance(X, da.Array) or is_dataframe(X)):
        X = np.asarray(X, dtype=float)
        X = da.from_array(X, chunks=(max(1, len(X)),) + X.shape[1:])
    X = as_dask_array(X, "X", ndim=(2,))
    d = estimator.n_features_in_
    if X.shape[1] != d:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting {d} "
            "features as input."
        )
    return X.rechunk({1: -1})
