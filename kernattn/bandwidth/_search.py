r"""The search of a bandwidth-selection criterion: the best common multiple of Scott's
bandwidths on a grid, then all log-bandwidths refined together by L-BFGS-B (with restarts,
and each feature tried smoothed away), on growing subsets of the queries for large sets.
"""

import time
import warnings
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize
from sklearn.utils import check_random_state

from kernattn._core.blocks import single_threaded_blas
from kernattn._core.numerics import power_of_two_scale
from kernattn._core.warning_types import BandwidthWarning
from kernattn.bandwidth._criterion import CRITERIA, Criterion, check_observations
from kernattn.bandwidth._rules import (
    BANDWIDTH_RULES,
    bandwidth_message,
    check_bandwidth,
    rule_of_thumb_bandwidth,
)

#: Common factors of the rule-of-thumb bandwidth tried before the per-feature refinement.
LOO_GRID = np.geomspace(1e-2, 1e1, 16)
#: The per-feature refinement keeps log-bandwidths within this factor of the rule of thumb.
LOO_RANGE = 1e3
#: A local polynomial's selected bandwidths keep tr(S) at most this share of the rows: on
#: average a training target weighs no more in its own fit than all its neighbours together
#: (see :func:`select_bandwidth`).
MAX_DOF_SHARE = 0.5


# Training sets up to this many rows are searched exactly; larger ones on growing random
# subsets of the queries (each against every key).
_EXACT_ROWS = 4000
# The subsets of queries of the stages of a large search.
_FIRST_SUBSET = 600
_SUBSET_GROWTH = 4
_LAST_SUBSET = 2400
# The common factors of the first stage of a search (a coarse grid: it only picks the
# basin the refinement starts in), from 0.02 to 10, each twice the one before: the Gaussian
# kernel at one is the square of the square of the kernel at the next.
_SUBSET_GRID = 10.0 * 2.0 ** -np.arange(10.0)[::-1]
# The relative change of the criterion at which a search on a subset stops, and the
# iterations of the stages after the first (they start next to the minimum).
_SUBSET_FTOL = 1e-6
#: The refinement's relative tolerance on all rows (``select_bandwidth``'s ``tol``).
FULL_FTOL = 1e-9
# Exact searches of at most this many rows restart from several points, each to this
# relative tolerance (the best end is polished to the full one).
_RESTART_ROWS = 2000
_RESTART_FTOL = 1e-4
# ... and, for the Gaussian kernel, with at most this many features: the 2d restarts cost 2d
# coarse searches, several times the search itself in ten dimensions. (A compact kernel's
# criterion has flat regions, where neighbours leave the support, in any dimension.)
_RESTART_FEATURES = 4
# A restart whose log-bandwidths all end within this of the optimum found returned to it.
_SAME_OPTIMUM = 0.1
# The weight of the squared excess of tr(S)/n over its limit in the refinement that keeps a
# local polynomial's tr(S) within it (search units: the criterion is of order 1), and the
# bisection steps of the common factor that brings its end within the limit.
_DOF_PENALTY = 1e3
_DOF_BISECTIONS = 12
_LATER_ITERATIONS = 12


def subset_sizes(n):
    """The sizes of the nested subsets of queries a search of ``n`` rows runs on, growing
    (600, then 2 400); none (an exact search on all rows) for at most 4 000 rows.

    Examples
    --------
    >>> subset_sizes(3000), subset_sizes(10**6)
    ([], [600, 2400])
    """
    if n <= _EXACT_ROWS:
        return []
    sizes = []
    size = _FIRST_SUBSET
    while size < min(n, _LAST_SUBSET):
        sizes.append(size)
        size *= _SUBSET_GROWTH
    sizes.append(min(n, _LAST_SUBSET))
    return sizes


def _subset_stages(n, rng):
    """Nested random subsets of the queries, growing; ``[None]`` (all rows) for small n."""
    if n <= _EXACT_ROWS:
        return [None]
    order = rng.permutation(n)
    return [np.sort(order[:size]) for size in subset_sizes(n)]


