"""The leave-one-out objective of AttentionRegressor: value against a direct loop, gradient
against finite differences, blocking, weights and key subsets."""

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn import config_context

from kernattn._base import duplicate_groups
from kernattn._learned_objective import Layout, LeaveOneOutObjective


def _similarity(q, k, similarity):
    if similarity == "dot":
        return q @ k
    if similarity == "cosine":
        return q @ k / np.sqrt((q @ q + 1e-12) * (k @ k + 1e-12))
    return -0.5 * np.sum((q - k) ** 2)


def reference_loss(Z, Y, sw, Wq, Wk, tau, a, b, similarity, alpha):
    """The objective written as a loop over queries, keys and heads."""
    n = len(Z)
    total, data = 0.0, 0.0
    for i in range(n):
        keys = [j for j in range(n) if not np.array_equal(Z[j], Z[i])]
        if not keys:
            continue
        estimate = b.copy()
        for h in range(len(tau)):
            q = Z[i] @ Wq[h]
            logits = np.array(
                [_similarity(q, Z[j] @ Wk[h], similarity) / tau[h] + np.log(sw[j]) for j in keys]
            )
            w = np.exp(logits - logits.max())
            w /= w.sum()
            estimate = estimate + a[h] * (w @ Y[keys])
        data += sw[i] * np.sum((estimate - Y[i]) ** 2)
        total += sw[i]
    variance = np.sum(sw @ Y**2) / sw.sum()
    penalty = alpha / sw.sum() * (np.sum(Wq**2) + (0 if Wk is Wq else np.sum(Wk**2)))
    return data / (variance * total) + penalty


def make_problem(similarity, tie_qk, learn_tau, n=24, d=3, head_dim=2, n_heads=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[5] = X[3]  # a duplicate pair: both must be left out of each other's estimate
    X[7] = X[3]
    Y = rng.normal(size=(n, 2))
    sw = rng.uniform(0.5, 2.0, n)
    Y -= np.average(Y, axis=0, weights=sw)
    layout = Layout(n_heads, d, head_dim, 2, tie_qk, learn_tau)
    tau = np.array([1.3, 0.7])[:n_heads]
    objective = LeaveOneOutObjective(
        X, Y, sw, duplicate_groups(X), layout, similarity, tau, alpha=0.3
    )
    theta = 0.6 * rng.normal(size=layout.size)
    return objective, theta, X, Y, sw, layout, tau


@pytest.mark.parametrize("similarity", ["dot", "cosine", "gaussian"])
@pytest.mark.parametrize("tie_qk", [False, True])
@pytest.mark.parametrize("learn_tau", [False, True])
def test_loss_matches_direct_loop(similarity, tie_qk, learn_tau):
    objective, theta, X, Y, sw, layout, tau = make_problem(similarity, tie_qk, learn_tau)
    Wq, Wk, log_tau, a, b = layout.unpack(theta)
    taus = np.exp(log_tau) if learn_tau else tau
    expected = reference_loss(X, Y, sw, Wq, Wk, taus, a, b, similarity, 0.3)
    assert objective.loss(theta) == pytest.approx(expected, rel=1e-10)


# Every scale option: a fixed τ (sqrt / none / a float differ only in its value) or learned.
@pytest.mark.parametrize("similarity", ["dot", "cosine", "gaussian"])
@pytest.mark.parametrize("tie_qk", [False, True])
@pytest.mark.parametrize("tau", [None, 1.0, np.sqrt(2.0), 0.37])
def test_gradient_matches_finite_differences(similarity, tie_qk, tau):
    learn_tau = tau is None
    objective, theta, *_ = make_problem(similarity, tie_qk, learn_tau)
    if not learn_tau:
        objective.tau = np.full(2, tau)

    def loss(t):
        return objective.loss_and_grad(t)[0]

    def grad(t):
        return objective.loss_and_grad(t)[1]

    error = check_grad(loss, grad, theta, epsilon=1e-7)
    assert error < 1e-5 * max(np.linalg.norm(grad(theta)), 1.0)


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
            X, Yc, sw, duplicate_groups(X), layout, "dot", np.ones(1), alpha=0.5
        )

    weighted = build(X, Y, counts.astype(float)).loss_and_grad(theta)
    Xr, Yr = np.repeat(X, counts, axis=0), np.repeat(Y, counts, axis=0)
    repeated = build(Xr, Yr, np.ones(len(Xr))).loss_and_grad(theta)
    assert weighted[0] == pytest.approx(repeated[0], rel=1e-12)
    np.testing.assert_allclose(weighted[1], repeated[1], rtol=1e-10, atol=1e-14)


def test_key_subset_and_query_subset_match_direct_loop():
    objective, theta, X, Y, sw, layout, tau = make_problem("dot", False, False)
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
            logits = np.array([(X[i] @ Wq[h]) @ (X[j] @ Wk[h]) / tau[h] for j in allowed])
            logits += np.log(sw[allowed] / sw.max())
            w = np.exp(logits - logits.max())
            estimate = estimate + a[h] * (w / w.sum()) @ Y[allowed]
        data += sw[i] * np.sum((estimate - Y[i]) ** 2)
        total += sw[i]
    expected = data / (objective.variance * total) + objective.alpha * np.sum(theta[:24] ** 2)
    assert value == pytest.approx(expected, rel=1e-10)


def test_query_without_other_keys_is_left_out_not_nan():
    objective, theta, *_ = make_problem("gaussian", True, False)
    keys = np.array([3, 5, 7])  # all duplicates of one input
    loss, grad = objective.loss_and_grad(theta, np.array([3, 5]), keys)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert loss == pytest.approx(objective.alpha * np.sum(theta[:12] ** 2))
