"""KernelClassifier with nearest-neighbour (balloon) bandwidths: the formula, the
leave-one-out criterion, the probabilities' contract, the choice against fixed bandwidths,
and errors."""

import numpy as np
import pytest
from sklearn.metrics import log_loss

from kernattn import KernelClassifier
from kernattn._core.loo import one_standard_error_choice
from kernattn.bandwidth._mixed import MixedEncoding
from kernattn.smoother._adaptive import BalloonCriterion


@pytest.fixture
def two_classes():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=40) > 0, "b", "a")
    return X, y


def kth_distance(distances, counts, k):
    """The smallest distance within which the rows count k (brute force)."""
    order = np.argsort(distances, kind="stable")
    reached = np.cumsum(counts[order]) >= k - 1e-9
    return distances[order][np.argmax(reached)]


def dense_probabilities(model, X_train, y, sample_weight, queries):
    """The balloon estimate written out: Gaussian weights of width c·d_k(x) on the features
    divided by bandwidth_, rows counted by weight in units of the mean weight."""
    h = model.bandwidth_
    U, Q = X_train / h, queries / h
    counts = sample_weight * len(X_train) / sample_weight.sum()
    Y = (y[:, None] == model.classes_[None, :]).astype(float)
    out = []
    for q in Q:
        distances = np.sqrt(((U - q) ** 2).sum(axis=1))
        width = model.neighbor_factor_ * kth_distance(distances, counts, model.n_neighbors_)
        w = sample_weight * np.exp(-0.5 * (distances / width) ** 2)
        out.append(w @ Y / w.sum())
    share = model.prior_share_
    return (1 - share) * np.array(out) + share * model.class_prior_


@pytest.mark.parametrize("weighted", [False, True])
def test_probabilities_equal_the_dense_formula(two_classes, weighted):
    X, y = two_classes
    weights = np.arange(1, len(X) + 1) % 3 + 1.0 if weighted else np.ones(len(X))
    model = KernelClassifier(bandwidth=[0.8, 1.3], bandwidth_type="generalized_nn")
    model.fit(X, y, sample_weight=weights)
    queries = np.random.default_rng(4).normal(size=(15, 2)) * 1.5
    expected = dense_probabilities(model, X, y, weights, queries)
    np.testing.assert_allclose(model.predict_proba(queries), expected, rtol=1e-10, atol=1e-13)


def test_leave_one_out_leaves_the_row_out_of_its_sums_and_its_distance(two_classes):
    X, y = two_classes
    X = np.vstack([X, X[:3]])  # three rows twice: a row leaves out its duplicate as well
    y = np.concatenate([y, y[:3]])
    Y = (y[:, None] == np.unique(y)[None, :]).astype(float)
    weights = np.ones(len(X))
    encoding = MixedEncoding(np.array(["continuous"] * 2, dtype=object), X)
    bandwidth = np.array([0.7, 1.1])
    queries = np.arange(len(X))
    criterion = BalloonCriterion(encoding, bandwidth, X, Y, weights, queries)
    i, factor = 2, 0.6
    k = criterion.ks[i]
    U = X / bandwidth
    # Rows count in units of the mean weight of a distinct input (40 inputs, 43 rows).
    count = 40 / 43
    expected = []
    for r in range(len(X)):
        # Refit without the row and its duplicates.
        others = np.flatnonzero(np.any(X != X[r], axis=1))
        distances = np.sqrt(((U[others] - U[r]) ** 2).sum(axis=1))
        width = factor * kth_distance(distances, np.full(len(others), count), k)
        w = np.exp(-0.5 * (distances / width) ** 2)
        expected.append(w @ Y[others] / w.sum())
    np.testing.assert_allclose(criterion.probabilities(i, factor), expected, rtol=1e-10)


