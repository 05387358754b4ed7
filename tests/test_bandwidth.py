"""Bandwidth selection: the leave-one-out objective, its gradient, and the bookkeeping of
left-out duplicates, against direct formulas; the messages of bad bandwidths."""

import itertools

import numpy as np
import pytest

from kernattn import KernelSmoother
from kernattn._core.loo import DuplicateGroups
from kernattn._local.polynomial import equivalent_weights
from kernattn.bandwidth import CRITERIA, resolve_bandwidth, select_bandwidth
from kernattn.bandwidth._criterion import Criterion
from kernattn.bandwidth._rules import check_bandwidth
from kernattn.bandwidth._search import MAX_DOF_SHARE
from kernattn.kernels import KERNELS

PROFILES = {
    "gaussian": lambda r2: np.exp(-0.5 * r2),
    "epanechnikov": lambda r2: np.clip(1 - r2, 0, None),
    "tricube": lambda r2: np.clip(1 - r2**1.5, 0, None) ** 3,
}


def make_problem(seed, n=40, d=3, duplicates=False, weighted=False):
    """Inputs in [-1, 1]^d, two target columns; with ``duplicates`` some rows repeated
    exactly (five rows twice, one four times), with ``weighted`` uneven sample weights."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    if duplicates:
        X[-6:] = X[:6]
        X[-8:-6] = X[0]
    Y = np.column_stack([np.sin(2 * X[:, 0]) + X[:, min(1, d - 1)], X[:, -1] ** 2 - X[:, 0]])
    Y += 0.1 * rng.normal(size=Y.shape)
    sample_weight = rng.uniform(0.2, 3.0, size=n) if weighted else np.ones(n)
    return X, Y, sample_weight


def bandwidths(kernel, seed, d=3):
    """Random bandwidths; the compact kernels' wide enough that every point has kept
    neighbors inside its support."""
    rng = np.random.default_rng(100 + seed)
    low, high = (0.2, 1.5) if kernel == "gaussian" else (1.0, 1.8)
    return rng.uniform(low, high, size=d)


def direct_loo_loss(X, Y, sample_weight, h, kernel):
    """Σ_i s_i ‖y_i − ŷ_{−i}‖² / Σ_i s_i, where ŷ_{−i} averages with s_j κ((x_i − x_j)/h)
    over every j whose input differs from x_i (its own row and its exact copies left out)."""
    r2 = (((X[:, None, :] - X[None, :, :]) / h) ** 2).sum(axis=-1)
    kernel_values = PROFILES[kernel](r2) * sample_weight[None, :]
    same_input = (X[:, None, :] == X[None, :, :]).all(axis=-1)
    kernel_values[same_input] = 0.0
    total = kernel_values.sum(axis=1)
    assert np.all(total > 0), "a point has no neighbor inside its kernel's support"
    residual = Y - kernel_values @ Y / total[:, None]
    return sample_weight @ (residual**2).sum(axis=1) / sample_weight.sum()


CASES = [
    pytest.param(dict(duplicates=False, weighted=False), id="plain"),
    pytest.param(dict(duplicates=False, weighted=True), id="weighted"),
    pytest.param(dict(duplicates=True, weighted=True), id="weighted-duplicates"),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_leave_one_out_loss_equals_the_direct_formula(kernel, case):
    X, Y, sample_weight = make_problem(1, **case)
    objective = Criterion(X, Y, sample_weight, kernel)
    for seed in range(3):
        h = bandwidths(kernel, seed)
        loss, _ = objective.loss_and_grad(np.log(h))
        expected = direct_loo_loss(X, Y, sample_weight, h, kernel)
        np.testing.assert_allclose(loss, expected, rtol=1e-10)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_a_row_far_from_every_other_keeps_its_nearest_neighbour(criterion):
    # Row 0 sits 60 bandwidths from the rest: its kernel sums, without the shift by the
    # nearest key, underflow (below e^-700), and are redone shifted.
    X, Y, sample_weight = make_problem(15, d=2, weighted=True)
    h = np.array([0.3, 0.4])
    X[0] = X[1] + [60 * 0.3, 0.0]
    objective = Criterion(X, Y, sample_weight, "gaussian", 0, criterion)
    value, grad = objective.loss_and_grad(np.log(h))
    # Directly, with each row's logits shifted by their maximum (the nearest kept key).
    r2 = (((X[:, None, :] - X[None, :, :]) / h) ** 2).sum(axis=-1)
    logits = -0.5 * r2 + np.log(sample_weight)
    if criterion == "loo":
        np.fill_diagonal(logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    # Row 0's unshifted kernel sums would underflow: its nearest key is beyond e^-700.
    assert 0.5 * np.sort(r2[0])[1] > 700
    if criterion == "loo":
        expected = sample_weight @ ((Y - weights @ Y) ** 2).sum(axis=1) / sample_weight.sum()
    else:  # (row 0 keeps its own weight)
        expected = direct_criterion(X, Y, sample_weight, h, "gaussian", 0, criterion)
    np.testing.assert_allclose(value, expected, rtol=1e-9)
    assert np.all(np.isfinite(grad))


def gradient_and_central_differences(objective, log_h, step):
    """The criterion's analytic gradient and its central differences, feature by feature."""
    _, grad = objective.loss_and_grad(log_h)
    numeric = np.empty_like(log_h)
    for f in range(len(log_h)):
        shift = np.zeros_like(log_h)
        shift[f] = step
        up = objective.loss_and_grad(log_h + shift)[0]
        down = objective.loss_and_grad(log_h - shift)[0]
        numeric[f] = (up - down) / (2 * step)
    return grad, numeric


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_leave_one_out_gradient_matches_central_differences(kernel, case):
    X, Y, sample_weight = make_problem(2, **case)
    objective = Criterion(X, Y, sample_weight, kernel)
    step = 1e-6
    for seed in range(3):
        log_h = np.log(bandwidths(kernel, seed))
        grad, numeric = gradient_and_central_differences(objective, log_h, step)
        assert np.abs(grad).max() > 1e-3  # a point where the loss is not flat
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def polynomial_design(U, degree):
    """Every monomial of the columns of ``U`` of total degree at most ``degree``."""
    columns = [np.ones(len(U))]
    for total in range(1, degree + 1):
        for combination in itertools.combinations_with_replacement(range(U.shape[1]), total):
            columns.append(np.prod(U[:, list(combination)], axis=1))
    return np.column_stack(columns)


