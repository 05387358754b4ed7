r"""The fit of :class:`~kernattn.AttentionRegressor`'s heads, from data to parameters.

The schedule: standardize the inputs; set up the leave-one-out objective
(:mod:`kernattn.learned._objective`) of the targets in units of their standard deviation;
start (:mod:`kernattn.learned._start`: a previous fit's parameters, or the start that
``init`` names); train and take the result back toward the start
(:mod:`kernattn.learned._training`); choose the degree of the estimate, its width and its
tilt (:mod:`kernattn.learned._degree`). The random draws come in that order from one
generator. Plain settings in (the estimator's parameters, as ``get_params`` gives them), a
:class:`HeadsFit` out: the estimator binds it to its keys as a kernel.
"""

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.numerics import standardization
from kernattn._engine.heads import SoftmaxHeads
from kernattn._local.warp import InputWarp, quantile_knots
from kernattn.learned._degree import choose_degree, degree_candidates
from kernattn.learned._local import unbalanced_share
from kernattn.learned._objective import Layout, LeaveOneOutObjective
from kernattn.learned._optimize import sample_groups, validation_split
from kernattn.learned._shrinkage import ONE_FOLD_GROUPS
from kernattn.learned._start import initial_scale, start_parameters, target_scale, warm_parameters
from kernattn.learned._training import train_kernel, untrained, validates


@dataclass
class HeadsFit:
    """A fit of the heads: the objective it was trained on, the parameters, the unit of
    the targets in the objective, the standardization of the inputs, the warp
    (``None``: none), the local constant's ``(log_factor, penalty, kind)`` (``None``: a
    line alone), the line's log-factor (``None``: no line), its share, and the fitted
    attributes found on the way."""

    objective: LeaveOneOutObjective
    theta: np.ndarray
    target_unit: float
    center: np.ndarray
    input_scale: np.ndarray
    warp: InputWarp
    constant: tuple
    line: float
    share: float
    attributes: dict


def fit_heads(X, values, sample_weight, groups, params, *, head_dim, user_init, plan, previous):
    """Fit the heads to the inputs ``X`` and the centered targets ``values``.

    Parameters
    ----------
    X, values, sample_weight : ndarray
    groups : DuplicateGroups
        The groups of identical rows of ``X``.
    params : dict
        The estimator's parameters.
    head_dim : int
    user_init : ndarray of shape (n_heads, n_features, head_dim) or None
        The projections to start from, when given.
    plan : dict
        The parameters as resolved for these data: ``tilts`` (the kinds of tilt to choose
        among), ``warp`` (its pieces), ``optimizer``, ``key_subsample`` and ``steps`` (Adam
        steps per iteration, ``None``: an epoch).
    previous : dict or None
        A previous fit to start from (``warm_start``): its ``kernel``, ``warp_slopes``,
        ``width_factor`` and ``line_share``.

    Returns
    -------
    HeadsFit
    """
    d = X.shape[1]
    rng = check_random_state(params["random_state"])
    if params["standardize"]:
        center, input_scale = standardization(X, sample_weight)
    else:
        center, input_scale = np.zeros(d), np.ones(d)
    objective, target_unit = _objective(
        (X - center) / input_scale, values, sample_weight, groups, params, head_dim, plan
    )
    if params["early_stopping"]:
        train, validation = validation_split(groups, params["validation_fraction"], rng)
    else:
        train, validation = np.arange(len(X)), None
    probe = sample_groups(groups, rng)
    theta = None
    if previous is not None:
        theta = warm_parameters(
            objective.layout,
            previous["kernel"],
            previous["warp_slopes"],
            previous["width_factor"],
            target_unit,
        )
    warm = theta is not None

    def restart(rows=None):
        return start_parameters(
            objective,
            objective.scale,
            probe,
            rng,
            init=params["init"],
            user_init=user_init,
            sample_weight=sample_weight,
            n_jobs=params["n_jobs"],
            rows=rows,
        )

    theta = theta if warm else restart()
    start = theta.copy()

    def fold_start(rows):
        # The inner validation's fold of a large sample (one fold, ONE_FOLD_GROUPS distinct
        # inputs or more) trains from this same start: its search on all rows tuned d
        # bandwidths, whose leave-one-out optimism is of order d/n against the held-out
        # third, where the training moves d × head_dim parameters. Smaller samples search
        # again on each fold's rows.
        return start.copy() if groups.n_groups >= ONE_FOLD_GROUPS else restart(rows)

    training = _train(
        objective, theta, params, plan, train, validation, rng, probe, warm, fold_start
    )
    theta = training.theta
    candidates = degree_candidates(
        objective, theta, params["degree"], groups.n_groups, head_dim, rng, plan["tilts"]
    )
    degree, share, constant, line = choose_degree(
        objective,
        theta,
        candidates,
        fits=training.fits,
        shrinkage=training.shrinkage,
        head_dim=head_dim,
        rng=rng,
        previous=previous["line_share"] if warm else None,
    )
    attributes = _attributes(training, degree, share, constant, line, plan["warp"])
    warp = None
    if plan["warp"]:
        log_slopes = objective.layout.log_slopes(theta)
        attributes.update(warp_knots_=objective.warp_knots, warp_slopes_=np.exp(log_slopes))
        # The kernel warps every input it compares, keys and queries alike.
        warp = InputWarp(center, input_scale, objective.warp_knots, log_slopes)
    return HeadsFit(
        objective, theta, target_unit, center, input_scale, warp, constant, line, share, attributes
    )


