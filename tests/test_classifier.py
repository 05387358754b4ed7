"""KernelClassifier and AttentionClassifier: the weights' class sums, the prior, labels,
weights, scikit-learn's model selection, and errors."""

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    cross_val_predict,
    cross_val_score,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernattn import AttentionClassifier, KernelClassifier, KernelSmoother
from kernattn._core.loo import DuplicateGroups
from kernattn._engine.labels import choose_prior_share
from kernattn.bandwidth._mixed import MixedEncoding
from kernattn.learned._classifier import discriminant_directions, ledoit_wolf_share
from kernattn.learned._likelihood import LikelihoodCriterion
from kernattn.learned._objective import Layout, LeaveOneOutObjective

CLASSIFIERS = [
    KernelClassifier(),
    AttentionClassifier(random_state=0),
    AttentionClassifier(n_heads=2, loss="log", random_state=0),
]


@pytest.fixture
def three_classes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = np.array(["low", "mid", "high"])[(X[:, 0] > -0.4).astype(int) + (X[:, 0] > 0.4)]
    return X, y


def one_hot(y, classes):
    return (np.asarray(y)[:, None] == classes[None, :]).astype(float)


#: The namespace AttentionClassifier's methods read their module's names from (the doctest
#: collection may import the module file again under another module object).
CLASSIFIER_NAMES = AttentionClassifier._fit_heads_engine.__globals__


@pytest.mark.parametrize("model", CLASSIFIERS, ids=lambda m: repr(m))
def test_proba_is_weights_class_sums_smoothed_toward_prior(three_classes, model):
    X, y = three_classes
    model.fit(X, y)
    queries = X[:7] + 0.05
    weights = model.attention_weights(queries)
    Y = one_hot(y, model.classes_)
    expected = (1 - model.prior_share_) * weights @ Y + model.prior_share_ * model.class_prior_
    np.testing.assert_allclose(model.predict_proba(queries), expected, atol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("model", CLASSIFIERS, ids=lambda m: repr(m))
def test_probabilities_positive_and_labels_kept(three_classes, model):
    X, y = three_classes
    model.fit(X, y)
    far = np.array([[50.0, 0.0, 0.0], [-50.0, 3.0, 1.0]])
    proba = model.predict_proba(np.vstack([X[:5], far]))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    assert list(model.classes_) == ["high", "low", "mid"]
    assert set(model.predict(X)) <= set(y)
    assert model.score(X, y) > 0.85
    np.testing.assert_allclose(model.predict_log_proba(X[:3]), np.log(proba[:3]))


def test_kernel_classifier_is_smoother_of_codes(three_classes):
    X, y = three_classes
    model = KernelClassifier(bandwidth=0.7).fit(X, y)
    smoother = KernelSmoother(bandwidth=0.7).fit(X, one_hot(y, model.classes_))
    expected = (1 - model.prior_share_) * smoother.predict(X) + (
        model.prior_share_ * model.class_prior_
    )
    np.testing.assert_allclose(model.predict_proba(X), expected, atol=1e-12)


def test_likelihood_criterion_is_leave_one_out_log_loss(three_classes):
    X, y = three_classes
    X = X[:40]
    classes = np.unique(y)
    Y = one_hot(y[:40], classes)
    h = np.array([0.5, 0.9, 1.3])
    encoding = MixedEncoding(np.full(3, "continuous", dtype=object), X)
    criterion = LikelihoodCriterion(encoding, X, Y, np.ones(40), np.arange(40))
    logits = -0.5 * (((X[:, None, :] - X[None, :, :]) / h) ** 2).sum(axis=2)
    np.fill_diagonal(logits, -np.inf)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    direct = w @ Y
    np.testing.assert_allclose(criterion.probabilities(h), direct, atol=1e-12)
    truth = (direct * Y).sum(axis=1)
    assert criterion.loss(h) == pytest.approx(-np.mean(np.log(truth + 1e-6)), rel=1e-10)


def test_common_factor_is_the_root_of_the_criterions_slope(three_classes):
    """The one factor of the continuous bandwidths stops where dL/dc is 0 (the slope
    against central differences of L), with a discrete feature's λ held."""
    X, y = three_classes
    X = np.column_stack([X[:60], (X[:60, 2] > 0).astype(float)])
    Y = one_hot(y[:60], np.unique(y))
    kinds = np.array(["continuous"] * 3 + ["unordered"], dtype=object)
    encoding = MixedEncoding(kinds, X)
    criterion = LikelihoodCriterion(encoding, X, Y, np.ones(60), np.arange(60))
    start = np.array([0.5, 0.9, 1.3, 0.2])

    def scaled(c):
        out = start.copy()
        out[:3] *= np.exp(c)
        return out

    for c in (-0.3, 0.2):
        step = 1e-5
        numeric = (criterion.loss(scaled(c + step)) - criterion.loss(scaled(c - step))) / (
            2 * step
        )
        slope = criterion._slope(scaled, criterion._scaled_columns(scaled), c)
        assert slope == pytest.approx(numeric, rel=1e-5, abs=1e-9)
    found = criterion.common_factor(start)
    assert found[3] == start[3]
    c = np.log(found[0] / start[0])
    np.testing.assert_allclose(found[:3], scaled(c)[:3], rtol=1e-12)
    assert abs(criterion._slope(scaled, criterion._scaled_columns(scaled), c)) < 1e-9


def test_likelihood_bandwidth_ignores_noise_feature(three_classes):
    X, y = three_classes
    model = KernelClassifier(bandwidth="likelihood-per-feature").fit(X, y)
    assert model.bandwidth_[0] < model.bandwidth_[1]
    assert model.bandwidth_[0] < model.bandwidth_[2]


def test_log_loss_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(30, 3))
    Y = np.eye(3)[rng.integers(0, 3, 30)]
    layout = Layout(2, 3, 2, 3, False, True, "convex")
    objective = LeaveOneOutObjective(
        Z,
        Y,
        rng.uniform(0.5, 2, 30),
        DuplicateGroups(Z),
        layout,
        "gaussian",
        np.ones(2),
        0.1,
        loss="log",
    )
    theta = 0.5 * rng.normal(size=layout.size)
    _, grad = objective.loss_and_grad(theta)
    step = 1e-6
    numeric = np.array(
        [
            (objective.loss(theta + step * e) - objective.loss(theta - step * e)) / (2 * step)
            for e in np.eye(layout.size)
        ]
    )
    np.testing.assert_allclose(grad, numeric, atol=1e-7)