def direct_smoother_matrix(X, sample_weight, h, kernel, degree, leave_out=False, line=None):
    """S[i, j]: the weight of y_j in the estimate at x_i, by weighted least squares at every
    query (a polynomial of ``degree`` in the inputs ``line``, default all); with
    ``leave_out`` row i and its exact copies get no weight (the leave-one-out estimate)."""
    n, d = X.shape
    line = np.arange(d) if line is None else line
    S = np.zeros((n, n))
    for i in range(n):
        w = PROFILES[kernel]((((X[i] - X) / h) ** 2).sum(axis=1)) * sample_weight
        if leave_out:
            w[(X == X[i]).all(axis=1)] = 0.0
        design = polynomial_design((X[:, line] - X[i, line]) / h[line], degree)
        M = design.T @ (w[:, None] * design)
        S[i] = np.linalg.solve(M, design.T * w)[0]
    return S


def direct_criterion(X, Y, sample_weight, h, kernel, degree, criterion, line=None):
    """The criterion from the smoother matrix: LOO error, GCV or AICc."""
    S = direct_smoother_matrix(
        X, sample_weight, h, kernel, degree, leave_out=criterion == "loo", line=line
    )
    residual = Y - S @ Y
    sigma2 = sample_weight @ (residual**2).sum(axis=1) / sample_weight.sum()
    if criterion == "loo":
        return sigma2
    n, trace = sample_weight.sum(), np.trace(S)
    if criterion == "gcv":
        return sigma2 / (1 - trace / n) ** 2
    return np.log(sigma2) + (1 + trace / n) / (1 - (trace + 2) / n)


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("degree", [0, 1])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_criterion_of_both_degrees_equals_the_direct_formula(
    kernel, case, degree, criterion
):
    X, Y, sample_weight = make_problem(11, **case)
    objective = Criterion(X, Y, sample_weight, kernel, degree, criterion)
    for seed in range(2):
        h = bandwidths(kernel, seed) * (1.5 if degree else 1.0)
        value, _ = objective.loss_and_grad(np.log(h))
        expected = direct_criterion(X, Y, sample_weight, h, kernel, degree, criterion)
        np.testing.assert_allclose(value, expected, rtol=1e-9)


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("degree", [0, 1])
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_criterion_gradient_matches_central_differences(kernel, degree, criterion):
    X, Y, sample_weight = make_problem(12, duplicates=True, weighted=True)
    objective = Criterion(X, Y, sample_weight, kernel, degree, criterion)
    step = 1e-6
    log_h = np.log(bandwidths(kernel, 2) * (1.5 if degree else 1.0))
    grad, numeric = gradient_and_central_differences(objective, log_h, step)
    assert np.abs(grad).max() > 1e-3
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_a_line_in_some_columns_gives_the_criterion_and_gradient_of_that_fit(criterion):
    # The local line in the first column only (as for a continuous feature next to the
    # encoded columns of a discrete one); the kernel still uses every column.
    X, Y, sample_weight = make_problem(14, d=3, duplicates=True, weighted=True)
    objective = Criterion(X, Y, sample_weight, "gaussian", 1, criterion, line=[0])
    h = bandwidths("gaussian", 1) * 1.5
    value, _ = objective.loss_and_grad(np.log(h))
    expected = direct_criterion(X, Y, sample_weight, h, "gaussian", 1, criterion, line=[0])
    np.testing.assert_allclose(value, expected, rtol=1e-9)
    grad, numeric = gradient_and_central_differences(objective, np.log(h), 1e-6)
    assert np.abs(grad).max() > 1e-3
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


