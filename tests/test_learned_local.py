"""AttentionRegressor's learned warp of the inputs (``warp``) and its local-linear
correction (``degree=1``): the warp against its formula, the objective's gradient with a
warp, the local line against a brute-force weighted least-squares fit, invariances."""

import pickle
import warnings

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import InvalidParameterError

from kernattn import AttentionRegressor, LocalDesignWarning
from kernattn._core.loo import DuplicateGroups
from kernattn._engine.regressor import canonical_order
from kernattn._local.warp import apply_warp, quantile_knots, warp_basis
from kernattn.learned._local import (
    DIRECTION_WIDTHS,
    _tune_directions,
    _widest_best,
    leave_one_out_directions,
    leave_one_out_lines,
)
from kernattn.learned._objective import Layout, LeaveOneOutObjective


def direct_warp(z, knots, slopes):
    """φ(z) by integrating the slope from the first knot, one scalar at a time."""
    out = knots[0]
    P = len(slopes)
    for p in range(P):
        lo = -np.inf if p == 0 else knots[p]
        hi = np.inf if p == P - 1 else knots[p + 1]
        # The part of [knots[0], z] (signed) that lies in piece p.
        if z >= knots[0]:
            length = max(0.0, min(z, hi) - max(knots[0], lo, knots[p]))
        else:
            length = -max(0.0, min(knots[0], hi) - max(z, lo)) if p == 0 else 0.0
        out += slopes[p] * length
    return out


