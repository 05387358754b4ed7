r"""The estimators on Dask collections: fit and predict where the data live.

A layer above the estimators (as dask-ml's wrappers sit above scikit-learn's): importing
kernattn registers it (:func:`kernattn._core.rows.register_source`), and dask itself is
imported only when a dask array or dataframe reaches ``fit`` or ``predict`` (dask is an
optional extra, ``pip install "kernattn[dask]"``). The estimators know nothing of Dask: they
read their training set through :class:`~kernattn._core.rows.Rows`, and this layer gives them the
partitions of a collection as its parts (:class:`~kernattn.distributed._rows.DaskRows`),
every part's task run on the worker that holds it, the results merged up a tree in the order
of the partitions.

- **Linear attention** fits in the two passes of :mod:`kernattn.linear._passes` with the
  partitions as parts: statistics and a uniform sample drawn on the workers (each row's
  sampling key from the estimator's seed and its partition's index), then the key sums, and,
  for the near field, the per-cell sums. Only the merged statistics, the sample and the sums
  reach the client. At prediction the model keeps no keys in memory: the stages of
  :mod:`kernattn.linear._staged` compute what needs the keys on the partitions.
- **The smoother's leave-one-out search** on more than 4 000 rows evaluates the in-memory
  criterion with its keys in parts (:meth:`Criterion.on_parts
  <kernattn.bandwidth._criterion.Criterion.on_parts>`): every partition's kernel sums for the
  600, then 2 400 sampled queries, merged at their shifts; the fitted smoother then holds its
  training rows in memory.
- **Prediction** on a dask array is a dask array, one block per block of queries, each
  computed on a worker from the fitted model (:mod:`kernattn.distributed._predict`).

Every task is pure and every merge has a fixed order: a rerun, or a run during which a
worker is lost and its tasks recomputed elsewhere, gives the same numbers to the last bit.
"""

from kernattn._core.rows import register_source


def is_collection(data):
    """Whether ``data`` is a Dask collection (array, dataframe, series), checked without
    importing dask."""
    return callable(getattr(data, "__dask_graph__", None))


def _rows(X, y, sample_weight=None):
    from kernattn.distributed._rows import DaskRows

    return DaskRows.from_collections(X, y, sample_weight)


def _predict(model, X, return_std=False, **kwargs):
    from kernattn.distributed._predict import predict

    return predict(model, X, return_std=return_std, **kwargs)


register_source(is_collection, _rows, _predict)