HIGHER_DEGREES = [
    pytest.param(1, 2, np.array([0.7]), id="1d-quadratic"),
    pytest.param(1, 3, np.array([0.5]), id="1d-cubic"),
    pytest.param(2, 2, np.array([0.9, 1.1]), id="2d-quadratic"),
]


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("d, degree, h", HIGHER_DEGREES)
def test_criteria_of_local_polynomials_equal_the_direct_formula(d, degree, h, criterion):
    # Leave-one-out against the fit without each row (and its copies), by weighted least
    # squares row by row; AICc and GCV from the direct smoother matrix. Wide enough
    # bandwidths that no row is held back: then the fit is the plain local polynomial.
    X, Y, sample_weight = make_problem(21, n=45, d=d, duplicates=True, weighted=True)
    objective = Criterion(X, Y, sample_weight, "gaussian", degree, criterion)
    value, _ = objective.loss_and_grad(np.log(h))
    expected = direct_criterion(X, Y, sample_weight, h, "gaussian", degree, criterion)
    np.testing.assert_allclose(value, expected, rtol=1e-8)


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("d, degree, h", HIGHER_DEGREES)
def test_criteria_of_local_polynomials_have_their_analytic_gradient(d, degree, h, criterion):
    X, Y, sample_weight = make_problem(22, n=45, d=d, duplicates=True, weighted=True)
    objective = Criterion(X, Y, sample_weight, "gaussian", degree, criterion)
    grad, numeric = gradient_and_central_differences(objective, np.log(h), 1e-6)
    assert np.abs(grad).max() > 1e-3
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_rows_held_back_in_leave_one_out_enter_the_criterion_and_its_gradient():
    """At a small bandwidth some rows' leave-one-out lines are held back: the criterion is
    the held-back estimator's (its equivalent weights row by row), and the gradient, whose
    share of those rows is a central difference, still matches the criterion's."""
    X, Y, sample_weight = make_problem(23, n=60, d=2)
    h = np.array([0.1, 0.12])
    objective = Criterion(X, Y, sample_weight, "gaussian", 1, "loo")
    K = objective.X / h
    weights = np.exp(-0.5 * ((K[:, None, :] - K[None, :, :]) ** 2).sum(axis=-1))
    np.fill_diagonal(weights, 0.0)
    L, held_back = equivalent_weights(weights, K, K, 1)
    assert 0 < held_back.sum() < 0.3 * len(X)
    residual = objective.Y - L @ objective.Y
    expected = np.mean((residual**2).sum(axis=1)) * objective.y_scale**2
    value, _ = objective.loss_and_grad(np.log(h))
    np.testing.assert_allclose(value, expected, rtol=1e-7)
    # A step of 1e-4: at 1e-5 the criterion's rounding (its held-back rows are solved
    # anew at each point) reaches 1e-3 of the difference on some BLAS builds.
    grad, numeric = gradient_and_central_differences(objective, np.log(h), 1e-4)
    np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-6)