def bumpy_data(n=120, seed=0):
    """Flat on the left, a fast oscillation on the right: a bandwidth should vary."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 3, n))
    y = np.where(x < 1.5, 0.0, np.sin(6 * x)) + 0.1 * rng.normal(size=n)
    return x[:, None], y


def test_warp_matches_its_integral_and_is_identity_at_unit_slopes():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(50, 2))
    knots = quantile_knots(Z, 5)
    log_slopes = rng.normal(size=(2, 5))
    queries = np.vstack([Z, [[-9.0, 7.0], [12.0, -4.0]]])  # outside the knots too
    warped = apply_warp(warp_basis(queries, knots), knots, log_slopes)
    for i, row in enumerate(queries):
        for j in range(2):
            expected = direct_warp(row[j], knots[j], np.exp(log_slopes[j]))
            assert warped[i, j] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    identity = apply_warp(warp_basis(queries, knots), knots, np.zeros((2, 5)))
    np.testing.assert_allclose(identity, queries, rtol=1e-13, atol=1e-13)


def test_warp_is_increasing():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(40, 1))
    knots = quantile_knots(Z, 6)
    grid = np.linspace(-5, 5, 400)[:, None]
    warped = apply_warp(warp_basis(grid, knots), knots, rng.normal(size=(1, 6)))
    assert np.all(np.diff(warped[:, 0]) > 0)


@pytest.mark.parametrize("similarity", ["gaussian", "dot", "cosine"])
@pytest.mark.parametrize("tie_qk", [True, False])
def test_objective_with_warp_is_the_objective_of_the_warped_inputs(similarity, tie_qk):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 3))
    X[4] = X[2]
    Y = rng.normal(size=(30, 2))
    sw = rng.uniform(0.5, 2.0, 30)
    Y -= np.average(Y, axis=0, weights=sw)
    knots = quantile_knots(X, 4)
    layout = Layout(2, 3, 2, 2, tie_qk, True, "convex", warp_pieces=4)
    args = (Y, sw, DuplicateGroups(X))
    warped = LeaveOneOutObjective(X, *args, layout, similarity, np.ones(2), 0.3, warp_knots=knots)
    theta = 0.5 * rng.normal(size=layout.size)
    log_slopes = layout.log_slopes(theta)
    # The same objective without a warp, on the warped inputs: equal up to the warp's
    # smoothness penalty.
    plain_layout = Layout(2, 3, 2, 2, tie_qk, True, "convex")
    plain = LeaveOneOutObjective(
        apply_warp(warp_basis(X, knots), knots, log_slopes),
        *args,
        plain_layout,
        similarity,
        np.ones(2),
        0.3,
    )
    plain_theta = theta[: plain_layout.size]
    roughness = 0.3 / sw.sum() * np.sum(np.diff(log_slopes, axis=1) ** 2)
    assert warped.loss(theta) == pytest.approx(plain.loss(plain_theta) + roughness, rel=1e-12)

    error = check_grad(warped.loss, lambda t: warped.loss_and_grad(t)[1], theta, epsilon=1e-7)
    assert error < 1e-5 * max(np.linalg.norm(warped.loss_and_grad(theta)[1]), 1.0)
    # Mini-batches against a key subset take the same gradient path.
    queries, keys = np.arange(0, 30, 3), np.arange(0, 30, 2)
    error = check_grad(
        lambda t: warped.loss(t, queries, keys),
        lambda t: warped.loss_and_grad(t, queries, keys)[1],
        theta,
        epsilon=1e-7,
    )
    assert error < 1e-5 * max(np.linalg.norm(warped.loss_and_grad(theta, queries, keys)[1]), 1)


def test_warped_model_stays_nadaraya_watson():
    X, y = bumpy_data()
    model = AttentionRegressor(warp=6, degree=0, random_state=0).fit(X, y)
    queries = np.linspace(-1, 4, 60)[:, None]
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    prediction = model.predict(queries)
    np.testing.assert_allclose(prediction, weights @ y, rtol=1e-9, atol=1e-12)
    assert np.all((prediction >= y.min()) & (prediction <= y.max()))
    assert model.warp_knots_.shape == (1, 7)
    assert model.warp_slopes_.shape == (1, 6)


def test_warp_learns_a_narrower_bandwidth_where_the_target_moves():
    X, y = bumpy_data(n=200)
    # Kept as trained, from the identity: the default start at the smoother's bandwidths
    # and its shrinkage would measure something else.
    trained = dict(init="identity", shrinkage=None, degree=0)
    model = AttentionRegressor(warp=6, tilt=False, random_state=0, **trained).fit(X, y)
    knots = model.warp_knots_[0] * model.input_scale_[0] + model.center_[0]
    middle = 0.5 * (knots[:-1] + knots[1:])
    slopes = model.warp_slopes_[0]
    # Steeper warp (narrower kernel) over the oscillation than over the flat part.
    assert slopes[middle > 1.8].min() > slopes[middle < 1.2].max()
    plain = AttentionRegressor(tilt=False, warp=0, random_state=0, **trained).fit(X, y)
    assert model.loss_curve_[-1] < plain.loss_curve_[-1]


def weighted_line_at(q, keys, y, w):
    """The weighted least-squares line of y on the keys, evaluated at q (brute force)."""
    design = np.hstack([np.ones((len(keys), 1)), keys - q])
    root = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(design * root[:, None], y * root, rcond=None)
    return coef[0]


@pytest.mark.parametrize("warp", [0, 4])
def test_degree_one_is_weighted_least_squares_at_the_query(warp):
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(80, 2))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=80)
    sw = rng.uniform(0.5, 2.0, 80)
    # From the identity, as trained; queries inside the data, where no line is held back.
    model = AttentionRegressor(
        degree=1, warp=warp, random_state=0, init="identity", shrinkage=None
    ).fit(X, y, sample_weight=sw)
    queries = rng.uniform(-1.5, 1.5, size=(7, 2))
    # The kernel as a formula: warped, standardized inputs, the head's projection and scale.
    W, s = model.query_projection_[0], model.scale_[0]

    def keys_of(A):
        U = (A - model.center_) / model.input_scale_
        if warp:
            knots, log_slopes = model.warp_knots_, np.log(model.warp_slopes_)
            U = apply_warp(warp_basis(U, knots), knots, log_slopes)
        return np.sqrt(s) * U @ W

    K, Q = keys_of(X), keys_of(queries)
    prediction, spread = model.predict(queries, return_std=True)
    for q, value, std in zip(Q, prediction, spread, strict=True):
        logits = -0.5 * np.sum((K - q) ** 2, axis=1) + np.log(sw)
        w = np.exp(logits - logits.max())
        w /= w.sum()
        expected = weighted_line_at(q, K, y, w)
        # Up to the solve's tiny ridge (1e-12 of the second moments).
        assert value == pytest.approx(expected, rel=1e-6, abs=1e-8)
        # The spread of the targets under the kernel weights, around the line's value.
        assert std == pytest.approx(np.sqrt(w @ (y - value) ** 2), rel=1e-6)
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-10)
    np.testing.assert_allclose(weights @ y, prediction, rtol=1e-9, atol=1e-10)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # short run
def test_degree_one_reproduces_a_linear_function():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 3))
    y = 2.0 * X[:, 0] - X[:, 1] + 0.5 * X[:, 2] + 3.0
    model = AttentionRegressor(degree=1, max_iter=20, random_state=0).fit(X, y)
    queries = rng.normal(size=(10, 3))
    expected = 2.0 * queries[:, 0] - queries[:, 1] + 0.5 * queries[:, 2] + 3.0
    np.testing.assert_allclose(model.predict(queries), expected, rtol=1e-7, atol=1e-7)


def test_degree_one_holds_far_queries_back_between_the_average_and_a_bounded_line():
    """The learned kernel's local lines are the smoother's local polynomials: far outside the
    data a query's line is held back toward the kernel average (its Σ l² at most 4), and
    predict says how many were; in sample nothing is held back."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, size=(120, 2))
    y = 2.0 * X[:, 0] + np.sin(3 * X[:, 1]) + 0.1 * rng.normal(size=120)
    model = AttentionRegressor(degree=1, warp=0, max_iter=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    assert 0.0 <= model.held_back_ < 0.2
    queries = np.array([[0.0, 0.0], [1.5, 0.0], [4.0, 4.0], [1e6, -1e6]])
    with pytest.warns(LocalDesignWarning, match="of 4 queries"):
        prediction = model.predict(queries)
    span = np.ptp(y)
    assert np.all(np.isfinite(prediction))
    assert np.all((prediction > y.min() - 2 * span) & (prediction < y.max() + 2 * span))
    weights = model.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-9)
    assert np.all((weights**2).sum(axis=1) <= 4.0 + 1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalDesignWarning)
        model.predict(X)