def test_prior_share_minimizes_log_loss():
    rng = np.random.default_rng(2)
    Y = np.eye(2)[rng.integers(0, 2, 200)]
    # Confident probabilities that are wrong a tenth of the time.
    wrong = rng.random(200) < 0.1
    p = np.where(wrong[:, None], 1 - Y, Y)
    prior = Y.mean(axis=0)
    share, loss = choose_prior_share(p, Y, np.ones(200), prior)
    grid = np.linspace(1e-6, 1, 2001)
    losses = [-np.mean(np.log(((1 - a) * p + a * prior)[Y == 1])) for a in grid]
    assert share == pytest.approx(grid[np.argmin(losses)], abs=1e-3)
    assert loss == pytest.approx(min(losses), rel=1e-4)


def test_prior_share_positive_for_perfect_separation():
    X = np.r_[np.zeros((10, 1)), np.ones((10, 1)) * 10]
    y = np.r_[np.zeros(10), np.ones(10)]
    model = KernelClassifier(bandwidth=0.1).fit(X, y)
    # Each row is left out with its duplicates: its only keys are the other class's, whose
    # probability of its own class is 0, and the leave-one-out log-loss puts all the weight
    # on the prior.
    assert model.prior_share_ == 1.0
    np.testing.assert_allclose(model.predict_proba([[0.0], [10.0]]), 0.5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: KernelClassifier(),
        lambda: AttentionClassifier(max_iter=5, random_state=0),
    ],
    ids=["KernelClassifier", "AttentionClassifier"],
)
def test_integer_sample_weight_is_repetition(three_classes, make):
    X, y = three_classes
    X, y = X[:60], y[:60]
    weight = np.arange(60) % 3
    weighted = make().fit(X, y, sample_weight=weight)
    repeated = make().fit(np.repeat(X, weight, axis=0), np.repeat(y, weight))
    np.testing.assert_allclose(
        weighted.predict_proba(X[:10]), repeated.predict_proba(X[:10]), atol=1e-8
    )
    assert weighted.prior_share_ == pytest.approx(repeated.prior_share_, rel=1e-6)


