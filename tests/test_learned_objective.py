"""The leave-one-out objective of AttentionRegressor: value against a direct loop, gradient
against finite differences, blocking and threads, weights and key subsets."""

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn import config_context

from kernattn._core.loo import DuplicateGroups
from kernattn.learned._objective import Layout, LeaveOneOutObjective


def _similarity(q, k, similarity):
    if similarity == "dot":
        return q @ k
    if similarity == "cosine":
        return q @ k / np.sqrt((q @ q + 1e-12) * (k @ k + 1e-12))
    return -0.5 * np.sum((q - k) ** 2)


def off_diagonal(W):
    """Σ_h Σ_{a≠b} W_h[a, b]²: the penalized entries."""
    return sum(np.sum(w**2) - np.sum(np.diagonal(w) ** 2) for w in W)


def reference_loss(Z, Y, sw, Wq, Wk, scale, a, b, similarity, alpha, leave_one_out=True):
    """The objective written as a loop over queries, keys and heads."""
    n = len(Z)
    total, data = 0.0, 0.0
    for i in range(n):
        keys = [j for j in range(n) if not (leave_one_out and np.array_equal(Z[j], Z[i]))]
        if not keys:
            continue
        estimate = b.copy()
        for h in range(len(scale)):
            q = Z[i] @ Wq[h]
            logits = np.array(
                [scale[h] * _similarity(q, Z[j] @ Wk[h], similarity) + np.log(sw[j]) for j in keys]
            )
            w = np.exp(logits - logits.max())
            w /= w.sum()
            estimate = estimate + a[h] * (w @ Y[keys])
        data += sw[i] * np.sum((estimate - Y[i]) ** 2)
        total += sw[i]
    variance = np.sum(sw @ Y**2) / sw.sum()
    penalty = alpha / sw.sum() * (off_diagonal(Wq) + (0 if Wk is Wq else off_diagonal(Wk)))
    return data / (variance * total) + penalty


def make_problem(
    similarity,
    tie_qk,
    learn_scale,
    n=24,
    d=3,
    head_dim=2,
    n_heads=2,
    seed=0,
    mixture="convex",
    leave_one_out=True,
):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[5] = X[3]  # a duplicate pair: both must be left out of each other's estimate
    X[7] = X[3]
    Y = rng.normal(size=(n, 2))
    sw = rng.uniform(0.5, 2.0, n)
    Y -= np.average(Y, axis=0, weights=sw)
    layout = Layout(n_heads, d, head_dim, 2, tie_qk, learn_scale, mixture)
    scale = np.array([1 / 1.3, 1 / 0.7])[:n_heads]
    objective = LeaveOneOutObjective(
        X,
        Y,
        sw,
        DuplicateGroups(X),
        layout,
        similarity,
        scale,
        alpha=0.3,
        leave_one_out=leave_one_out,
    )
    theta = 0.6 * rng.normal(size=layout.size)
    return objective, theta, X, Y, sw, layout, scale


@pytest.mark.parametrize("similarity", ["dot", "cosine", "gaussian"])
@pytest.mark.parametrize("tie_qk", [False, True])
@pytest.mark.parametrize("learn_scale", [False, True])
def test_loss_matches_direct_loop(similarity, tie_qk, learn_scale):
    objective, theta, X, Y, sw, layout, scale = make_problem(similarity, tie_qk, learn_scale)
    Wq, Wk, log_scale, a, b = layout.unpack(theta)
    scales = np.exp(log_scale) if learn_scale else scale
    expected = reference_loss(X, Y, sw, Wq, Wk, scales, a, b, similarity, 0.3)
    assert objective.loss(theta) == pytest.approx(expected, rel=1e-10)


def assert_gradient_matches_finite_differences(objective, theta):
    """scipy's check_grad of the objective at theta, relative to the gradient's norm."""

    def loss(t):
        return objective.loss_and_grad(t)[0]

    def grad(t):
        return objective.loss_and_grad(t)[1]

    error = check_grad(loss, grad, theta, epsilon=1e-7)
    assert error < 1e-5 * max(np.linalg.norm(grad(theta)), 1.0)


# Every scale option: a fixed multiplier (None / 1.0 / a float differ only in its value) or
# learned.
@pytest.mark.parametrize("similarity", ["dot", "cosine", "gaussian"])
@pytest.mark.parametrize("tie_qk", [False, True])
@pytest.mark.parametrize("scale", [None, 1.0, 1 / np.sqrt(2.0), 1 / 0.37])
def test_gradient_matches_finite_differences(similarity, tie_qk, scale):
    learn_scale = scale is None
    objective, theta, *_ = make_problem(similarity, tie_qk, learn_scale)
    if not learn_scale:
        objective.scale = np.full(2, scale)
    assert_gradient_matches_finite_differences(objective, theta)