def test_leave_one_out_lines_leave_the_query_out():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(25, 2))
    X[3] = X[7]  # duplicates leave each other out
    Y = rng.normal(size=(25, 1))
    Y -= Y.mean()
    layout = Layout(1, 2, 2, 1, True, False)
    objective = LeaveOneOutObjective(
        X, Y, np.ones(25), DuplicateGroups(X), layout, "gaussian", np.array([0.7]), 0.0
    )
    theta = layout.pack(np.eye(2)[None], None, None, np.ones(1), np.zeros(1))
    log_factor = -0.3
    queries = np.arange(25)
    lines, _ = leave_one_out_lines(objective, theta, log_factor, queries)
    scale = 0.7 * np.exp(log_factor)
    for i in queries:
        others = np.flatnonzero(np.any(X != X[i], axis=1))
        w = np.exp(-0.5 * scale * np.sum((X[others] - X[i]) ** 2, axis=1))
        expected = weighted_line_at(X[i], X[others], Y[others, 0], w / w.sum())
        assert lines[i, 0] == pytest.approx(expected, rel=1e-8, abs=1e-10)


def test_tilts_along_one_direction_together_equal_each_alone():
    # One pass for several tilts (each head's kernel weights formed once) gives each tilt's
    # own leave-one-out estimates and mask; tuned together, every kind gets the width and
    # penalty it gets alone (the widths of each tilt tried until its own loss rises twice).
    rng = np.random.default_rng(8)
    X = rng.normal(size=(150, 3))
    X[5] = X[9]
    Y = (np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.3 * rng.normal(size=150))[:, None]
    Y -= Y.mean()
    layout = Layout(2, 3, 2, 1, True, False)
    objective = LeaveOneOutObjective(
        X, Y, np.ones(150), DuplicateGroups(X), layout, "gaussian", np.array([0.5, 1.5]), 0.0
    )
    projections = rng.normal(size=(2, 3, 2))
    theta = layout.pack(projections, None, None, np.array([0.6, 0.4]), np.zeros(1))
    queries = np.arange(150)
    tilts = [("slope", 1.0 / 16.0), ("trend", 1.0 / 16.0), ("trend", 1.0)]
    together, mask = leave_one_out_directions(objective, theta, -0.7, queries, tilts)
    for tilt, estimates in zip(tilts, together, strict=True):
        alone, alone_mask = leave_one_out_lines(objective, theta, -0.7, queries, tilt)
        np.testing.assert_array_equal(estimates, alone)
        np.testing.assert_array_equal(mask, alone_mask)
    assert not np.allclose(together[0], together[1])
    tuned = _tune_directions(objective, theta, 3, ["trend", "slope"])
    for kind in ("trend", "slope"):
        assert tuned[kind] == _tune_directions(objective, theta, 3, [kind])[kind]
    with pytest.raises(ValueError, match="along one direction only"):
        leave_one_out_directions(objective, theta, 0.0, queries, [("balance", 1.0)])


