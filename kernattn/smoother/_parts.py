"""The smoother's leave-one-out bandwidth search on training rows in parts (the partitions
of a dask collection), its criterion's sums taken where the parts are."""

import time
import warnings

import numpy as np

from kernattn._engine.summary import RowSummary, check_summary, sample_seed, summarize
from kernattn.bandwidth import CRITERIA
from kernattn.bandwidth._criterion import Criterion
from kernattn.bandwidth._search import search_criterion, subset_sizes

__all__ = ["search_on_parts", "unsupported_on_parts", "warn_in_memory"]


def unsupported_on_parts(params):
    """Why the bandwidth is not searched where the rows are (``""``: it is), from the
    estimator's parameters ``params``."""
    bandwidth, kernel, degree = params["bandwidth"], params["kernel"], params["degree"]
    if not (isinstance(bandwidth, str) and bandwidth in CRITERIA):
        return "no search"
    reasons = []
    if bandwidth != "loo":
        reasons.append(f"bandwidth={bandwidth!r}")
    if kernel != "gaussian":
        reasons.append(f"kernel={kernel!r}")
    if degree != 0:
        reasons.append(f"degree={degree!r}")
    for name in ("categorical_features", "ordinal_features"):
        if params[name] is not None:
            reasons.append(f"{name} given")
    return ", ".join(reasons)


def search_on_parts(rows, random_state, n_jobs, verbose):
    """The leave-one-out bandwidth search with the criterion's sums taken where the
    parts are: a first pass takes the statistics of the rows of positive weight and a
    uniform sample of queries (:mod:`kernattn._engine.summary`), whose first 600 and then
    all 2 400 rows are the nested subsets of the in-memory search; the search's steps are
    the in-memory search's (:func:`~kernattn.bandwidth.search_criterion`). ``None`` when
    the rows of positive weight are too few for a search on subsets: then the exact search
    runs in memory, as for arrays."""
    started = time.perf_counter()
    n_sample = subset_sizes(rows.n_rows)[-1]
    summary = rows.reduce(summarize, RowSummary.merge, sample_seed(random_state), n_sample)
    check_summary(summary)
    sizes = subset_sizes(summary.count)
    if not sizes:
        return None
    if verbose >= 1:
        print(
            f"[bandwidth='loo' on {rows.n_parts} partitions "
            f"{time.perf_counter() - started:7.2f} s] first pass: {summary.count} rows, "
            f"{sizes[-1]} queries sampled on the workers; the partitions stay there, "
            "centered, during the search"
        )
    criterion = Criterion.on_parts(rows, summary, n_jobs=n_jobs)
    try:
        stages = [np.arange(size) for size in sizes]
        return search_criterion(criterion, criterion.scott, stages, "loo", "gaussian", verbose)
    finally:
        criterion.release()


def warn_in_memory(unsupported):
    """A ``UserWarning`` that a search on subsets runs in memory, not where the rows are
    (``unsupported``: why, from :func:`unsupported_on_parts`)."""
    warnings.warn(
        f"KernelSmoother: {unsupported}; only the leave-one-out search of the "
        "Gaussian local-constant smoother (bandwidth='loo', kernel='gaussian', "
        "degree=0, continuous features) evaluates its criterion where the rows "
        "are. This search runs in memory, on the training set brought from the "
        "partitions.",
        UserWarning,
        stacklevel=5,
    )