def test_blocked_computation_matches_one_block():
    objective, theta, *_ = make_problem("gaussian", False, True, n=60)
    loss, grad = objective.loss_and_grad(theta)
    with config_context(working_memory=1e-4):  # a handful of queries per block
        small_loss, small_grad = objective.loss_and_grad(theta)
    assert small_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(small_grad, grad, rtol=1e-10, atol=1e-14)


def test_integer_weights_equal_repeated_rows():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 3))
    Y = rng.normal(size=(12, 1))
    counts = rng.integers(1, 4, size=12)
    layout = Layout(1, 3, 2, 1, False, False)
    theta = rng.normal(size=layout.size)

    def build(X, Y, sw):
        Yc = Y - np.average(Y, axis=0, weights=sw)
        return LeaveOneOutObjective(
            X, Yc, sw, DuplicateGroups(X), layout, "dot", np.ones(1), alpha=0.5
        )

    weighted = build(X, Y, counts.astype(float)).loss_and_grad(theta)
    Xr, Yr = np.repeat(X, counts, axis=0), np.repeat(Y, counts, axis=0)
    repeated = build(Xr, Yr, np.ones(len(Xr))).loss_and_grad(theta)
    assert weighted[0] == pytest.approx(repeated[0], rel=1e-12)
    np.testing.assert_allclose(weighted[1], repeated[1], rtol=1e-10, atol=1e-14)


def test_key_subset_and_query_subset_match_direct_loop():
    objective, theta, X, Y, sw, layout, scale = make_problem("dot", False, False)
    queries = np.array([0, 3, 4, 9])
    keys = np.array([1, 2, 5, 7, 9, 10, 11])  # 3's duplicates 5, 7 are keys; 9 its own key
    Wq, Wk, _, a, b = layout.unpack(theta)
    value = objective.loss(theta, queries, keys)
    # Direct: restrict the loop to the chosen queries and keys.
    data, total = 0.0, 0.0
    for i in queries:
        allowed = [j for j in keys if not np.array_equal(X[j], X[i])]
        estimate = b.copy()
        for h in range(2):
            logits = np.array([scale[h] * (X[i] @ Wq[h]) @ (X[j] @ Wk[h]) for j in allowed])
            logits += np.log(sw[allowed] / sw.max())
            w = np.exp(logits - logits.max())
            estimate = estimate + a[h] * (w / w.sum()) @ Y[allowed]
        data += sw[i] * np.sum((estimate - Y[i]) ** 2)
        total += sw[i]
    penalty = objective.alpha * (off_diagonal(Wq) + off_diagonal(Wk))
    expected = data / (objective.variance * total) + penalty
    assert value == pytest.approx(expected, rel=1e-10)


def test_query_without_other_keys_is_left_out_not_nan():
    objective, theta, *_ = make_problem("gaussian", True, False)
    keys = np.array([3, 5, 7])  # all duplicates of one input
    loss, grad = objective.loss_and_grad(theta, np.array([3, 5]), keys)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    Wq = objective.layout.unpack(theta)[0]
    assert loss == pytest.approx(objective.alpha * off_diagonal(Wq))


def test_threads_match_one_thread():
    # Enough query-key pairs for threads; blocks are summed in order, so only the block
    # sizes (which depend on the number of threads sharing the working memory) differ.
    objective, theta, *_ = make_problem("cosine", False, True, n=1030)
    with config_context(working_memory=2):
        objective.n_jobs = 1
        loss, grad = objective.loss_and_grad(theta)
        objective.n_jobs = 2
        threaded_loss, threaded_grad = objective.loss_and_grad(theta)
        again = objective.loss_and_grad(theta)
    assert threaded_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(threaded_grad, grad, rtol=1e-10, atol=1e-14)
    # Threads finish in any order; the result does not depend on it.
    assert again[0] == threaded_loss
    np.testing.assert_array_equal(again[1], threaded_grad)