def test_local_linear_leave_one_out_residual_is_the_deleted_residual_identity():
    # For a linear smoother, y_i − ŷ_{−i} = (y_i − ŷ_i) / (1 − S_ii).
    X, Y, sample_weight = make_problem(13, n=50, d=2)
    h = np.array([0.6, 0.8])
    S = direct_smoother_matrix(X, sample_weight, h, "gaussian", 1)
    deleted = (Y - S @ Y) / (1 - np.diag(S))[:, None]
    objective = Criterion(X, Y, sample_weight, "gaussian", 1, "loo")
    np.testing.assert_allclose(
        objective.loss_and_grad(np.log(h))[0], np.mean((deleted**2).sum(axis=1)), rtol=1e-9
    )


def test_effective_dof_is_the_trace_of_the_smoother_matrix():
    X, Y, sample_weight = make_problem(14, weighted=True)
    h = bandwidths("gaussian", 0)
    for degree in (0, 1):
        objective = Criterion(X, Y, sample_weight, "gaussian", degree, "loo")
        S = direct_smoother_matrix(X, sample_weight, h, "gaussian", degree)
        np.testing.assert_allclose(objective.effective_dof(np.log(h)), np.trace(S), rtol=1e-9)


@pytest.mark.parametrize("h", [[0.6, 0.8], [0.1, 0.12]], ids=["supported", "held-back"])
def test_effective_dof_gradient_matches_central_differences(h):
    # (At the smaller bandwidths some rows are held back: their share of the gradient is a
    # central difference of their own weights.)
    X, Y, sample_weight = make_problem(23, n=60, d=2)
    objective = Criterion(X, Y, sample_weight, "gaussian", 1, "loo")
    log_h = np.log(h)
    trace, grad = objective.effective_dof_and_grad(log_h)
    assert trace == pytest.approx(objective.effective_dof(log_h), rel=1e-12)
    step = 1e-5
    numeric = [
        (objective.effective_dof(log_h + step * e) - objective.effective_dof(log_h - step * e))
        / (2 * step)
        for e in np.eye(2)
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-6)


def integer_levels_problem():
    """60 rows of 3 features taking the values 0 to 5, a smooth target and noise (sd 0.3):
    the local line's leave-one-out criterion has its lowest point at bandwidths below the
    spacing of the values (about 0.02, against Scott's 1.3), where 9 rows in 10 are held
    back and tr(S) is 0.9 n."""
    rng = np.random.default_rng(1)
    X = rng.integers(0, 6, size=(60, 3)).astype(float)
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=60)
    return X, y, rng


def test_local_line_selection_keeps_half_the_degrees_of_freedom_for_the_error():
    X, y, rng = integer_levels_problem()
    n = len(X)
    for criterion in CRITERIA:
        selection = select_bandwidth(X, y, criterion=criterion, degree=1)
        assert selection.effective_dof <= MAX_DOF_SHARE * n * (1 + 1e-9)
    # The near-interpolating bandwidths predict new inputs of the same levels worse than
    # the local constant; within the limit the line is well ahead of it.
    line = KernelSmoother(bandwidth="loo", degree=1).fit(X, y)
    constant = KernelSmoother(bandwidth="loo").fit(X, y)
    assert line.effective_dof_ <= MAX_DOF_SHARE * n * (1 + 1e-9)
    assert line.held_back_ < 0.1
    new = rng.integers(0, 6, size=(2000, 3)).astype(float)
    truth = np.sin(new[:, 0]) + 0.5 * new[:, 1]
    line_error = np.mean((line.predict(new) - truth) ** 2)
    constant_error = np.mean((constant.predict(new) - truth) ** 2)
    assert line_error < 0.5 * constant_error


def test_dof_limit_leaves_selections_within_it_unchanged():
    # The local constant has no limit; a local line whose search ends within it is the
    # criterion's own minimum (R np's cv.ls bandwidths, pinned in test_smoother, are such).
    X, Y, _ = make_problem(0, n=40, d=3)
    constant = select_bandwidth(X, Y, degree=0)
    assert constant.effective_dof > MAX_DOF_SHARE * len(X)
    X, Y, _ = make_problem(3, n=80, d=2)
    selection = select_bandwidth(X, Y, degree=1)
    assert selection.effective_dof < MAX_DOF_SHARE * len(X)
    objective = Criterion(X, Y, np.ones(len(X)), "gaussian", 1, "loo")
    _, grad = objective.scaled_loss_and_grad(np.log(selection.bandwidth))
    inside = ~(selection.lower_edge | selection.upper_edge)
    assert np.abs(grad[inside]).max() < 1e-4