def test_class_weight_balanced_equalizes_prior(three_classes):
    X, y = three_classes
    keep = (y != "mid") | (np.arange(len(y)) % 4 == 0)
    model = KernelClassifier(class_weight="balanced").fit(X[keep], y[keep])
    np.testing.assert_allclose(model.class_prior_, 1 / 3)


def test_binary_and_multiclass(three_classes):
    X, y = three_classes
    binary = y == "high"
    model = AttentionClassifier(random_state=0).fit(X, binary)
    assert model.predict_proba(X).shape == (len(X), 2)
    assert model.query_projection_.shape == (1, 3, 2)  # head_dim: n_features ∧ 2


@pytest.mark.parametrize("model", CLASSIFIERS, ids=lambda m: repr(m))
def test_binary_decision_is_positive_class_log_odds(three_classes, model):
    X, y = three_classes
    model.fit(X, np.where(y == "high", "yes", "no"))
    queries = np.vstack([X[:20], [[50.0, 0.0, 0.0]]])
    scores = model.decision_function(queries)
    proba = model.predict_proba(queries)
    assert scores.shape == (len(queries),)
    np.testing.assert_allclose(scores, np.log(proba[:, 1] / proba[:, 0]), rtol=1e-12)
    assert np.all(np.isfinite(scores))
    # A positive score is the vote for classes_[1].
    np.testing.assert_array_equal(model.classes_[(scores > 0).astype(int)], model.predict(queries))


@pytest.mark.parametrize("model", CLASSIFIERS, ids=lambda m: repr(m))
def test_multiclass_decision_is_centred_log_proba(three_classes, model):
    X, y = three_classes
    model.fit(X, y)
    queries = np.vstack([X[:20] + 0.05, [[-50.0, 3.0, 1.0]]])
    scores = model.decision_function(queries)
    log_proba = np.log(model.predict_proba(queries))
    assert scores.shape == (len(queries), 3)
    np.testing.assert_allclose(
        scores, log_proba - log_proba.mean(axis=1, keepdims=True), atol=1e-12
    )
    np.testing.assert_allclose(scores.sum(axis=1), 0.0, atol=1e-12)
    np.testing.assert_array_equal(model.classes_[scores.argmax(axis=1)], model.predict(queries))


@pytest.mark.parametrize("model", CLASSIFIERS[:2], ids=lambda m: repr(m))
def test_model_selection_tools(three_classes, model):
    X, y = three_classes
    pipe = make_pipeline(StandardScaler(), model)
    scores = cross_val_score(pipe, X, y, cv=3, scoring="neg_log_loss")
    assert np.all(np.isfinite(scores))
    search = GridSearchCV(
        make_pipeline(StandardScaler(), KernelClassifier()),
        {"kernelclassifier__bandwidth": [0.3, "likelihood"]},
        cv=3,
        scoring="neg_log_loss",
    ).fit(X, y)
    assert search.best_params_


# scikit-learn says the fold lacks a class; the columns are aligned all the same.
@pytest.mark.filterwarnings("ignore:Number of classes in training fold")
@pytest.mark.parametrize("model", CLASSIFIERS[:2], ids=lambda m: repr(m))
def test_cross_val_predict_with_class_missing_from_a_fold(model):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    y = np.r_[np.zeros(18), np.ones(18), np.full(4, 2)].astype(int)
    # Unshuffled folds: the last fold holds every row of class 2, absent from its training.
    proba = cross_val_predict(model, X, y, cv=KFold(4), method="predict_proba")
    assert proba.shape == (40, 3)
    np.testing.assert_array_equal(proba[30:, 2], 0.0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("cls", [KernelClassifier, AttentionClassifier])
@pytest.mark.parametrize(
    "case, message",
    [
        ("one_class", "at least 2 classes"),
        ("nan", "NaN"),
        ("inf", "infinity"),
        ("short_weight", "sample_weight"),
        ("negative_weight", "(?i)negative"),
    ],
)
def test_errors_leave_fitted_model_unchanged(three_classes, cls, case, message):
    X, y = three_classes
    model = cls().fit(X, y)
    before = model.predict_proba(X[:5])
    bad_X, bad_y, weight = X.copy(), y.copy(), None
    if case == "one_class":
        bad_y[:] = "low"
    elif case == "nan":
        bad_X[3, 1] = np.nan
    elif case == "inf":
        bad_X[3, 1] = np.inf
    elif case == "short_weight":
        weight = np.ones(len(X) - 1)
    else:
        weight = np.ones(len(X))
        weight[2] = -1.0
    with pytest.raises(ValueError, match=message):
        model.fit(bad_X, bad_y, sample_weight=weight)
    np.testing.assert_array_equal(model.predict_proba(X[:5]), before)


def test_prune_heads_keeps_a_distribution(three_classes):
    X, y = three_classes
    model = AttentionClassifier(n_heads=3, random_state=0).fit(X, y)
    pruned = model.prune_heads([0, 2])
    assert pruned.head_weights_.sum() == pytest.approx(1.0)
    weights = pruned.attention_weights(X[:4])
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-12)
    assert model.head_weights_.shape == (3,)