def test_widest_best_stops_each_candidate_after_two_rises():
    losses = {"a": [3.0, 2.0, 2.5, 2.6, 1.0, 0.5, 0.4], "b": [1.0, 2.0, 0.5, 0.7, 0.9, 0.1, 0.0]}
    asked = []

    def loss(x, candidates):
        j = int(np.argmin(np.abs(DIRECTION_WIDTHS - x)))
        asked.append((j, tuple(candidates)))
        return [losses[c][j] for c in candidates]

    best = _widest_best(loss, DIRECTION_WIDTHS, ["a", "b"])
    assert best["a"] == (DIRECTION_WIDTHS[1], 2.0)  # 2.5 then 2.6: stopped before 1.0
    assert best["b"] == (DIRECTION_WIDTHS[2], 0.5)  # 0.7 then 0.9: stopped before 0.1
    assert asked == [
        (0, ("a", "b")),
        (1, ("a", "b")),
        (2, ("a", "b")),
        (3, ("a", "b")),
        (4, ("b",)),
    ]
    nowhere = _widest_best(lambda x, c: [np.inf] * len(c), DIRECTION_WIDTHS, ["a"])
    assert nowhere["a"] == (0.0, np.inf)


@pytest.mark.parametrize(
    "options",
    [
        dict(warp=5),
        dict(degree=1),
        dict(degree=1, warp=5),
        dict(tilt=True),
        dict(tilt=True, warp=5),
    ],
)
def test_invariant_to_the_units_of_x_and_y(options):
    rng = np.random.default_rng(6)
    X = rng.uniform(0, 1, size=(70, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1] + 0.05 * rng.normal(size=70)
    queries = rng.uniform(0, 1, size=(9, 2))
    # A short training: the optimizer's path is the same up to rounding, which a long run
    # can amplify.
    # From the identity and without the shrinkage's inner validation (a bandwidth search
    # and three trainings, each another chance for rounding to change a discrete choice).
    params = dict(max_iter=30, random_state=0, init="identity", shrinkage=None, **options)
    params.setdefault("degree", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = AttentionRegressor(**params).fit(X, y)
        units = np.array([1e3, 1e-2])
        moved = AttentionRegressor(**params).fit(X * units + 5.0, 1e4 * y - 7.0)
    np.testing.assert_allclose(
        moved.predict(queries * units + 5.0), 1e4 * model.predict(queries) - 7.0, rtol=1e-6
    )


def test_degree_one_widens_the_kernel_and_fits_a_trend_better():
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 1, size=(150, 1))
    y = 3 * X[:, 0] + 0.1 * rng.normal(size=150)
    average = AttentionRegressor(degree=0, random_state=0).fit(X, y)
    line = AttentionRegressor(degree=1, random_state=0).fit(X, y)
    assert line.width_factor_ < 1.0
    # At the edges the kernel average is pulled inwards; the line is not.
    edges = np.array([[0.0], [1.0]])
    truth = 3 * edges[:, 0]
    assert np.all(np.abs(line.predict(edges) - truth) < np.abs(average.predict(edges) - truth))


def test_fitted_attributes_only_with_their_option():
    X, y = bumpy_data(n=40)
    plain = AttentionRegressor(
        tilt=False, warp=0, degree=0, init="identity", shrinkage=None, max_iter=5, random_state=0
    )
    with pytest.warns(Warning):
        plain.fit(X, y)
    for name in (
        "warp_knots_",
        "warp_slopes_",
        "width_factor_",
        "line_width_factor_",
        "tilt_penalty_",
    ):
        assert not hasattr(plain, name)
    assert plain.held_back_ == 0.0 and plain.line_share_ == 0.0
    # A refit without the options drops the attributes of a fit with them.
    plain.set_params(warp=3, degree=1, max_iter=200).fit(X, y)
    assert hasattr(plain, "warp_slopes_") and hasattr(plain, "width_factor_")
    plain.set_params(warp=0, degree=0).fit(X, y)
    assert not hasattr(plain, "warp_slopes_") and not hasattr(plain, "width_factor_")


@pytest.mark.parametrize("params", [dict(degree=2), dict(degree=-1), dict(warp=-1)])
def test_bad_degree_or_warp_is_rejected(params):
    X, y = bumpy_data(n=20)
    with pytest.raises(InvalidParameterError, match=next(iter(params))):
        AttentionRegressor(**params).fit(X, y)


def test_pruned_local_linear_heads_keep_their_lines():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(80, 2))
    y = X[:, 0] + np.sin(2 * X[:, 1])
    model = AttentionRegressor(degree=1, n_heads=2, random_state=0).fit(X, y)
    pruned = model.prune_heads([1])
    queries = rng.normal(size=(5, 2))
    np.testing.assert_allclose(
        pruned.predict(queries), pruned.attention_weights(queries) @ y, rtol=1e-7, atol=1e-9
    )