def test_probabilities_are_a_distribution_and_weights_match(two_classes):
    X, y = two_classes
    model = KernelClassifier(bandwidth_type="generalized_nn").fit(X, y)
    assert model.bandwidth_type_ == "generalized_nn"
    queries = np.vstack([X[:5], [[40.0, -40.0]], np.random.default_rng(1).normal(size=(8, 2))])
    proba = model.predict_proba(queries)
    assert np.all(proba > 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    weights = model.attention_weights(queries)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    Y = (y[:, None] == model.classes_[None, :]).astype(float)
    share = model.prior_share_
    np.testing.assert_allclose(
        (1 - share) * weights @ Y + share * model.class_prior_, proba, rtol=1e-10, atol=1e-14
    )


def test_training_row_order_does_not_matter(two_classes):
    X, y = two_classes
    order = np.random.default_rng(2).permutation(len(X))
    queries = np.random.default_rng(5).normal(size=(10, 2))
    a = KernelClassifier(bandwidth_type="generalized_nn").fit(X, y)
    b = KernelClassifier(bandwidth_type="generalized_nn").fit(X[order], y[order])
    assert (a.n_neighbors_, a.neighbor_factor_) == pytest.approx(
        (b.n_neighbors_, b.neighbor_factor_), rel=1e-9
    )
    np.testing.assert_allclose(a.predict_proba(queries), b.predict_proba(queries), rtol=1e-10)


def two_densities(n, rng):
    """A dense cluster whose class changes within 0.2 and a sparse one, 20 times wider,
    whose class changes as slowly."""
    dense = rng.random(n) < 0.75
    X = np.where(dense[:, None], 0.2, 4.0) * rng.normal(size=(n, 2))
    X[~dense, 0] += 12.0
    y = np.where(dense, np.sin(X[:, 1] * 8) > 0, X[:, 1] > 0)
    flip = rng.random(n) < 0.05
    return X, np.where(y ^ flip, "up", "down")


def test_nearest_neighbour_bandwidths_follow_the_density():
    rng = np.random.default_rng(0)
    X, y = two_densities(400, rng)
    X_test, y_test = two_densities(2000, rng)
    losses = {}
    for kind in ("fixed", "generalized_nn", "auto"):
        model = KernelClassifier(bandwidth_type=kind).fit(X, y)
        losses[kind] = log_loss(y_test, model.predict_proba(X_test), labels=model.classes_)
    assert losses["generalized_nn"] < 0.9 * losses["fixed"]
    assert losses["auto"] == losses["generalized_nn"]


def test_auto_keeps_given_bandwidths_fixed(two_classes):
    X, y = two_classes
    model = KernelClassifier(bandwidth=0.5).fit(X, y)
    assert model.bandwidth_type_ == "fixed"
    assert model.n_neighbors_ is None and model.neighbor_factor_ is None


def test_bad_bandwidth_type_is_refused(two_classes):
    X, y = two_classes
    with pytest.raises(ValueError, match="bandwidth_type"):
        KernelClassifier(bandwidth_type="balloon").fit(X, y)


def test_nearest_neighbours_need_a_continuous_feature():
    X = np.array([[0, 1], [1, 0], [1, 1], [0, 0]] * 5, dtype=float)
    y = np.array(["a", "b"] * 10)
    model = KernelClassifier(bandwidth_type="generalized_nn", categorical_features=[0, 1])
    with pytest.raises(ValueError, match="at least one continuous feature"):
        model.fit(X, y)
    auto = KernelClassifier(categorical_features=[0, 1]).fit(X, y)
    assert auto.bandwidth_type_ == "fixed"


def test_discrete_features_keep_their_kernel():
    rng = np.random.default_rng(6)
    n = 200
    level = rng.integers(0, 3, n)
    x = rng.normal(size=n)
    X = np.column_stack([level, x])
    y = np.where((level == 1) ^ (x > 1.0), "b", "a")
    model = KernelClassifier(bandwidth_type="generalized_nn", categorical_features=[0])
    model.fit(X, y)
    proba = model.predict_proba([[1.0, 0.0], [2.0, 0.0]])
    assert proba[0, 1] > 0.8 and proba[1, 0] > 0.8


def _nearest_kept(nearest, fixed, weights, groups):
    """The rule of ``bandwidth_type="auto"``: the nearest-neighbour bandwidths are kept
    where the one-standard-error rule chooses them over the fixed ones."""
    losses = np.column_stack([nearest, fixed])
    return one_standard_error_choice(losses, weights, (0.0, 1.0), groups=groups) == 0.0


def test_auto_needs_a_gain_beyond_one_standard_error():
    rng = np.random.default_rng(7)
    fixed = rng.exponential(size=200)
    groups = np.arange(200)
    ones = np.ones(200)
    assert _nearest_kept(fixed - 0.1, fixed, ones, groups)
    # The same mean gain, within noise of ±3 (standard error 0.21).
    noisy = fixed - 0.1 + 3.0 * np.resize([1.0, -1.0], 200)
    assert not _nearest_kept(noisy, fixed, ones, groups)
    # Integer weights decide as the rows repeated.
    weights = rng.integers(1, 4, size=200).astype(float)
    repeated = np.repeat(np.arange(200), weights.astype(int))
    for gain in (0.02, 0.05, 0.1):
        losses = fixed - gain + rng.normal(scale=0.5, size=200)
        assert _nearest_kept(losses, fixed, weights, groups) == _nearest_kept(
            losses[repeated], fixed[repeated], np.ones(len(repeated)), repeated
        )


def test_query_on_a_heavy_point_takes_the_floor(two_classes):
    # 60 copies of one row outweigh k units of distinct inputs: d_k = 0 at that point.
    X, y = two_classes
    X = np.vstack([X, np.repeat(X[:1], 60, axis=0)])
    y = np.concatenate([y, np.repeat(y[:1], 60)])
    model = KernelClassifier(bandwidth_type="generalized_nn").fit(X, y)
    kernel = model.engine_.kernel_
    points, _ = kernel.source.features(X[:1])
    assert model.n_neighbors_ <= 60 * 41 / 100
    assert kernel.neighbors.distances(points, [model.n_neighbors_])[0, 0] == 0.0
    proba = model.predict_proba(X[:1])
    assert np.all(np.isfinite(proba)) and np.all(proba > 0)
    np.testing.assert_allclose(proba.sum(), 1.0, rtol=1e-12)
    assert model.classes_[proba.argmax()] == y[0]