@pytest.mark.parametrize("criterion", CRITERIA)
def test_subset_estimates_of_the_sums_are_unbiased(criterion):
    X, Y, sample_weight = make_problem(15, n=60)
    objective = Criterion(X, Y, sample_weight, "gaussian", 1, criterion)
    log_h = np.log(bandwidths("gaussian", 0) * 1.5)
    full = objective._statistics(log_h, None)
    # Averaged over a partition of the queries into equal subsets, the scaled sums are the
    # full sums: each subset's estimate is unbiased under a uniformly drawn subset.
    parts = np.random.default_rng(0).permutation(60).reshape(4, 15)
    estimates = [objective._statistics(log_h, np.sort(rows)) for rows in parts]
    for k in range(4):
        np.testing.assert_allclose(
            np.mean([e[k] for e in estimates], axis=0), full[k], rtol=1e-10, atol=1e-12
        )


@pytest.mark.parametrize("kernel", KERNELS)
def test_grid_losses_equal_the_loss_at_each_multiple(kernel):
    X, Y, sample_weight = make_problem(3, duplicates=True, weighted=True)
    objective = Criterion(X, Y, sample_weight, kernel)
    h = bandwidths(kernel, 0)
    factors = np.array([1.0, 1.3, 2.0, 5.0]) if kernel != "gaussian" else np.geomspace(0.1, 10, 5)
    losses = objective.grid_losses(h, factors)
    expected = [objective.loss_and_grad(np.log(h * c))[0] for c in factors]
    np.testing.assert_allclose(losses, expected, rtol=1e-10)


@pytest.mark.parametrize("kernel", KERNELS)
def test_repeated_rows_act_like_integer_sample_weights_in_the_objective(kernel):
    X, Y, _ = make_problem(4, n=30)
    counts = np.random.default_rng(4).integers(1, 4, size=len(X))
    repeated = np.repeat(np.arange(len(X)), counts)
    weighted = Criterion(X, Y, counts.astype(float), kernel)
    plain = Criterion(X[repeated], Y[repeated], np.ones(len(repeated)), kernel)
    log_h = np.log(bandwidths(kernel, 1))
    pairs = zip(weighted.loss_and_grad(log_h), plain.loss_and_grad(log_h), strict=True)
    for got, expected in pairs:
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------ bad bandwidths


@pytest.mark.parametrize(
    "bandwidth",
    [0.0, -1.0, np.nan, np.inf, "nope", None, True, [1.0, 2.0], [1.0, -1.0, 1.0], [[1.0] * 3]],
)
def test_check_bandwidth_names_the_parameter_and_lists_the_options(bandwidth):
    with pytest.raises(ValueError, match=r"bandwidth must be .*'scott', 'silverman', 'loo'; got"):
        check_bandwidth(bandwidth, 3)


def test_check_bandwidth_of_the_wrong_length_says_how_many_features_x_has():
    with pytest.raises(ValueError, match=r"shape \(2,\), but X has 3 features"):
        check_bandwidth([1.0, 2.0], 3)