def four_inputs(seed=2, n=120):
    """Four standard normal inputs, two of them relevant, noisy: on seed 2 the inner
    validation gives the local line half of the estimate."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.5 * rng.normal(size=n)


def test_auto_degree_blends_the_constant_and_the_line_each_at_its_width():
    X, y = four_inputs()
    auto = AttentionRegressor(degree="auto", tilt=False, random_state=0).fit(X, y)
    assert auto.degree_ == 1 and auto.line_share_ == 0.5
    # The same kernel and widths as the constant and the line fitted alone (the random
    # draws before the choice are the same).
    constant = AttentionRegressor(degree=0, tilt=False, random_state=0).fit(X, y)
    line = AttentionRegressor(degree=1, random_state=0).fit(X, y)
    assert (constant.degree_, constant.line_share_, line.degree_, line.line_share_) == (
        0,
        0.0,
        1,
        1.0,
    )
    assert auto.line_width_factor_ == line.width_factor_ == line.line_width_factor_
    assert auto.width_factor_ == 1.0  # the constant's own width
    s = auto.line_share_
    queries = np.random.default_rng(3).normal(size=(30, 4)) * 1.5
    mean, std = auto.predict(queries, return_std=True)
    np.testing.assert_allclose(
        mean, (1 - s) * constant.predict(queries) + s * line.predict(queries), rtol=1e-10
    )
    # Its weights sum to 1 and reproduce it; the spread is the targets' around it under the
    # mixture of the constant's and the line's kernel weights (both non-negative).
    weights = auto.attention_weights(queries)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(weights @ y, mean, rtol=1e-9)
    keys = canonical_order(X, y[:, None], np.ones(len(y)))  # the order of the kernel's keys
    mixture = (1 - s) * constant.attention_weights(queries)[:, keys] + s * line.kernel_.weights(
        queries, 0
    )
    np.testing.assert_allclose(
        std, np.sqrt(np.sum(mixture * (y[keys] - mean[:, None]) ** 2, axis=1)), rtol=1e-9
    )
    # Bound to its keys: pickled, pruned and refitted warm, it predicts the same.
    restored = pickle.loads(pickle.dumps(auto))
    np.testing.assert_array_equal(restored.predict(queries), mean)
    np.testing.assert_allclose(auto.prune_heads([0], refit_mixture=False).predict(queries), mean)
    auto.set_params(warm_start=True, max_iter=0).fit(X, y + 10.0)
    assert auto.line_share_ == s
    np.testing.assert_allclose(auto.predict(queries), mean + 10.0, rtol=1e-10)


def test_a_blend_with_tilted_weights_mixes_the_tilted_constant_and_the_line():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(80, 2))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=80)
    auto = AttentionRegressor(degree="auto", tilt="balance", random_state=0).fit(X, y)
    # A blend: a share of the line strictly between the constant and the line alone.
    assert auto.tilt_ == "balance" and 0.0 < auto.line_share_ < 1.0
    constant = AttentionRegressor(degree=0, tilt="balance", random_state=0).fit(X, y)
    line = AttentionRegressor(degree=1, random_state=0).fit(X, y)
    assert constant.tilt_ and auto.tilt_penalty_ == constant.tilt_penalty_
    assert auto.width_factor_ == constant.width_factor_
    queries = rng.normal(size=(20, 2))
    s = auto.line_share_
    expected = (1 - s) * constant.predict(queries) + s * line.predict(queries)
    np.testing.assert_allclose(auto.predict(queries), expected, rtol=1e-9)
    np.testing.assert_allclose(auto.attention_weights(queries) @ y, expected, rtol=1e-9)


def test_warm_start_continues_from_the_warp_and_the_learned_width():
    X, y = bumpy_data(n=80)
    model = AttentionRegressor(warp=4, degree=1, random_state=0).fit(X, y)
    slopes, scale = model.warp_slopes_.copy(), model.scale_.copy()
    model.set_params(warm_start=True, max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    # One more iteration from where the last fit ended: the same warp and metric (up to
    # that step), and the same width for the lines.
    np.testing.assert_allclose(model.warp_slopes_, slopes, rtol=0.05)
    np.testing.assert_allclose(model.scale_, scale, rtol=0.05)


def test_the_width_of_the_lines_leaves_few_queries_without_a_line():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(60, 6))
    y = X[:, 0] + np.sin(2 * X[:, 1]) + 0.3 * rng.normal(size=60)
    model = AttentionRegressor(degree=1, random_state=0).fit(X, y)
    Z = (X - model.center_) / model.input_scale_
    layout = Layout(1, 6, 6, 1, True, False)
    objective = LeaveOneOutObjective(
        Z,
        (y - y.mean())[:, None],
        np.ones(60),
        DuplicateGroups(X),
        layout,
        "gaussian",
        model.scale_ / model.width_factor_,
        0.0,
    )
    theta = layout.pack(model.query_projection_, None, None, np.ones(1), np.zeros(1))
    queries = np.arange(60)
    _, fell_back = leave_one_out_lines(objective, theta, np.log(model.width_factor_), queries)
    assert fell_back.mean() <= 0.01
    # Much narrower, most queries would have lost their line.
    _, narrow = leave_one_out_lines(objective, theta, np.log(model.width_factor_) + 6, queries)
    assert narrow.mean() > 0.5


def test_width_search_breaks_rounding_ties_by_order():
    from kernattn.learned._local import _first_best

    # Losses equal up to rounding are tied: the first wins, in any units of the targets.
    losses = np.array([2.0, 1.0 + 1e-13, 1.0, 3.0])
    assert _first_best(losses) == 1
    assert _first_best(5.0 * losses) == _first_best(losses * (1 + 1e-15)) == 1
    assert _first_best([2.0, 1.0, 1.5]) == 1
    assert _first_best(np.array([[np.inf, 0.5], [0.25, 0.5]])) == 2
    assert _first_best([np.inf, np.inf]) == 0


def test_choose_tilt_takes_the_kind_of_the_lowest_leave_one_out_error(monkeypatch):
    """The kind whose weighted leave-one-out error is lowest, however noisy the paired
    differences (here within one standard error: a rule that keeps the first kind unless the
    other wins by one would keep the trend); the first kind on a tie; rows without an
    estimate under some kind left out."""
    import kernattn.learned._local as local

    class Objective:
        sw = np.array([1.0, 2.0, 1.0, 1.0, 1.0])

    errors = {
        "trend": np.array([1.0, 1.0, 1.0, 1.0, np.nan]),
        "slope": np.array([0.2, 1.3, 0.4, 1.1, 0.0]),
    }
    monkeypatch.setattr(
        local,
        "_tune_directions",
        lambda objective, theta, seed, kinds: {kind: (-0.5, 0.25) for kind in kinds},
    )
    monkeypatch.setattr(local, "_tuning_queries", lambda objective, rng, n: np.arange(5))
    monkeypatch.setattr(
        local,
        "held_out_errors",
        lambda objective, theta, queries, keys, degree, log_factor, tilt: errors[tilt[0]].copy(),
    )
    rng = np.random.RandomState(0)
    assert local.choose_tilt(Objective(), None, rng, ("trend", "slope")) == ("slope", -0.5, 0.25)
    errors["slope"] = errors["trend"].copy()
    assert local.choose_tilt(Objective(), None, rng, ("trend", "slope"))[0] == "trend"
