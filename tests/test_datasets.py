"""The built-in regression tasks."""

import numpy as np
import pytest

from kernattn import datasets
from kernattn.datasets import TASKS, Task, curve_function, load_task


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_returns_finite_X_y_and_description(name):
    n = None if name == "diabetes" else 60
    X, y, description = load_task(name, n_samples=n, random_state=0)
    assert X.ndim == 2 and y.shape == (X.shape[0],)
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(y))
    assert isinstance(description, str) and description
    if n is not None:
        assert X.shape[0] == n


@pytest.mark.parametrize("name", sorted(set(TASKS) - {"diabetes"}))
def test_same_seed_same_task_other_seed_other_task(name):
    a = load_task(name, n_samples=40, random_state=1)
    b = load_task(name, n_samples=40, random_state=1)
    c = load_task(name, n_samples=40, random_state=2)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.y, c.y)


def test_curve_is_the_documented_function_plus_noise():
    X, y, _ = datasets.make_curve(2000, noise=0.0, random_state=0)
    np.testing.assert_allclose(y, 2 * np.sin(X[:, 0]) + X[:, 0] ** 0.8)
    assert 0.0 <= X.min() and X.max() <= 5.0
    X, y, _ = datasets.make_curve(4000, noise=0.5, random_state=0)
    residual = y - curve_function(X[:, 0])
    assert abs(residual.std() - 0.5) < 0.03


def test_projection_target_depends_only_on_a_k_dimensional_subspace():
    X, y, _ = datasets.make_projection(
        300, n_features=8, n_components=2, noise=0.0, random_state=0
    )
    # Noise-free target is a function of X @ U for a rank-2 U: moving X within the orthogonal
    # complement of U leaves y unchanged. Recover U from the generator's own draw order.
    rng = np.random.RandomState(0)
    basis, _ = np.linalg.qr(rng.normal(size=(8, 2)))
    Z = X @ basis
    np.testing.assert_allclose(y, np.sin(2 * Z[:, 0]) + 0.5 * Z[:, 1] ** 2)


def test_irrelevant_features_do_not_change_the_target():
    X, y, _ = datasets.make_irrelevant(200, n_irrelevant=5, noise=0.0, random_state=0)
    assert X.shape == (200, 8)
    expected = np.sin(np.pi * X[:, 0]) + X[:, 1] ** 2 + X[:, 0] * X[:, 2]
    np.testing.assert_allclose(y, expected)


def test_diabetes_subsample_has_distinct_rows_of_the_full_data():
    full = datasets.load_diabetes()
    part = datasets.load_diabetes(100, random_state=0)
    assert part.X.shape == (100, 10)
    rows = {tuple(r) for r in full.X}
    assert all(tuple(r) in rows for r in part.X)
    assert len({tuple(r) for r in part.X}) == 100


def test_task_unpacks_as_a_triple():
    task = datasets.make_friedman1(30, random_state=0)
    assert isinstance(task, Task)
    X, y, description = task
    assert X is task.X and y is task.y and description == task.description


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: load_task("nope"), "unknown task 'nope'; choose from curve"),
        (lambda: datasets.make_curve(1), "n_samples must be at least 2"),
        (lambda: datasets.make_curve(10, noise=-1.0), "noise must be a non-negative"),
        (lambda: datasets.make_projection(10, n_features=3, n_components=4), "n_components"),
        (lambda: datasets.load_diabetes(1000), "at most 442"),
        (lambda: datasets.make_irrelevant(10, n_irrelevant=-1), "n_irrelevant"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_integer_size_is_a_type_error():
    with pytest.raises(TypeError, match="n_samples must be an int"):
        datasets.make_large(1e3)


def test_curve_rows_are_in_random_order_so_unshuffled_folds_work():
    from sklearn.model_selection import cross_val_score

    from kernattn import KernelSmoother

    X, y, _ = datasets.make_curve(200, random_state=0)
    # Not sorted by x: ordered folds would each be an extrapolation (R² around -2).
    assert not np.all(np.diff(X[:, 0]) >= 0)
    scores = cross_val_score(KernelSmoother(), X, y, cv=5)
    assert scores.mean() > 0.5
    assert np.all(scores > 0)
    # The row order is part of the seeded draw.
    again, _, _ = datasets.make_curve(200, random_state=0)
    np.testing.assert_array_equal(X, again)