def test_check_bandwidth_gives_one_bandwidth_per_feature():
    np.testing.assert_array_equal(check_bandwidth(0.5, 3), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(check_bandwidth(np.float32(2.0), 2), [2.0, 2.0])
    np.testing.assert_array_equal(check_bandwidth([1, 2, 3], 3), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("bandwidth", ["nope", "SCOTT"])
def test_resolve_bandwidth_names_the_parameter_for_an_unknown_rule(bandwidth):
    X, Y, sample_weight = make_problem(5)
    with pytest.raises(ValueError, match=r"bandwidth must be .*'loo'; got"):
        resolve_bandwidth(bandwidth, X, Y, sample_weight)


@pytest.mark.parametrize("bandwidth", [-2.0, [1.0, 2.0]])
def test_resolve_bandwidth_names_the_parameter_for_bad_values(bandwidth):
    X, Y, sample_weight = make_problem(5)
    with pytest.raises(ValueError, match=r"bandwidth must be .*'loo'; got"):
        resolve_bandwidth(bandwidth, X, Y, sample_weight)


def test_resolve_bandwidth_loo_reports_the_loss_it_reached():
    X, Y, sample_weight = make_problem(6, n=60, d=2, weighted=True)
    h, loss = resolve_bandwidth("loo", X, Y, sample_weight)
    np.testing.assert_allclose(loss, direct_loo_loss(X, Y, sample_weight, h, "gaussian"))
    assert resolve_bandwidth(0.5, X, Y, sample_weight)[1] is None
    assert resolve_bandwidth("scott", X, Y, sample_weight)[1] is None


# ------------------------------------------------------ leaving duplicates out


@pytest.fixture
def groups_problem():
    rng = np.random.default_rng(7)
    X = rng.integers(0, 3, size=(30, 2)).astype(float)  # many exact duplicates
    X[:4] = rng.uniform(5, 6, size=(4, 2))  # and some rows alone in their group
    return X, DuplicateGroups(X)


def dense_leave_out(X, block, rows, keys, value):
    """The block with ``value`` wherever query ``rows[i]`` and key ``keys[j]`` are equal."""
    out = block.copy()
    same = (X[rows][:, None, :] == X[keys][None, :, :]).all(axis=-1)
    out[same] = value
    return out


@pytest.mark.parametrize(
    "rows, keys",
    [
        (slice(0, 30), None),
        (slice(5, 17), None),
        (slice(29, 30), None),
        (slice(7, 7), None),
        (np.array([3, 29, 0, 11, 11]), None),
        (slice(2, 12), np.array([29, 1, 5, 8, 8, 17])),
        (np.array([0, 13, 21]), np.arange(30)[::-2]),
    ],
    ids=["all", "slice", "last-row", "empty", "rows", "slice-keys", "rows-keys"],
)
@pytest.mark.parametrize("value", [-np.inf, np.inf])
def test_leave_out_marks_exactly_the_pairs_with_identical_inputs(
    groups_problem, rows, keys, value
):
    X, groups = groups_problem
    rng = np.random.default_rng(8)
    all_keys = np.arange(len(X)) if keys is None else keys
    n_rows = len(np.arange(len(X))[rows])
    block = rng.normal(size=(n_rows, len(all_keys)))
    expected = dense_leave_out(X, block, rows, all_keys, value)
    result = groups.leave_out(block.copy(), rows, keys, value=value)
    np.testing.assert_array_equal(result, expected)


def test_duplicate_group_ids_number_the_distinct_inputs(groups_problem):
    X, groups = groups_problem
    same_input = (X[:, None, :] == X[None, :, :]).all(axis=-1)
    np.testing.assert_array_equal(groups.ids[:, None] == groups.ids[None, :], same_input)
    assert groups.n_groups == len(np.unique(X, axis=0))
    np.testing.assert_array_equal(np.unique(groups.ids), np.arange(groups.n_groups))


@pytest.mark.parametrize("shape", [(), (3,)])
def test_own_sums_equal_a_direct_loop_over_each_rows_group(groups_problem, shape):
    X, groups = groups_problem
    rng = np.random.default_rng(9)
    sample_weight = rng.uniform(0.1, 2.0, size=len(X))
    values = rng.normal(size=(len(X),) + shape)
    weight, sums = groups.own_sums(sample_weight, values)
    for i in range(len(X)):
        group = [j for j in range(len(X)) if np.array_equal(X[j], X[i])]
        np.testing.assert_allclose(weight[i], sample_weight[group].sum(), rtol=1e-13)
        expected = sum(sample_weight[j] * values[j] for j in group)
        np.testing.assert_allclose(sums[i], expected, rtol=1e-12, atol=1e-15)


def test_valid_queries_are_those_with_a_key_outside_their_group(groups_problem):
    X, groups = groups_problem
    keys = np.array([4, 5, 6, 7])
    queries = np.arange(len(X))
    expected = [i for i in queries if any(not np.array_equal(X[i], X[j]) for j in keys)]
    np.testing.assert_array_equal(groups.valid_queries(queries, keys), expected)


# ------------------------------------------------- the weights' scale in the search


@pytest.mark.parametrize("algorithm", ["exact", "binned"])
@pytest.mark.parametrize("exponent", [-1000, -300, -3, 3, 300, 1000])
def test_leave_one_out_bandwidth_ignores_the_scale_of_the_weights(algorithm, exponent):
    # Leave-one-out predictions are ratios of weighted sums: weights of 2^±1000 give the
    # bandwidth of unit weights (the search starts from the rows' count, not the weights').
    rng = np.random.default_rng(7)
    x = rng.uniform(size=(400, 1))
    y = np.sin(6 * x[:, 0]) + 0.3 * rng.normal(size=400)
    weights = rng.uniform(0.5, 2.0, size=400)
    plain = KernelSmoother(bandwidth="loo", algorithm=algorithm).fit(x, y, sample_weight=weights)
    scaled = KernelSmoother(bandwidth="loo", algorithm=algorithm).fit(
        x, y, sample_weight=np.ldexp(weights, exponent)
    )
    np.testing.assert_allclose(scaled.bandwidth_, plain.bandwidth_, rtol=1e-6)
    np.testing.assert_allclose(scaled.predict(x[:20]), plain.predict(x[:20]), rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["exact", "binned"])
@pytest.mark.parametrize("criterion", ["aic", "gcv"])
def test_penalized_criteria_refuse_weights_that_count_too_few_observations(algorithm, criterion):
    x = np.linspace(0, 1, 200)[:, None]
    y = np.sin(6 * x[:, 0])
    model = KernelSmoother(bandwidth=criterion, algorithm=algorithm)
    with pytest.raises(ValueError, match=r"counts the sample weights as observations.*sum to 2e-"):
        model.fit(x, y, sample_weight=np.full(200, 1e-300))


@pytest.mark.parametrize("criterion", ["aic", "gcv"])
def test_binned_penalties_count_equal_weights_as_observations_like_the_exact_ones(criterion):
    # Weights of 0.1 on every row are a tenth of the observations: a larger penalty and a
    # larger bandwidth, on both tiers alike.
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(3000, 1))
    y = np.sin(6 * x[:, 0]) + 0.3 * rng.normal(size=3000)
    tenth = np.full(3000, 0.1)
    fits = {
        algorithm: [
            KernelSmoother(bandwidth=criterion, algorithm=algorithm).fit(x, y, sample_weight=w)
            for w in (None, tenth)
        ]
        for algorithm in ("exact", "binned")
    }
    for plain, tenth_fit in fits.values():
        assert tenth_fit.bandwidth_[0] > 1.5 * plain.bandwidth_[0]
    np.testing.assert_allclose(
        fits["binned"][1].bandwidth_, fits["exact"][1].bandwidth_, rtol=0.02
    )


def test_a_looser_search_tolerance_stops_sooner_near_the_same_minimum():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=300)
    evaluations = []

    def counted(tol):
        original = Criterion.scaled_loss_and_grad

        def count(self, *args, **kwargs):
            evaluations[-1] += 1
            return original(self, *args, **kwargs)

        evaluations.append(0)
        Criterion.scaled_loss_and_grad = count
        try:
            return select_bandwidth(X, y, tol=tol)
        finally:
            Criterion.scaled_loss_and_grad = original

    tight, loose = counted(1e-9), counted(1e-4)
    assert evaluations[1] < evaluations[0]
    # The criterion (the leave-one-out MSE) at the looser end is barely above the minimum.
    assert tight.value <= loose.value <= tight.value * (1 + 1e-3)


