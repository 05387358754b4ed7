"""The start at the smoother's leave-one-out bandwidths (``init="loo"``), the shrinkage of
the trained kernel toward it (``shrinkage``) and the choice of the degree (``degree="auto"``)
of :class:`~kernattn.AttentionRegressor`."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import InvalidParameterError

from kernattn import AttentionRegressor, KernelSmoother
from kernattn._core.loo import DuplicateGroups, one_standard_error_choice
from kernattn.learned._shrinkage import fold_rows, shrink

#: The plain softmax average: no tilt, no warp, no local line.
PLAIN = dict(tilt=False, warp=0, degree=0)


def fit_quiet(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y)


@pytest.fixture(scope="module")
def three_inputs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3)) * [1.0, 10.0, 0.1]
    y = np.sin(X[:, 0]) + 0.05 * X[:, 1] + 0.2 * rng.normal(size=120)
    return X, y


def test_loo_start_is_the_smoother_with_its_leave_one_out_bandwidths(three_inputs):
    X, y = three_inputs
    model = AttentionRegressor(max_iter=0, **PLAIN).fit(X, y)
    smoother = KernelSmoother(bandwidth="loo").fit(X, y)
    # The same search in other units (standardized): equal up to its tolerance.
    np.testing.assert_allclose(model.predict(X), smoother.predict(X), rtol=1e-2, atol=1e-5)
    # W = diag(1/h) / sqrt(s) in standardized units.
    W = model.query_projection_[0]
    np.testing.assert_allclose(W, np.diag(np.diag(W)))
    h = model.input_scale_ / (np.diag(W) * np.sqrt(model.scale_[0]))
    np.testing.assert_allclose(h, smoother.bandwidth_, rtol=1e-2)


def test_full_shrinkage_returns_to_the_start(three_inputs):
    X, y = three_inputs
    start = AttentionRegressor(max_iter=0, **PLAIN).fit(X, y)
    back = fit_quiet(AttentionRegressor(shrinkage=1.0, max_iter=20, **PLAIN), X, y)
    trained = fit_quiet(AttentionRegressor(shrinkage=None, max_iter=20, **PLAIN), X, y)
    assert back.shrinkage_ == 1.0 and trained.shrinkage_ == 0.0
    np.testing.assert_allclose(back.query_projection_, start.query_projection_, atol=1e-12)
    np.testing.assert_allclose(back.predict(X), start.predict(X), rtol=1e-10)
    assert not np.allclose(trained.query_projection_, start.query_projection_, atol=1e-3)


def test_half_shrinkage_is_halfway_between_start_and_trained(three_inputs):
    X, y = three_inputs
    start = AttentionRegressor(max_iter=0, **PLAIN).fit(X, y).query_projection_
    trained = fit_quiet(AttentionRegressor(shrinkage=0.0, max_iter=20, **PLAIN), X, y)
    half = fit_quiet(AttentionRegressor(shrinkage=0.5, max_iter=20, **PLAIN), X, y)
    np.testing.assert_allclose(
        half.query_projection_, 0.5 * (start + trained.query_projection_), atol=1e-10
    )


def test_auto_keeps_the_diagonal_start_when_the_full_metric_does_not_validate():
    # Targets that do not depend on the inputs: a trained metric only fits the noise of
    # the leave-one-out errors, and the inner validation sends it back to its start.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 4))
    y = rng.normal(size=150)
    model = fit_quiet(AttentionRegressor(random_state=0, **PLAIN), X, y)
    start = AttentionRegressor(max_iter=0, **PLAIN).fit(X, y)
    assert model.shrinkage_ == 1.0
    np.testing.assert_allclose(model.query_projection_, start.query_projection_, atol=1e-12)


def test_auto_keeps_a_rotated_metric_that_validates():
    # The target varies along a diagonal direction only: per-feature bandwidths cannot
    # follow it, a full metric can, and held-out queries show it.
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, size=(300, 2))
    y = np.sin(2.0 * (X[:, 0] + X[:, 1])) + 0.1 * rng.normal(size=300)
    model = fit_quiet(AttentionRegressor(random_state=0, **PLAIN), X, y)
    start = AttentionRegressor(max_iter=0, **PLAIN).fit(X, y)
    assert 0.0 <= model.shrinkage_ < 1.0
    X_test = rng.uniform(-2, 2, size=(500, 2))
    y_test = np.sin(2.0 * (X_test[:, 0] + X_test[:, 1]))
    model_mse = np.mean((model.predict(X_test) - y_test) ** 2)
    start_mse = np.mean((start.predict(X_test) - y_test) ** 2)
    assert model_mse < start_mse


@pytest.mark.parametrize("shrinkage", [-0.1, 1.5, "nope"])
def test_shrinkage_outside_zero_one_or_auto_is_refused(three_inputs, shrinkage):
    X, y = three_inputs
    with pytest.raises(InvalidParameterError, match="shrinkage"):
        AttentionRegressor(shrinkage=shrinkage).fit(X, y)


def test_degree_and_init_are_validated(three_inputs):
    X, y = three_inputs
    with pytest.raises(InvalidParameterError, match="degree"):
        AttentionRegressor(degree="best").fit(X, y)
    with pytest.raises(InvalidParameterError, match="init"):
        AttentionRegressor(init="smoother").fit(X, y)


def test_auto_chooses_the_line_for_a_trend_and_records_it():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(200, 4))
    y = 3.0 * X[:, 0] - 2.0 * X[:, 1] + 0.1 * rng.normal(size=200)
    model = fit_quiet(AttentionRegressor(degree="auto", tilt=False, random_state=0), X, y)
    assert model.degree_ == 1 and model.tilt_ is False
    constant = fit_quiet(AttentionRegressor(degree=0, tilt=False, random_state=0), X, y)
    assert constant.degree_ == 0
    # The default stays Nadaraya–Watson: its weights balanced along the trend.
    tilted = fit_quiet(AttentionRegressor(random_state=0), X, y)
    assert tilted.degree_ == 0 and tilted.tilt_
    X_test = rng.uniform(-1, 1, size=(200, 4))
    y_test = 3.0 * X_test[:, 0] - 2.0 * X_test[:, 1]
    line_mse = np.mean((model.predict(X_test) - y_test) ** 2)
    constant_mse = np.mean((constant.predict(X_test) - y_test) ** 2)
    tilted_mse = np.mean((tilted.predict(X_test) - y_test) ** 2)
    assert line_mse < 0.5 * constant_mse
    assert tilted_mse < 0.5 * constant_mse


def test_auto_keeps_the_constant_when_lines_do_not_help():
    # A step: a line across it is no better than the average on either side.
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(200, 1))
    y = np.where(X[:, 0] > 0, 1.0, 0.0) + 0.5 * rng.normal(size=200)
    model = fit_quiet(AttentionRegressor(random_state=0, tilt=False), X, y)
    assert model.degree_ == 0


def test_shrink_moves_along_the_line_from_trained_to_start():
    start, trained = np.array([1.0, 2.0]), np.array([3.0, -2.0])
    np.testing.assert_allclose(shrink(start, trained, 0.0), trained)
    np.testing.assert_allclose(shrink(start, trained, 1.0), start)
    np.testing.assert_allclose(shrink(start, trained, 0.25), [2.5, -1.0])


def test_one_standard_error_rule_prefers_more_shrinkage_within_noise():
    rng = np.random.default_rng(5)
    base = rng.exponential(size=400)
    # Paired differences of spread 0.01: a standard error of 0.0005 over 400 queries.
    noise = 0.01 * np.outer(np.resize([1.0, -1.0], 400), [0.0, 1.0, -1.0])
    # Level 0 is best by far less than a standard error: the largest level within it wins.
    errors = base[:, None] + noise + [0.0, 0.0002, 0.0004]
    assert one_standard_error_choice(errors, np.ones(400), (0.0, 0.5, 1.0)) == 1.0
    # Level 0 is better by many standard errors: it is kept.
    errors = base[:, None] + noise + [0.0, 0.5, 1.0]
    assert one_standard_error_choice(errors, np.ones(400), (0.0, 0.5, 1.0)) == 0.0


def test_a_fraction_of_a_standard_error_asks_less_of_the_lower_level():
    # Two levels whose paired differences have mean 0.7 and standard error exactly 1:
    # within one standard error, beyond half of one.
    difference = np.resize([0.7 + np.sqrt(399), 0.7 - np.sqrt(399)], 400)
    errors = np.column_stack([np.full(400, 10.0), 10.0 + difference])
    sample_weight = np.ones(400)
    assert one_standard_error_choice(errors, sample_weight, (0.0, 1.0)) == 1.0
    assert one_standard_error_choice(errors, sample_weight, (0.0, 1.0), multiple=0.5) == 0.0


def test_folds_hold_out_whole_duplicate_groups():
    X = np.repeat(np.arange(30.0), 2)[:, None]
    groups = DuplicateGroups(X)
    folds = fold_rows(groups, np.random.RandomState(0))
    assert len(folds) == 3
    held = np.concatenate([h for _, h in folds])
    np.testing.assert_array_equal(np.sort(held), np.arange(60))
    for train, held in folds:
        assert not set(groups.ids[train]) & set(groups.ids[held])


def test_a_large_sample_searches_its_start_once(monkeypatch):
    # From ONE_FOLD_GROUPS distinct inputs the inner validation's one fold trains from the
    # fit's own start; a small sample searches again on each fold's rows.
    import kernattn.learned._fit as fit_module
    from kernattn.learned._shrinkage import N_FOLDS, ONE_FOLD_GROUPS

    calls = []
    search = fit_module.start_parameters

    def counted(*args, **kwargs):
        calls.append(kwargs.get("rows"))
        return search(*args, **kwargs)

    monkeypatch.setattr(fit_module, "start_parameters", counted)
    rng = np.random.default_rng(3)
    for n, expected in ((ONE_FOLD_GROUPS, 1), (60, 1 + N_FOLDS)):
        calls.clear()
        X = rng.normal(size=(n, 2))
        y = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=n)
        fit_quiet(AttentionRegressor(max_iter=5, random_state=0, **PLAIN), X, y)
        assert len(calls) == expected
        assert calls[0] is None  # the first search is on every row
        # A small sample's folds search on their own rows, each a part of the sample.
        assert all(len(rows) < n for rows in calls[1:])