def test_subset_queries_and_keys_match_restricted_problem():
    # Queries and keys given as row indices (early stopping, Adam's batches) against the
    # same problem built on those rows only.
    objective, theta, X, Y, sw, layout, scale = make_problem("gaussian", False, True, n=40)
    rows = np.array([0, 2, 3, 5, 6, 7, 8, 11, 15, 20, 21, 22, 30, 39])
    sub = LeaveOneOutObjective(
        X[rows], Y[rows], sw[rows], DuplicateGroups(X[rows]), layout, "gaussian", scale, 0.3
    )
    sub.alpha = objective.alpha
    sub.variance = objective.variance
    sub.log_sw = objective.log_sw[rows]
    loss, grad = objective.loss_and_grad(theta, rows, rows)
    sub_loss, sub_grad = sub.loss_and_grad(theta)
    assert loss == pytest.approx(sub_loss, rel=1e-12)
    np.testing.assert_allclose(grad, sub_grad, rtol=1e-10, atol=1e-14)


def test_head_estimates_are_leave_one_out_averages():
    objective, theta, X, Y, sw, layout, scale = make_problem("dot", False, False)
    Wq, Wk, _, _, _ = layout.unpack(theta)
    F = objective.head_estimates(theta)
    for i in (0, 3, 10):
        allowed = [j for j in range(len(X)) if not np.array_equal(X[j], X[i])]
        for h in range(2):
            logits = scale[h] * (X[i] @ Wq[h]) @ (X[allowed] @ Wk[h]).T
            w = np.exp(logits - logits.max()) * sw[allowed]
            np.testing.assert_allclose(F[i, h], w @ Y[allowed] / w.sum(), rtol=1e-12)


def test_within_row_logits_blocked_matches_one_block():
    objective, theta, *_ = make_problem("gaussian", False, False, n=60)
    Wq, Wk, _, _, _ = objective.layout.unpack(theta)
    rows = np.arange(0, 60, 3)
    variance, top = objective.within_row_logits(Wq, Wk, objective.scale, rows)
    with config_context(working_memory=1e-4):
        small_variance, small_top = objective.within_row_logits(Wq, Wk, objective.scale, rows)
    np.testing.assert_allclose(small_variance, variance, rtol=1e-12)
    np.testing.assert_allclose(small_top, top, rtol=1e-12)
    # Against the definition: keys outside the query's duplicate group, sample-weighted.
    X, sw = objective.Z, objective.sw
    for h in range(2):
        variances, tops = [], []
        for i in rows:
            keys = [j for j in range(len(X)) if not np.array_equal(X[j], X[i])]
            q, K = X[i] @ Wq[h], X[keys] @ Wk[h]
            logits = -0.5 * objective.scale[h] * np.sum((q - K) ** 2, axis=1)
            variances.append(np.cov(logits, aweights=sw[keys], bias=True))
            w = np.exp(logits - logits.max()) * sw[keys]
            tops.append(w.max() / w.sum())
        assert variance[h] == pytest.approx(np.average(variances, weights=sw[rows]), rel=1e-10)
        assert top[h] == pytest.approx(np.average(tops, weights=sw[rows]), rel=1e-10)


@pytest.mark.parametrize("mixture", ["convex", "affine"])
@pytest.mark.parametrize("leave_one_out", [True, False])
def test_mixtures_and_resubstitution_match_direct_loop(mixture, leave_one_out):
    objective, theta, X, Y, sw, layout, scale = make_problem(
        "gaussian", False, True, mixture=mixture, leave_one_out=leave_one_out
    )
    Wq, Wk, log_scale, a, b = layout.unpack(theta)
    if mixture == "convex":
        # The head weights are the softmax of their logits, and there is no bias.
        logits = theta[layout.slices["a"]]
        np.testing.assert_allclose(a, np.exp(logits) / np.exp(logits).sum())
        assert layout.size == theta.size and not np.any(b)
    else:
        np.testing.assert_array_equal(a, theta[layout.slices["a"]])
    expected = reference_loss(
        X, Y, sw, Wq, Wk, np.exp(log_scale), a, b, "gaussian", 0.3, leave_one_out
    )
    assert objective.loss(theta) == pytest.approx(expected, rel=1e-10)

    assert_gradient_matches_finite_differences(objective, theta)


def test_convex_layout_packs_weights_as_logits():
    layout = Layout(3, 2, 2, 1, False, False, "convex")
    a = np.array([0.2, 0.5, 0.3])
    theta = layout.pack(np.ones((3, 2, 2)), np.ones((3, 2, 2)), None, a, np.array([5.0]))
    _, _, _, unpacked, b = layout.unpack(theta)
    np.testing.assert_allclose(unpacked, a)
    np.testing.assert_array_equal(b, 0.0)