@pytest.mark.parametrize("tol", [0.0, -1e-6, 1.0, np.nan, "1e-6"])
def test_search_tolerance_outside_zero_one_is_refused(tol):
    X = np.linspace(0, 1, 20)[:, None]
    with pytest.raises(ValueError, match="tol must be a number in"):
        select_bandwidth(X, X[:, 0], tol=tol)


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("degree", [2, 3])
def test_criteria_of_local_polynomials_on_data_many_bandwidths_wide(degree, criterion):
    # 50 bandwidths of data: at its ends the rows' local means lie 25 bandwidths from the
    # training center, where monomials of the keys about it keep too few digits for a
    # local cubic (each query's are taken about a point near it, as the estimator does).
    rng = np.random.default_rng(5)
    X = np.sort(rng.uniform(size=(600, 1)), axis=0)
    Y = np.sin(2 * np.pi * X) + 0.2 * rng.normal(size=(600, 1))
    sample_weight = np.ones(600)
    h = np.array([1 / 50])
    objective = Criterion(X, Y, sample_weight, "gaussian", degree, criterion)
    value, _ = objective.loss_and_grad(np.log(h))
    expected = direct_criterion(X, Y, sample_weight, h, "gaussian", degree, criterion)
    np.testing.assert_allclose(value, expected, rtol=1e-9)
    grad, numeric = gradient_and_central_differences(objective, np.log(h), 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)
