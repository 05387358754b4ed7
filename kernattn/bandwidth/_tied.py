r"""Bandwidths of columns tied in groups (the encoded columns of a discrete feature share one
scale), selected by a criterion of the smoother."""

import numpy as np

from kernattn._core.blocks import single_threaded_blas
from kernattn.bandwidth._criterion import Criterion, check_observations
from kernattn.bandwidth._search import LOO_GRID, BandwidthSelection, minimize_bounded


def select_tied_bandwidth(
    X,
    Y,
    sample_weight,
    scales,
    tied,
    bounds,
    *,
    criterion="loo",
    degree=0,
    line=None,
    grid_groups=None,
    leave_out_duplicates=True,
    n_jobs=None,
):
    """Gaussian-kernel bandwidths of columns tied in groups (the encoded columns of a
    discrete feature share one scale) that minimize a selection criterion.

    Parameter ``p`` is the log-scale of the columns ``tied[p]``; the other columns keep
    their ``scales``. The search is that of :func:`select_bandwidth` on all rows: the best
    common offset of the log-parameters from their start over the same grid of factors, then
    L-BFGS-B with the analytic gradient (the sum of the tied columns' gradients) within
    ``bounds``, then each parameter tried at its upper bound and the refinement repeated
    from any improvement. With ``grid_groups``, the grid moves each group of parameters in
    turn, the others held at their best so far.

    Parameters
    ----------
    X : ndarray of shape (n, n_columns)
    Y : ndarray of shape (n, n_outputs)
    sample_weight : ndarray of shape (n,)
    scales : ndarray of shape (n_columns,)
        The start (and the fixed scale of the columns no parameter sets).
    tied : list of ndarray
        Per parameter, its columns.
    bounds : ndarray of shape (n_parameters, 2)
        The range of each log-parameter.
    criterion : {"loo", "aic", "gcv"}
    degree : int
        The degree of the local polynomial whose criterion is minimized (0: the local
        constant).
    line : ndarray of int, optional
        The columns of the local polynomial for ``degree ≥ 1`` (default: all).
    grid_groups : list of ndarray, optional
        Groups of parameter indices whose common offset is searched one group after the
        other (default: all parameters together).
    leave_out_duplicates : bool
        Leave every exact duplicate of a row out with it (else only the row).
    n_jobs : int, optional

    Returns
    -------
    selection : BandwidthSelection
        With the scales of the columns as ``bandwidth`` and the parameters' edges.
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(len(X), -1)
    if len(X) < 2:
        raise ValueError(f"bandwidth={criterion!r} needs at least 2 samples; got {len(X)} sample")
    with single_threaded_blas():
        objective = Criterion(
            X,
            Y,
            sample_weight,
            "gaussian",
            degree=degree,
            criterion=criterion,
            n_jobs=n_jobs,
            leave_out_duplicates=leave_out_duplicates,
            line=line,
        )
        check_observations(criterion, objective.n_total)
        base = np.log(np.asarray(scales, dtype=float))
        lower, upper = np.asarray(bounds, dtype=float).T

        def columns(theta):
            log_scales = base.copy()
            for p, cols in enumerate(tied):
                log_scales[cols] = theta[p]
            return log_scales

        def loss_and_grad(theta):
            value, grad = objective.scaled_loss_and_grad(columns(theta))
            return value, np.array([grad[cols].sum() for cols in tied])

        best = np.array([base[cols[0]] if len(cols) else 0.0 for cols in tied])
        for group in [np.arange(len(tied))] if grid_groups is None else grid_groups:
            candidates = []
            for f in LOO_GRID:
                theta = best.copy()
                theta[group] = np.clip(best[group] + np.log(f), lower[group], upper[group])
                candidates.append(theta)
            values = [objective.scaled_loss(columns(theta)) for theta in candidates]
            best, best_value = candidates[int(np.argmin(values))], float(np.min(values))

        def refine(theta):
            return minimize_bounded(loss_and_grad, theta, list(zip(lower, upper, strict=True)))

        theta, value = refine(best)
        if best_value < value:
            theta, value = best, best_value
        dropped, dropped_value = theta.copy(), value
        for p in range(len(theta)):
            candidate = dropped.copy()
            candidate[p] = upper[p]
            candidate_value = objective.scaled_loss(columns(candidate))
            if candidate_value < dropped_value:
                dropped, dropped_value = candidate, candidate_value
        if np.any(dropped != theta):
            candidate, candidate_value = refine(dropped)
            if candidate_value < value:
                theta, value = candidate, candidate_value
        return BandwidthSelection(
            bandwidth=np.exp(columns(theta)),
            value=float(objective.in_target_units(value)),
            lower_edge=theta <= lower + 0.01,
            upper_edge=theta >= upper - 0.01,
            effective_dof=objective.effective_dof(columns(theta)),
            n_queries=len(X),
        )