def test_same_seed_same_fit(three_classes):
    X, y = three_classes
    a = AttentionClassifier(random_state=4).fit(X, y).predict_proba(X)
    b = AttentionClassifier(random_state=4).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(a, b)


def test_kernel_classifier_smooths_discrete_features():
    rng = np.random.default_rng(5)
    n = 240
    level = rng.integers(0, 4, n)  # unordered: levels 1 and 3 say "b"
    grade = rng.integers(0, 5, n)  # ordered, irrelevant
    noise = rng.normal(size=n)
    X = np.column_stack([level, grade, noise]).astype(float)
    y = np.where(np.isin(level, [1, 3]) ^ (rng.random(n) < 0.1), "b", "a")
    model = KernelClassifier(categorical_features=[0], ordinal_features=[1]).fit(X, y)
    # The label depends on the level alone: little smoothing across levels, much across
    # the irrelevant grade.
    assert model.bandwidth_[0] < 0.2
    assert model.bandwidth_[1] > 0.5
    proba = model.predict_proba([[1.0, 2.0, 0.0], [2.0, 2.0, 0.0]])
    assert proba[0, 1] > 0.8 and proba[1, 0] > 0.8


@pytest.mark.parametrize("exponent", [-1000, 1000])
def test_kernel_classifier_ignores_the_scale_of_the_weights(exponent):
    # The likelihood search starts where the weights' scale does not carry it: Scott's
    # rule alone, counting weights of 2^±1000 as observations, starts 50 decades away.
    X, y = load_iris(return_X_y=True)
    weights = np.random.default_rng(2).uniform(0.5, 2.0, size=len(X))
    plain = KernelClassifier().fit(X, y, sample_weight=weights)
    scaled = KernelClassifier().fit(X, y, sample_weight=np.ldexp(weights, exponent))
    np.testing.assert_allclose(scaled.bandwidth_, plain.bandwidth_, rtol=1e-4)
    np.testing.assert_allclose(scaled.predict_proba(X), plain.predict_proba(X), atol=1e-6)


@pytest.mark.parametrize("shape", [(50, 5), (200, 30), (30, 60)])
def test_ledoit_wolf_share_is_scikit_learns_with_weights_as_repeated_rows(shape):
    from sklearn.covariance import ledoit_wolf_shrinkage

    rng = np.random.default_rng(shape[1])
    n, d = shape
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    X -= X.mean(axis=0)
    assert ledoit_wolf_share(X, np.ones(n)) == pytest.approx(
        ledoit_wolf_shrinkage(X, assume_centered=True), rel=1e-12
    )
    counts = rng.integers(1, 4, size=n)
    repeated = ledoit_wolf_shrinkage(np.repeat(X, counts, axis=0), assume_centered=True)
    assert ledoit_wolf_share(X, counts.astype(float)) == pytest.approx(repeated, rel=1e-12)
    # Rows whose covariance is a multiple of the identity are shrunk most (the target is
    # the truth), many rows of a strongly anisotropic covariance hardly at all.
    assert ledoit_wolf_share(rng.normal(size=(200, 10)), np.ones(200)) > 0.5
    anisotropic = rng.normal(size=(5000, 3)) * [1.0, 5.0, 25.0]
    assert ledoit_wolf_share(anisotropic, np.ones(5000)) < 0.01


