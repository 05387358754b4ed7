r"""The training schedule of :class:`~kernattn.AttentionRegressor`'s kernel.

From a start :math:`\theta_0`, the optimizer (:func:`~kernattn.learned._optimize.optimize`)
trains :math:`\theta_1` on the leave-one-out objective; a kernel trained against a key
subsample has its width set for all keys; then the trained parameters are taken back toward
the start, :math:`\theta = \theta_1 + \lambda(\theta_0 - \theta_1)`, by the shrinkage
:math:`\lambda` given or chosen by the inner validation of
:mod:`kernattn.learned._shrinkage` (each fold trained from the start ``restart`` gives it:
its own on a small sample, the fit's on a large one). Plain settings in, a :class:`Training` out.
"""

import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from kernattn.learned._local import held_out_errors
from kernattn.learned._optimize import calibrate_width, optimize, warn_if_saturated
from kernattn.learned._shrinkage import (
    MIN_GROUPS_PER_FOLD,
    N_FOLDS,
    fold_rows,
    held_out_shrinkage,
    shrink,
)


@dataclass
class Training:
    """What a training ran to: the parameters, the iterations, the loss per iteration, the
    held-out loss per iteration (``None`` without early stopping), the shrinkage toward
    the start and the inner validation's folds (``None`` without it)."""

    theta: np.ndarray
    n_iter: int
    loss_curve: list
    validation_scores: list = None
    shrinkage: float = 0.0
    fits: list = None


def untrained(objective, theta, train):
    """No training (``max_iter=0``): the start and its loss."""
    return Training(theta, 0, [float(objective.loss(theta, train, train))])


def train_kernel(
    objective,
    theta,
    settings,
    *,
    train,
    validation,
    rng,
    verbose=0,
    probe=None,
    calibrate=False,
    shrinkage=0.0,
    restart=None,
):
    """Train from ``theta`` and take the result back toward it.

    Parameters
    ----------
    objective : LeaveOneOutObjective
    theta : ndarray
        The start.
    settings : dict
        The keyword arguments of :func:`~kernattn.learned._optimize.optimize` (the
        optimizer, ``max_iter``, the stopping rule, Adam's settings).
    train, validation : ndarray of int or None
        The training rows and the held-out rows of early stopping.
    rng : numpy.random.RandomState
    verbose : int
    probe : ndarray of int, optional
        Rows on which to warn when the softmax starts close to one-hot (``None``: no
        check).
    calibrate : bool
        The kernel trains against a key subsample: set its width for all keys after.
    shrinkage : float or None
        The share of the way back to the start; ``None``: chosen by the inner validation,
        each fold starting from ``restart(rows)``.

    Returns
    -------
    Training
    """
    layout = objective.layout
    if probe is not None:
        query, key, log_scale, _, _ = layout.unpack(theta)
        scale = objective.scale if log_scale is None else np.exp(log_scale)
        warn_if_saturated(objective, query, key, scale, probe)
    start = theta.copy()
    theta, n_iter, monitor = optimize(
        objective, theta, train=train, validation=validation, rng=rng, verbose=verbose, **settings
    )
    if calibrate:
        theta = calibrate_width(
            objective, theta, layout.projections(), train, rng, verbose=verbose
        )
    result = Training(theta, n_iter, monitor.loss_curve)
    if validation is not None:
        result.validation_scores = monitor.validation_scores
    if shrinkage is None:
        # Each fold trains as long as the fit on all rows did, at most: the same procedure
        # on two thirds of the rows (a longer run would only polish).
        fold_settings = {**settings, "max_iter": max(n_iter, 1)}
        shrinkage, result.fits = _inner_validation(objective, fold_settings, restart, rng)
    result.shrinkage = shrinkage
    result.theta = shrink(start, theta, shrinkage)
    return result


def validates(shrinkage, warm, subsampled, n_groups):
    """Whether ``shrinkage="auto"`` runs the inner validation: not for a warm start, a
    kernel trained against a key subsample, or fewer distinct inputs than its folds need."""
    return (
        shrinkage == "auto"
        and not warm
        and not subsampled
        and n_groups >= N_FOLDS * MIN_GROUPS_PER_FOLD
    )


def _inner_validation(objective, settings, restart, rng):
    """The shrinkage chosen on the folds of the duplicate groups, and the folds' fits."""

    def train_part(theta, rows):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return optimize(
                objective, theta, train=rows, validation=None, rng=rng, verbose=0, **settings
            )[0]

    def errors(theta, rows, held):
        return held_out_errors(objective, theta, held, rows)

    return held_out_shrinkage(
        fold_rows(objective.groups, rng),
        restart,
        train_part,
        errors,
        objective.sw,
        objective.groups.ids,
    )