class BandwidthSelection(NamedTuple):
    """The result of :func:`select_bandwidth`."""

    #: ndarray of shape (n_features,): the bandwidths.
    bandwidth: np.ndarray
    #: float: the criterion reached, in the targets' units (for ``"loo"`` the leave-one-out
    #: mean squared error; an estimate from ``n_queries`` queries for large training sets).
    value: float
    #: ndarray of bool: the bandwidths on the lower edge of the search range.
    lower_edge: np.ndarray
    #: ndarray of bool: the bandwidths on the upper edge of the search range.
    upper_edge: np.ndarray
    #: float: tr(S), the effective degrees of freedom at the selected bandwidths.
    effective_dof: float
    #: int: the queries the last stage of the search used (all rows for small sets).
    n_queries: int


def select_bandwidth(
    X,
    Y,
    sample_weight=None,
    kernel="gaussian",
    *,
    criterion="loo",
    degree=0,
    n_jobs=None,
    random_state=None,
    verbose=0,
    tol=FULL_FTOL,
):
    r"""Per-feature bandwidths that minimize a selection criterion of the smoother.

    The criterion is that of the estimator actually fitted (``degree`` 0 for
    local-constant, 1 for local-linear): ``"loo"`` the leave-one-out squared error,
    ``"aic"`` the corrected AIC of Hurvich, Simonoff and Tsai (1998), ``"gcv"`` generalized
    cross-validation (see :class:`~kernattn.bandwidth._criterion.Criterion`). First the
    best common multiple
    ``c · h_scott`` over a log grid (``c`` from 0.02 to 10, each twice the one before, all
    evaluated on one set of distances; the Gaussian kernel at one factor is the fourth power
    of the kernel at the next larger, so without sample weights the grid costs one
    ``exp``), then all
    log-bandwidths refined together by L-BFGS-B with the analytic gradient, within a factor
    1000 of the Scott bandwidth either way; exact leave-one-out searches of up to 2 000
    rows (with the Gaussian kernel, of 2 to 4 features; any number with a compact kernel,
    whose criterion has flat regions) also start from that common factor with each
    feature's bandwidth e times smaller and larger (the criterion can have local minima
    that trade one feature's bandwidth against another's) and keep the best end; for the
    Gaussian kernel the starts run in the order of their criterion, until one returns to
    the optimum already found. Then each
    feature is tried with its largest bandwidth (smoothed away: irrelevant features want
    that, but a small bandwidth on a feature with gaps is a flat plateau the gradient
    cannot leave), and the refinement is repeated from any improvement.

    For a local polynomial (``degree ≥ 1``) the selected bandwidths keep the effective
    degrees of freedom :math:`\mathrm{tr}(S)` at most half the rows (``MAX_DOF_SHARE``; with
    sample weights half their sum, as for the rows they repeat): on
    average a training target weighs no more in its own fit than all its neighbours
    together, and at least as many degrees of freedom are left to the error as are fitted.
    The criterion is a noisy estimate of the error, and a local polynomial's has a second
    basin at bandwidths below the spacing of the inputs, where most leave-one-out lines are
    held back (:mod:`kernattn._local.polynomial`) and the smoother nearly interpolates; on
    small samples with few distinct values per feature its minimum there can undercut the
    supported basin by chance while the error on new data is 1.6 to 1.9 times as large
    (R's ``MASS::cpus``: tr(S) up to 0.92 n). Where the search ends above the limit, it
    goes on from the bandwidths scaled up by the smallest common factor that meets it,
    minimizing the criterion plus :math:`10^3 (\mathrm{tr}(S)/n - 1/2)_+^2`, and its end
    is scaled up again onto the limit. Searches that end within it (R np's cv.ls
    bandwidths, say) are not changed.

    Training sets of more than 4 000 rows are searched on random subsets of the queries
    (600, then 2 400 rows), each compared with every key: the criterion's sums over the
    subset, scaled to the whole set, are unbiased estimates of the full sums, and each
    stage starts from the previous stage's bandwidths. The search then costs a few
    thousand rows' worth of kernel sums instead of ``n`` per evaluation.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
    sample_weight : ndarray of shape (n_samples,), optional
    kernel : {"gaussian", "epanechnikov", "tricube"}
    criterion : {"loo", "aic", "gcv"}
    degree : {0, 1}
    n_jobs : int, optional
        Threads for the blocks of the criterion (``None``: all cores, within any thread
        limit set around the call).
    random_state : int, RandomState instance or None
        The subsets of queries of a large search.
    verbose : int
        1: a line per stage of the search; 2: also a line per evaluation.
    tol : float, default=1e-9
        The refinement stops when an L-BFGS-B step lowers the criterion (divided by the
        targets' variance) by less than ``tol`` times the larger of its value and 1
        (SciPy's ``ftol``). A looser tolerance serves a caller that refines the bandwidths
        further: on Friedman #1 (1 500 rows, 10 features) ``1e-6`` stops after a third of
        the evaluations, where the criterion has come within 1e-5 of its minimum and only
        the bandwidths of irrelevant features still grow.

    Returns
    -------
    selection : BandwidthSelection

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(80, 1))
    >>> y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=80)
    >>> selection = select_bandwidth(X, y, criterion="gcv", degree=1)
    >>> bool(0.05 < selection.bandwidth[0] < 0.5), bool(selection.effective_dof > 2)
    (True, True)
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
    if not (isinstance(tol, int | float | np.floating) and 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1); got {tol!r}")
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(len(X), -1)
    sw = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    if len(X) < 2:
        raise ValueError(f"bandwidth={criterion!r} needs at least 2 samples; got {len(X)} sample")
    with single_threaded_blas():
        return _search(X, Y, sw, kernel, criterion, degree, n_jobs, random_state, verbose, tol)


def _search(X, Y, sw, kernel, criterion, degree, n_jobs, random_state, verbose, tol=None):
    objective = Criterion(X, Y, sw, kernel, degree, criterion, n_jobs)
    check_observations(criterion, objective.n_total)
    if objective.n_groups < 2:
        raise ValueError(
            f"bandwidth={criterion!r} needs at least 2 distinct training inputs; every row "
            "of X is the same. Give a bandwidth or use 'scott'."
        )
    start = search_start(X, sw)
    stages = _subset_stages(len(X), check_random_state(random_state))
    # The cap counts weight, as repeated rows count (an integer weight is that many rows).
    max_dof = MAX_DOF_SHARE * objective.n_total if degree else None
    return search_criterion(
        objective, start, stages, criterion, kernel, verbose, max_dof, ftol=tol
    )


#: The mean weight per row beyond which the search's start stops counting the weights
#: (see :func:`search_start`).
_START_COUNT_RANGE = 2.0**10


def search_start(X, sw):
    """Scott's rule, where a bandwidth search starts (``sw`` the sample weights, or
    ``None``).

    The rule's ``n`` is the weights' sum (integer weights act as repeated rows, and start
    where those rows would). Weights of 1e-300 or 1e300 would carry it 50 decades away from
    the data's scale, where every criterion is flat: beyond a mean weight per row of
    2^±10 the start counts the weights as if their mean were that bound."""
    sw = np.ones(len(X)) if sw is None else np.asarray(sw, dtype=float)
    rows = np.count_nonzero(sw > 0)
    if not rows:
        return rule_of_thumb_bandwidth(X, sw, "scott")
    unit = power_of_two_scale(sw)
    weights = sw / unit
    log_mean = np.log(weights.sum() / rows) + np.log(unit)
    bound = np.log(_START_COUNT_RANGE)
    if abs(log_mean) <= bound:
        return rule_of_thumb_bandwidth(X, sw, "scott")
    mean = np.exp(np.clip(log_mean, -bound, bound))
    return rule_of_thumb_bandwidth(X, weights * (mean * rows / weights.sum()), "scott")


def search_criterion(
    objective,
    start,
    stages,
    criterion="loo",
    kernel="gaussian",
    verbose=0,
    max_dof=None,
    ftol=None,
):
    """The search of :func:`select_bandwidth` on a criterion object, from Scott's ``start``.

    ``objective`` has ``n`` (the training rows) and, in search units, the methods
    ``scaled_loss_and_grad(log_h, rows)``, ``scaled_loss(log_h, rows)``,
    ``scaled_grid_losses(h, factors, rows)``, ``effective_dof(log_h, rows)`` and
    ``in_target_units(value)``, where ``rows`` is an entry of ``stages`` (``None``: all
    rows; otherwise a subset of the queries the objective understands, of ``len`` queries).
    :class:`~kernattn.bandwidth._criterion.Criterion` is one, in memory or with its keys
    in parts. With ``max_dof``, the largest tr(S) the selection may have, it also needs
    ``effective_dof_and_grad(log_h, rows)`` (see :func:`_within_dof`). ``ftol``: the
    refinement's tolerance on all rows (``None``: ``FULL_FTOL``).
    """
    full_ftol = FULL_FTOL if ftol is None else ftol
    started = time.perf_counter()

    def say(level, message):
        if verbose >= level:
            print(f"[bandwidth={criterion!r} {time.perf_counter() - started:7.2f} s] {message}")

    lower = np.log(start / LOO_RANGE)
    upper = np.log(start * LOO_RANGE)
    bounds = list(zip(lower, upper, strict=True))
    log_h = None
    for stage, rows in enumerate(stages):
        n_queries = objective.n if rows is None else len(rows)
        first = stage == 0

        def evaluate(log_h, rows=rows):
            value, grad = objective.scaled_loss_and_grad(log_h, rows)
            if verbose >= 2:  # (formatting the array costs as much as a small evaluation)
                say(2, f"  criterion {value:.6g} at h = {np.exp(log_h)}")
            return value, grad

        # On a subset the criterion is an estimate with a relative error of about
        # 1/√(queries): the search stops at a matching tolerance, not at 1e-9.
        ftol = full_ftol if rows is None else max(_SUBSET_FTOL, full_ftol)

        def refine(log_h, maxiter, evaluate=evaluate, ftol=ftol):
            return minimize_bounded(evaluate, log_h, bounds, maxiter=maxiter, ftol=ftol)

        if first:
            factors = _SUBSET_GRID
            grid = objective.scaled_grid_losses(start, factors, rows)
            best = np.log(start) + np.log(factors[np.argmin(grid)])
            say(1, f"{n_queries} queries: grid of common factors, best {grid.min():.6g}")
            log_h, loss = refine(best, 100)
            if grid.min() < loss:
                log_h, loss = best, float(grid.min())
            # The criterion can have several local minima that trade one feature's
            # bandwidth against another's (a common factor cannot see them): small exact
            # searches also start from the best common factor with each feature's
            # bandwidth a factor e smaller and larger, and keep the best end (as R's np
            # restarts its search).
            if (
                criterion == "loo"
                and rows is None
                and objective.n <= _RESTART_ROWS
                and len(best) > 1
                and (len(best) <= _RESTART_FEATURES or kernel != "gaussian")
            ):
                log_h, loss, n_starts = _restart(
                    objective, refine, best, log_h, loss, bounds, screen=kernel == "gaussian"
                )
                say(1, f"{n_queries} queries: best of {n_starts} starts {loss:.6g}")
            # A small bandwidth on a feature with gaps (integer codes, say) is a plateau:
            # the gradient vanishes before the feature is smoothed away. Try dropping each
            # feature (its bandwidth to the upper edge), refine again from any improvement.
            dropped, dropped_loss = log_h.copy(), loss
            for j in range(len(log_h)):
                candidate = dropped.copy()
                candidate[j] = upper[j]
                candidate_loss = objective.scaled_loss(candidate, rows)
                if candidate_loss < dropped_loss:
                    dropped, dropped_loss = candidate, candidate_loss
            if np.any(dropped != log_h):
                candidate, candidate_loss = refine(dropped, 100)
                if candidate_loss < loss:
                    log_h, loss = candidate, candidate_loss
        else:
            log_h, loss = refine(log_h, _LATER_ITERATIONS)
        say(1, f"{n_queries} queries: criterion {loss:.6g} at h = {np.exp(log_h)}")
    dof = objective.effective_dof(log_h, stages[-1])
    if max_dof is not None and dof > max_dof:
        log_h, loss, dof = _within_dof(objective, log_h, bounds, max_dof, stages[-1])
        say(1, f"tr(S) kept within {max_dof:.4g}: criterion {loss:.6g} at h = {np.exp(log_h)}")
    # Within 1 %: the optimizer stops as the loss flattens, not exactly on the edge.
    return BandwidthSelection(
        bandwidth=np.exp(log_h),
        value=float(objective.in_target_units(loss)),
        lower_edge=log_h <= lower + 0.01,
        upper_edge=log_h >= upper - 0.01,
        effective_dof=dof,
        n_queries=objective.n if stages[-1] is None else len(stages[-1]),
    )


def _restart(objective, refine, best, log_h, loss, bounds, screen=True):
    """Restarts of an exact search from per-feature perturbations of its start.

    The criterion can have several local minima that trade one feature's bandwidth against
    another's (a common factor cannot see them). The search also starts from the best
    common factor ``best`` with each feature's bandwidth a factor e smaller and larger (as
    R's np restarts its search), each to a coarse tolerance, and keeps the best end,
    polished to the full tolerance.

    With ``screen``, the 2d starts are ranked by one evaluation of the criterion and run
    most promising first, and the restarts stop at the first that returns to the optimum
    already found: the basin around it reaches that start, and the starts further up the
    criterion rarely find a lower one. (Not for the compact kernels: their criterion has
    flat regions, where a restart does not move and every start is run.)

    Returns the bandwidths, the criterion and the number of starts run (the first
    included).
    """
    lower, upper = np.asarray(bounds, dtype=float).T
    starts = []
    for j in range(len(best)):
        for step in (-1.0, 1.0):
            other = best.copy()
            other[j] = np.clip(other[j] + step, lower[j], upper[j])
            starts.append(other)
    order = range(len(starts))
    if screen:
        screened = [objective.scaled_loss(start) for start in starts]
        order = np.argsort(screened, kind="stable")
    n_starts = 1
    restarted = False
    for k in order:
        candidate, candidate_loss = refine(starts[k], 15, ftol=_RESTART_FTOL)
        n_starts += 1
        returned = bool(np.all(np.abs(candidate - log_h) < _SAME_OPTIMUM))
        if candidate_loss < loss:
            log_h, loss, restarted = candidate, candidate_loss, True
        if screen and returned:
            break
    if restarted:
        log_h, loss = refine(log_h, 100)
    return log_h, loss, n_starts


def minimize_bounded(function, x0, bounds, maxiter=100, ftol=1e-9):
    """L-BFGS-B on ``function`` (its value and gradient) from ``x0`` within ``bounds``: the
    refinement of every bandwidth search. Returns the end and the value there."""
    result = minimize(
        function,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": maxiter, "ftol": ftol, "gtol": 1e-7},
    )
    return result.x, float(result.fun)


def _within_dof(objective, log_h, bounds, max_dof, rows=None):
    """The search's end moved to bandwidths whose tr(S) is at most ``max_dof``.

    From ``log_h`` (above the limit), all log-bandwidths go up by the smallest common step
    that meets it (tr(S) falls as every bandwidth grows); from there L-BFGS-B minimizes the
    criterion plus ``_DOF_PENALTY`` times the squared excess of tr(S)/n over the limit (the
    analytic gradients of both), and its end, a little above the limit, goes up by the
    smallest common step again. Where even the largest bandwidths exceed the limit (fewer
    rows than twice the polynomial's coefficients), ``log_h`` is kept.

    Returns the log-bandwidths, the criterion there and tr(S).
    """
    lower, upper = np.asarray(bounds, dtype=float).T
    n = objective.n

    def dof(log_h):
        return objective.effective_dof(np.minimum(log_h, upper), rows)

    def onto_limit(log_h):
        """``log_h`` plus the smallest common step (bisected) with tr(S) ≤ max_dof."""
        if dof(log_h) <= max_dof:
            return log_h
        low, high = 0.0, 0.25
        top = float(np.max(upper - log_h))
        while dof(log_h + high) > max_dof:
            if high >= top:
                return None
            low, high = high, 2.0 * high
        for _ in range(_DOF_BISECTIONS):
            middle = 0.5 * (low + high)
            if dof(log_h + middle) > max_dof:
                low = middle
            else:
                high = middle
        return np.minimum(log_h + high, upper)

    start = onto_limit(log_h)
    if start is None:
        return log_h, objective.scaled_loss(log_h, rows), dof(log_h)

    def penalized(theta):
        value, grad = objective.scaled_loss_and_grad(theta, rows)
        trace, d_trace = objective.effective_dof_and_grad(theta, rows)
        excess = (trace - max_dof) / n
        if excess > 0:
            value += _DOF_PENALTY * excess**2
            grad = grad + 2.0 * _DOF_PENALTY * excess * d_trace / n
        return value, grad

    end, _ = minimize_bounded(penalized, start, list(zip(lower, upper, strict=True)))
    end = onto_limit(end)
    if end is None:
        end = start
    return end, objective.scaled_loss(end, rows), dof(end)


def loo_bandwidth(X, Y, sample_weight=None, kernel="gaussian", *, degree=0, n_jobs=None):
    """Per-feature bandwidths that minimize the leave-one-out squared error.

    :func:`select_bandwidth` with ``criterion="loo"``.

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loss : float
        The leave-one-out mean squared error reached, in the targets' units (squared,
        summed over the outputs). The search works on the targets divided by their total
        standard deviation, so it chooses the same bandwidths for ``Y`` and ``c·Y``;
        only this reported error is ``inf`` when its true value exceeds the largest
        float (targets beyond about 1e154).
    at_bound : ndarray of bool, shape (n_features,)
        Which bandwidths ended on the edge of the search range.
    """
    if len(X) < 2:
        raise ValueError(
            f"bandwidth='loo' needs at least 2 samples to leave one out; got {len(X)} sample"
        )
    selection = select_bandwidth(
        X, Y, sample_weight, kernel, criterion="loo", degree=degree, n_jobs=n_jobs
    )
    return selection.bandwidth, selection.value, selection.lower_edge | selection.upper_edge


def edge_message(criterion, features, edge):
    """The warning for bandwidths on an edge of the search range."""
    meaning = {
        "lower": f"its lower end, a factor {LOO_RANGE:g} below Scott's rule: the target "
        "varies faster than the sample resolves; consider more data or give a bandwidth",
        "upper": f"its upper end, a factor {LOO_RANGE:g} above Scott's rule: the feature "
        "barely matters to the target (its bandwidth wants to be infinite)",
    }[edge]
    name = "leave-one-out" if criterion == "loo" else criterion.upper()
    return (
        f"the {name} bandwidth of feature(s) {features} ended on the edge of the search "
        f"range, at {meaning}."
    )


def resolve_bandwidth(
    bandwidth, X, Y, sample_weight, kernel="gaussian", *, n_jobs=None, rules=BANDWIDTH_RULES
):
    """The bandwidth a local-constant smoother uses: a rule, a selection criterion, or
    the given values.

    Warns (:class:`BandwidthWarning`) when a selected bandwidth ends on the lower edge of
    its search range, naming the features; the upper edge (an irrelevant feature) is not a
    warning.

    Returns
    -------
    bandwidth : ndarray of shape (n_features,)
    loo_error : float or None
        The criterion reached, for ``"loo"``, ``"aic"`` and ``"gcv"``.
    """
    if isinstance(bandwidth, str) and bandwidth in CRITERIA and bandwidth in rules:
        selection = select_bandwidth(
            X, Y, sample_weight, kernel, criterion=bandwidth, n_jobs=n_jobs
        )
        # The upper edge means an irrelevant feature, which the kernel then ignores: only
        # the lower edge, a target varying faster than the sample resolves, is a warning.
        if np.any(selection.lower_edge):
            warnings.warn(
                edge_message(bandwidth, np.flatnonzero(selection.lower_edge).tolist(), "lower"),
                BandwidthWarning,
                stacklevel=3,
            )
        return selection.bandwidth, selection.value
    if isinstance(bandwidth, str):
        if bandwidth not in rules:
            raise ValueError(bandwidth_message(bandwidth, rules=rules))
        return rule_of_thumb_bandwidth(X, sample_weight, bandwidth), None
    return check_bandwidth(bandwidth, X.shape[1], rules), None
