r"""The degree of :class:`~kernattn.AttentionRegressor`'s estimate: the local constant
(tilted or not), the local line, or a blend of the two.

Each candidate's width (and the tilt's penalty) is tuned by leave-one-out on all rows
(:mod:`kernattn.learned._local`). ``degree="auto"`` mixes them: the estimate is
:math:`(1 - s)\,\hat y_0 + s\,\hat y_1`, with the constant's share :math:`1 - s` the
largest of ``LEVELS`` whose held-out squared error is within ``DEGREE_STANDARD_ERRORS``
standard errors of the paired differences of the lowest. Both estimates are linear in the
targets, so each level's errors follow from the two residuals of every held-out query.

Why a share and one standard error: the choice is made on three inner folds of a few dozen
to a few hundred queries, and the plain lowest follows their noise. An all-or-nothing
choice of the line (at half a standard error) chose it in folds where it lost (R's
``ISLR::Auto``: 1.07 times the error of ``KernelSmoother(bandwidth="loo")``, the line alone
1.12); a share hedges between two estimates whose errors are not perfectly correlated, and
on ``bench_attention.py``'s 17 R data sets the one-standard-error share gives a
geometric-mean ratio to the best reference of 0.966, against 1.016 for the all-or-nothing
choice (0.972 for the plain lowest share in a prototype), and every data set with four or
more inputs below the smoother's error.

A line is held back where its local design cannot support it: its line would be more than
twice as noisy as one observation (:math:`\sum_i l_i^2 > 4`), because its weights rest on
too few distinct keys or it lies outside their support; it is then shrunk toward the kernel
average until :math:`\sum_i l_i^2 = 4` (a bounded extrapolation). The blend's equivalent
weights :math:`(1 - s)\,w_i + s\,l_i` still sum to 1 and reproduce the estimate. A share
hedges where the two estimates are close: on R's ``ISLR::Auto`` (7 inputs, 5-fold
cross-validation) choosing one of them outright took the line in three folds where it lost
(1.07 times the error of ``KernelSmoother(bandwidth="loo")``); the blend reaches 0.99 of it.
On scikit-learn's diabetes data (75/25 split, standardized) the blend gives the line a share
of 3/4 and reaches a test MSE of 3 210 (the line alone 3 168), against 3 202 for the default
(``degree=0``, tilted along the targets' trend) and 3 512 for
``KernelSmoother(bandwidth="loo")``; ``degree="auto"`` was the default of version 0.7.
"""

import numpy as np

from kernattn._core.loo import one_standard_error_choice
from kernattn._local.tilt import PENALTY
from kernattn.learned._local import choose_tilt, held_out_estimates, tune_width
from kernattn.learned._shrinkage import LEVELS, shrink

#: The line's share is the smallest of ``LEVELS`` within this many standard errors of the
#: paired differences of the lowest held-out error (see the module docstring).
DEGREE_STANDARD_ERRORS = 1.0


def degree_candidates(objective, theta, degree, n_groups, head_dim, rng, tilts=()):
    """The estimates ``degree`` allows, each tuned by leave-one-out on all rows: ``{0:
    (log_factor, penalty, kind)}`` for the constant (penalty and kind ``None``: not
    tilted; ``tilts`` the kinds to choose among) and ``{1: (log_factor, None, None)}`` for
    the line. A line needs more distinct neighbors than its ``head_dim + 1`` parameters; a
    tilt two to balance."""
    candidates = {}
    if degree != 1:
        if tilts:
            candidates[0] = (0.0, PENALTY, tilts[0])
            if n_groups > 2:
                kind, log_factor, penalty = choose_tilt(objective, theta, rng, tilts)
                candidates[0] = (log_factor, penalty, kind)
        else:
            candidates[0] = (0.0, None, None)
    if degree != 0 and (degree == 1 or n_groups > head_dim + 1):
        log_factor = 0.0
        if n_groups > head_dim + 1:
            log_factor, _ = tune_width(objective, theta, rng)
        candidates[1] = (log_factor, None, None)
    return candidates


def choose_degree(objective, theta, candidates, *, fits, shrinkage, head_dim, rng, previous=None):
    r"""The degree and the local line's share of the fitted estimate, the constant's
    ``(log_factor, penalty, kind)`` (``None``: no constant, a line alone) and the line's
    log-factor (``None``: no line).

    With both ``candidates``, the share is chosen on the inner validation's folds
    (``fits``, each fold's kernel at the chosen ``shrinkage``, the line's width tuned again
    on the fold's rows, its held-out queries against those rows) when there are some, else
    by leave-one-out on all rows. A warm start keeps the ``previous`` share (its fit had
    the inner validation this one skips).
    """
    if 1 not in candidates:
        return 0, 0.0, candidates[0], None
    if 0 not in candidates:
        return 1, 1.0, None, candidates[1][0]
    if previous is not None and not fits:
        return with_share(previous, candidates)
    if fits:
        parts = [
            (shrink(theta0, theta1, shrinkage), rows, held) for rows, held, theta0, theta1 in fits
        ]
    else:
        parts = [(theta, None, np.arange(len(objective.Z)))]
    residuals = {degree: [] for degree in candidates}
    weights = []
    for part_theta, rows, held in parts:
        widths = dict(candidates)
        if rows is not None:
            # The line's width tuned on the fold's own rows: one tuned on every row has
            # seen the held-out targets.
            part = objective.restricted(rows)
            width = 0.0
            if part.groups.n_groups > head_dim + 1:
                width, _ = tune_width(part, part_theta, rng)
            widths[1] = (width, None, None)
        for degree, (log_factor, penalty, kind) in widths.items():
            tilt = None if penalty is None else (kind, penalty)
            estimates = held_out_estimates(
                objective, part_theta, held, rows, degree, log_factor, tilt
            )
            residuals[degree].append(estimates - objective.Y[held])
        weights.append(objective.sw[held])
    return with_share(_line_share(residuals, np.concatenate(weights)), candidates)


def _line_share(residuals, weights):
    """The line's share: one minus the constant's largest share of ``LEVELS`` within
    ``DEGREE_STANDARD_ERRORS`` of the lowest held-out error of the blend."""
    line, constant = (np.vstack(residuals[degree]) for degree in (1, 0))
    ok = np.all(np.isfinite(line), axis=1) & np.all(np.isfinite(constant), axis=1)
    line, constant = line[ok], constant[ok]
    errors = np.column_stack([np.sum((line + c * (constant - line)) ** 2, axis=1) for c in LEVELS])
    return 1.0 - one_standard_error_choice(
        errors, weights[ok], levels=LEVELS, multiple=DEGREE_STANDARD_ERRORS
    )


def with_share(share, candidates):
    """:func:`choose_degree`'s answer for the line's ``share`` among the ``candidates``
    (both degrees)."""
    if share == 0.0:
        return 0, 0.0, candidates[0], None
    if share == 1.0:
        return 1, 1.0, None, candidates[1][0]
    return 1, share, candidates[0], candidates[1][0]