def unbalanced(fit):
    """The share of the training rows whose leave-one-out tilt of ``fit`` cannot reach
    its balance (``unbalanced_``; 0 without a tilt)."""
    tilt = fit.attributes["tilt_"]
    if not tilt:
        return 0.0
    pair = (tilt, fit.attributes["tilt_penalty_"])
    return unbalanced_share(fit.objective, fit.theta, fit.constant[0], pair)


def _objective(Z, values, sample_weight, groups, params, head_dim, plan):
    """The leave-one-out objective of the standardized inputs ``Z`` (warped with
    ``plan["warp"]`` pieces), and the unit of its targets: their standard deviation (the
    mixture's bias is then unit-free too, and the optimizer takes the same path for y and
    c·y)."""
    n_heads, scale, warp = params["n_heads"], params["scale"], plan["warp"]
    layout = Layout(
        n_heads,
        Z.shape[1],
        head_dim,
        values.shape[1],
        params["tie_qk"],
        isinstance(scale, str),  # "learned", the only string allowed
        params["head_mixture"],
        warp_pieces=warp,
    )
    target_unit = target_scale(values, sample_weight)
    objective = LeaveOneOutObjective(
        Z,
        values / target_unit,
        sample_weight,
        groups,
        layout,
        params["similarity"],
        initial_scale(scale, n_heads, head_dim),
        params["alpha"],
        n_jobs=params["n_jobs"],
        leave_one_out=params["leave_one_out"],
        warp_knots=quantile_knots(Z, warp) if warp else None,
    )
    return objective, target_unit


def _train(objective, theta, params, plan, train, validation, rng, probe, warm, restart):
    """Train the heads from ``theta`` (``max_iter=0``: keep it) and take them back toward
    that start as ``shrinkage`` says."""
    groups = objective.groups
    if params["max_iter"] == 0:
        return untrained(objective, theta, train)
    if len(groups.valid_queries(train, train)) == 0:
        raise ValueError(
            "AttentionRegressor learns its kernel by leave-one-out and needs at least "
            f"2 distinct training inputs; got {len(groups.ids)} sample(s) with 1 distinct "
            "input. Use max_iter=0 to keep the initial kernel."
        )
    layout = objective.layout
    settings = dict(
        optimizer=plan["optimizer"],
        max_iter=params["max_iter"],
        tol=params["tol"],
        n_iter_no_change=params["n_iter_no_change"],
        learning_rate=params["learning_rate"],
        batch_size=params["batch_size"],
        key_subsample=plan["key_subsample"],
        # Heads first trained under a uniform convex mixture: a mixture learned from the
        # start gives all the weight to the head that is best at the start, and a head of
        # weight ~0 gets a gradient ~0 and never learns.
        frozen_first=layout.slices["a"] if layout.convex and layout.n_heads > 1 else None,
        steps_per_iteration=plan["steps"],
    )
    subsampled = plan["steps"] is not None
    shrinkage = params["shrinkage"]
    if validates(shrinkage, warm, subsampled, groups.n_groups):
        shrinkage = None
    else:
        shrinkage = float(shrinkage or 0.0) if shrinkage != "auto" else 0.0
    # The leave-one-out bandwidths may be narrow on purpose (targets without noise): only
    # an arbitrary start is warned about.
    init = params["init"]
    arbitrary = warm or not (isinstance(init, str) and init == "loo")
    return train_kernel(
        objective,
        theta,
        settings,
        train=train,
        validation=validation,
        rng=rng,
        verbose=params["verbose"],
        probe=probe if arbitrary else None,
        # Trained against a key subsample: the width for all keys (a cosine head's width
        # is its scale, which stays as the user set it).
        calibrate=subsampled and params["similarity"] != "cosine",
        shrinkage=shrinkage,
        restart=restart,
    )


def _attributes(training, degree, share, constant, line, warp):
    """The fitted attributes of a training, a degree and a width (see
    :func:`~kernattn.learned._degree.choose_degree`), and a warp of ``warp`` pieces."""
    tilt = False if constant is None or constant[1] is None else constant[2]
    fitted = {
        "warp_": warp,
        "n_iter_": training.n_iter,
        "loss_curve_": training.loss_curve,
        "shrinkage_": training.shrinkage,
        "degree_": degree,
        "line_share_": share,
        "tilt_": tilt,
        "held_back_": 0.0,
    }
    if training.validation_scores is not None:
        fitted["validation_scores_"] = training.validation_scores
    # The kernel's own width: the constant's (tilted: its factor), or a sole line's.
    if degree == 1 or tilt:
        fitted["width_factor_"] = float(np.exp(line if constant is None else constant[0]))
    if degree == 1:
        fitted["line_width_factor_"] = float(np.exp(line))
    if tilt:
        fitted["tilt_penalty_"] = constant[1]
    return fitted


def heads_factory(fit, **fixed):
    """``log_factor → SoftmaxHeads``: the heads of ``fit`` (their bias in target units) with
    every head's logits multiplied by ``exp(log_factor)``; ``fixed``: the kernel's other
    settings (similarity, keys, their weights, dtype)."""
    query, key, log_scale, a, b = fit.objective.layout.unpack(fit.theta)
    scale = fit.objective.scale if log_scale is None else np.exp(log_scale)

    def heads(log_factor):
        return SoftmaxHeads(
            center=fit.center,
            input_scale=fit.input_scale,
            query_weights=query.copy(),
            key_weights=key.copy(),
            scale=scale * np.exp(log_factor),
            head_weights=a.copy(),
            head_bias=b * fit.target_unit,
            warp=fit.warp,
            **fixed,
        )

    return heads
