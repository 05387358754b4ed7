r"""How far :class:`~kernattn.AttentionRegressor`'s trained kernel moves from its start.

The leave-one-out loss that trains the kernel is an honest estimate of the error for a
kernel fixed in advance, not for one chosen among :math:`d^2` parameters of a metric by that
same loss: on few samples with many features the trained metric fits the leave-one-out
errors of the training set and generalises worse than the per-feature bandwidths it
started from. The shrinkage :math:`\lambda \in [0, 1]` takes the parameters back along the
straight line to the start,

.. math::

    \theta(\lambda) = \theta_1 + \lambda\, (\theta_0 - \theta_1),

(:math:`\theta_0` the start, :math:`\theta_1` the trained parameters; :math:`\lambda = 1`
is the start itself, for ``init="loo"`` the kernel smoother with its leave-one-out
bandwidths), and is chosen by an inner validation the training loss cannot see: the
duplicate groups are split into ``N_FOLDS`` folds; on each, the start is chosen and the
kernel trained on the other folds, and the held-out queries are predicted from the other
folds' keys at every level of ``LEVELS``. From ``ONE_FOLD_GROUPS`` distinct inputs one fold
is held out, and it trains from the fit's own start: that start's search tuned d
bandwidths on every row, an optimism of order d/n that does not move the choice, and
searching again cost as much as the fold's training (Friedman #1, 1 500 rows: the fit
takes 1.0–1.25 s instead of 1.3–1.45 s). The chosen level is the largest whose held-out
squared error exceeds the lowest one by at most one standard error of their difference
(the one-standard-error rule of Breiman et al. 1984, on the paired per-query differences):
the kernel moves away from its start only as far as the data show it pays.
"""

import numpy as np

from kernattn._core.loo import one_standard_error_choice

#: The shrinkage levels compared, from the trained kernel (0) to its start (1).
LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Folds of the inner validation.
N_FOLDS = 3
#: The inner validation needs at least this many distinct training inputs per fold.
MIN_GROUPS_PER_FOLD = 5
#: From this many distinct training inputs the validation holds out one fold only (a
#: third of the inputs, 200 queries or more): its choice is as settled as three folds' on a
#: small sample, at a third of the retraining.
ONE_FOLD_GROUPS = 600


def shrink(start, trained, shrinkage):
    """The parameters ``shrinkage`` of the way back from ``trained`` to ``start``."""
    return trained + shrinkage * (start - trained)


def fold_rows(groups, rng, n_folds=N_FOLDS):
    """``n_folds`` pairs (training rows, held-out rows), whole duplicate groups held out
    together (a held-out query never has a twin among the training keys); only the first
    pair from ``ONE_FOLD_GROUPS`` groups on."""
    fold_of_group = rng.permutation(groups.n_groups) % n_folds
    fold = fold_of_group[groups.ids]
    used = 1 if groups.n_groups >= ONE_FOLD_GROUPS else n_folds
    return [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(used)]


def held_out_shrinkage(
    folds, start, train, held_out_errors, sample_weight, groups=None, levels=LEVELS
):
    """The shrinkage chosen by the inner validation, and what each fold trained.

    Parameters
    ----------
    folds : list of (ndarray, ndarray)
        Training and held-out rows (:func:`fold_rows`).
    start : callable
        ``rows → theta``: the start chosen on those training rows.
    train : callable
        ``(theta, rows) → theta``: the kernel trained on those rows from ``theta``.
    held_out_errors : callable
        ``(theta, training rows, held-out rows) → ndarray``: the squared error of each
        held-out query, predicted from the training rows' keys.
    sample_weight : ndarray of shape (n_samples,)
    groups : ndarray of int of shape (n_samples,), optional
        Ids of the duplicate groups: the errors of a group's rows are pooled (weighted
        mean, summed weight) before the standard error, so that a row of weight 3 and
        three copies of it count as the same evidence.
    levels : sequence of float

    Returns
    -------
    shrinkage : float
    fits : list of (ndarray, ndarray, ndarray, ndarray)
        Per fold: its training rows, held-out rows, start and trained parameters.
    """
    errors, weights, ids, fits = [], [], [], []
    for rows, held in folds:
        theta0 = start(rows)
        theta1 = train(theta0, rows)
        fits.append((rows, held, theta0, theta1))
        errors.append(
            np.column_stack(
                [held_out_errors(shrink(theta0, theta1, lam), rows, held) for lam in levels]
            )
        )
        weights.append(sample_weight[held])
        ids.append(held if groups is None else groups[held])
    errors, weights, ids = np.vstack(errors), np.concatenate(weights), np.concatenate(ids)
    ok = np.all(np.isfinite(errors), axis=1)
    if not np.any(ok):
        return 0.0, fits
    return one_standard_error_choice(errors[ok], weights[ok], levels, groups=ids[ok]), fits