def test_discriminant_start_is_shrunk_lda_with_unit_within_class_spread():
    from scipy.linalg import eigh
    from sklearn.covariance import ledoit_wolf_shrinkage

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(90, 6))
    labels = rng.integers(0, 3, size=90)
    Z[:, 0] += 1.5 * labels
    Y = np.eye(3)[labels]
    W = discriminant_directions(Z, Y, np.ones(90), head_dim=2)
    means = np.array([Z[labels == c].mean(axis=0) for c in range(3)])
    within = Z - means[labels]
    share = ledoit_wolf_shrinkage(within, assume_centered=True)
    S_w = within.T @ within / 90
    S_w = (1 - share) * S_w + share * np.trace(S_w) / 6 * np.eye(6)
    centered = means - Z.mean(axis=0)
    S_b = (centered * np.bincount(labels)[:, None] / 90).T @ centered
    values, vectors = eigh(S_b, S_w)
    top = vectors[:, np.argsort(values)[::-1][:2]]
    # The same directions (up to sign), each of unit within-class spread.
    np.testing.assert_allclose(
        np.abs(np.sum(W * top, axis=0)),
        np.sqrt(np.sum(W * W, axis=0) * np.sum(top * top, axis=0)),
        rtol=1e-8,
    )
    np.testing.assert_allclose(np.einsum("ij,ik,kj->j", W, S_w, W), 1.0, rtol=1e-10)


def test_two_pass_width_grid_finds_the_whole_grids_width(monkeypatch, three_classes):
    X_iris, y_iris = load_iris(return_X_y=True)
    for X, y in (three_classes, (X_iris, y_iris)):
        two_pass = AttentionClassifier(random_state=0).fit(X, y)
        with monkeypatch.context() as patch:
            patch.setitem(CLASSIFIER_NAMES, "COARSE", 1)  # every point in the first pass
            whole = AttentionClassifier(random_state=0).fit(X, y)
        assert two_pass.width_factor_ == whole.width_factor_
        assert two_pass.prior_share_ == whole.prior_share_
        np.testing.assert_array_equal(two_pass.predict_proba(X), whole.predict_proba(X))


@pytest.mark.parametrize("n_rows", [40, 150, 400])
def test_held_out_splits_hold_out_every_row_once_whole_groups(n_rows):
    rng = np.random.default_rng(n_rows)
    X = rng.normal(size=(n_rows, 2))
    X[1::3] = X[::3][: len(X[1::3])]  # duplicate inputs, held out together
    groups = DuplicateGroups(X)
    splits = AttentionClassifier._held_out_splits(groups, np.random.RandomState(0))
    assert len(splits) == CLASSIFIER_NAMES["CROSS_FIT_FOLDS"]
    held = np.concatenate([validation for _, validation in splits])
    np.testing.assert_array_equal(np.sort(held), np.arange(n_rows))
    for train, validation in splits:
        np.testing.assert_array_equal(np.setdiff1d(np.arange(n_rows), validation), train)
        assert not set(groups.ids[train]) & set(groups.ids[validation])
    sizes = [len(np.unique(groups.ids[validation])) for _, validation in splits]
    assert max(sizes) - min(sizes) <= 2


def test_one_training_above_the_cross_fit_size_and_without_a_split(monkeypatch):
    rng = np.random.default_rng(1)
    calls = []
    optimize = CLASSIFIER_NAMES["optimize"]

    def counted(*args, **kwargs):
        calls.append(len(kwargs["validation"]) if kwargs["validation"] is not None else 0)
        return optimize(*args, **kwargs)

    monkeypatch.setitem(CLASSIFIER_NAMES, "optimize", counted)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    AttentionClassifier(random_state=0).fit(X, y)
    assert len(calls) == CLASSIFIER_NAMES["CROSS_FIT_FOLDS"] and sum(calls) == 60
    calls.clear()
    monkeypatch.setitem(CLASSIFIER_NAMES, "CROSS_FIT_GROUPS", 59)
    AttentionClassifier(random_state=0).fit(X, y)
    assert calls == [12]
    calls.clear()
    AttentionClassifier(random_state=0).fit(X[:15], y[:15])
    assert calls == [0]


def test_prior_share_is_chosen_on_every_held_out_row():
    # Separated classes: no held-out row is mistaken, and the rule of succession's one
    # unseen mistake among all n held-out rows sets the share to about 1 / (n (1 - π)),
    # the minimum of -n log(1 - α (1 - π)) - log(α); a single fifth would give five times it.
    rng = np.random.default_rng(2)
    centers = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])
    y = np.repeat(np.arange(3), 50)
    X = centers[y] + rng.normal(scale=0.5, size=(150, 2))
    model = AttentionClassifier(random_state=0).fit(X, y)
    expected = 1.0 / (150 * (1 - 1 / 3) + 1)
    assert model.prior_share_ == pytest.approx(expected, rel=0.05)
