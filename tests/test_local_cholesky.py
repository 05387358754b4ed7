"""The local fits' one solve (kernattn._local.cholesky): batched Cholesky factors and solves
against numpy's dense linear algebra, row independence, the pivot floor, and the local
design's two paths (the factored rows and the eigen-decomposition) giving the same fit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernattn._local import polynomial
from kernattn._local.cholesky import (
    batch_entries,
    cholesky_factor,
    cholesky_solve,
    inverse_trace,
)
from kernattn._local.linear_fit import RIDGE, solve_covariance
from kernattn._local.polynomial import (
    design_columns,
    local_design,
    polynomial_columns,
    polynomial_estimate,
    solve_local,
)


def spd_batch(rng, b, P, condition=1e3):
    """``b`` symmetric positive-definite P×P matrices of about this condition number."""
    Q, _ = np.linalg.qr(rng.normal(size=(b, P, P)))
    eigenvalues = np.exp(rng.uniform(0, np.log(condition), size=(b, P)))
    return np.einsum("bij,bj,bkj->bik", Q, eigenvalues, Q)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    b=st.integers(1, 9),
    P=st.integers(1, 7),
    k=st.integers(1, 3),
)
def test_solve_and_inverse_trace_equal_numpy(seed, b, P, k):
    rng = np.random.default_rng(seed)
    A = spd_batch(rng, b, P)
    rhs = rng.normal(size=(b, P, k))
    L = cholesky_factor(*batch_entries(A))
    lower = np.array([[L[i][j] if j <= i else np.zeros(b) for j in range(P)] for i in range(P)])
    np.testing.assert_allclose(np.moveaxis(lower, -1, 0), np.linalg.cholesky(A), atol=1e-12)
    x = cholesky_solve(L, rhs.transpose(1, 2, 0)).transpose(2, 0, 1)
    np.testing.assert_allclose(x, np.linalg.solve(A, rhs), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(inverse_trace(L), np.trace(np.linalg.inv(A), axis1=1, axis2=2))
    # The bound it gives: the smallest eigenvalue is at least 1/tr A⁻¹.
    assert np.all(np.linalg.eigvalsh(A)[:, 0] >= 1.0 / inverse_trace(L) * (1 - 1e-12))


def test_each_row_of_the_batch_is_solved_alone():
    """A row's answer does not depend on the others: a permuted batch gives the permuted
    answers to the last bit, and one row alone the same bits as in the batch."""
    rng = np.random.default_rng(0)
    A = spd_batch(rng, 12, 4)
    rhs = rng.normal(size=(4, 12))
    x = cholesky_solve(cholesky_factor(*batch_entries(A)), rhs)
    order = rng.permutation(12)
    y = cholesky_solve(cholesky_factor(*batch_entries(A[order])), rhs[:, order])
    np.testing.assert_array_equal(y, x[:, order])
    z = cholesky_solve(cholesky_factor(*batch_entries(A[5:6])), rhs[:, 5:6])
    np.testing.assert_array_equal(z[:, 0], x[:, 5])


def test_a_pivot_below_its_floor_is_raised_to_it():
    """A singular matrix's zero Schur complement takes the floor: the factor stays finite
    and its squared pivot is the floor."""
    A = np.array([[[1.0, 1.0], [1.0, 1.0]]])
    L = cholesky_factor(*batch_entries(A), floors=[0.0, 1e-8])
    assert L[1][1][0] ** 2 == pytest.approx(1e-8)
    assert np.all(np.isfinite(cholesky_solve(L, [np.ones(1), np.ones(1)])))


def test_the_covariance_solve_is_the_ridged_dense_solve():
    rng = np.random.default_rng(1)
    b, n, d = 30, 25, 4
    keys = rng.normal(size=(b, n, d))
    w = rng.dirichlet(np.ones(n), size=b)
    mean = np.einsum("bn,bnd->bd", w, keys)
    second = np.einsum("bn,bnd,bne->bde", w, keys, keys)
    rhs = rng.normal(size=(b, d, 2))
    C = second - mean[:, :, None] * mean[:, None, :]
    ridge = RIDGE * np.diagonal(second, axis1=1, axis2=2)
    expected = np.linalg.solve(C + ridge[:, :, None] * np.eye(d), rhs)
    np.testing.assert_allclose(solve_covariance(mean, second, rhs), expected, rtol=1e-10)


def _block(degree, d=2, n=120, seed=3):
    """A block of queries inside and far outside the keys, with the moments local_design
    takes (normalized kernel weights)."""
    rng = np.random.default_rng(seed)
    keys = rng.uniform(-1, 1, size=(n, d)) / 0.3
    Q = np.vstack([rng.uniform(-1, 1, size=(30, d)), rng.uniform(1.2, 3, size=(10, d))]) / 0.3
    r2 = ((Q[:, None, :] - keys[None]) ** 2).sum(axis=-1)
    w = np.exp(-0.5 * (r2 - r2.min(axis=1, keepdims=True)))
    w /= w.sum(axis=1, keepdims=True)
    columns = design_columns(keys, degree)
    squared = np.hstack([np.ones((n, 1)), columns])
    return w @ columns, (w**2) @ squared, Q, keys, w


def assert_same_design(design, eigen):
    """``eigen`` (no row factored) fits as ``design`` does."""
    assert not eigen.factored.any()
    for name in ("coefficients", "leverage", "variance", "ridge"):
        np.testing.assert_allclose(
            getattr(design, name), getattr(eigen, name), rtol=1e-9, atol=1e-12, err_msg=name
        )
    np.testing.assert_array_equal(design.held_back, eigen.held_back)


@pytest.mark.parametrize("degree", [1, 2])
def test_factored_rows_are_the_eigen_solve(degree, monkeypatch):
    """The rows the one solve serves give the fit that the eigen-decomposition gives them
    (forced on every row), and the rows held back take that decomposition."""
    moments, squared, Q, _, _ = _block(degree)
    design = local_design(moments, squared, Q, degree)
    assert design.factored.any() and not design.factored.all()
    assert not np.any(design.factored & design.held_back)
    monkeypatch.setattr(polynomial, "inverse_trace", lambda L: np.full(len(Q), np.inf))
    eigen = local_design(moments, squared, Q, degree)
    assert_same_design(design, eigen)
    rhs = np.random.default_rng(0).normal(size=(len(Q), 3, design.coefficients.shape[1]))
    for ridge in (True, False):
        np.testing.assert_allclose(
            solve_local(design, rhs, ridge), solve_local(eigen, rhs, ridge), rtol=1e-9, atol=1e-12
        )


@pytest.mark.parametrize("degree", [1, 2])
def test_designs_beyond_the_factored_size_take_the_eigen_solve(degree, monkeypatch):
    """A design with more unknowns than FACTORED_UNKNOWNS skips the one solve: every row
    takes the eigen-decomposition, with the same fit as the factored rows'."""
    moments, squared, Q, _, _ = _block(degree, d=3)
    design = local_design(moments, squared, Q, degree)
    assert design.factored.any()
    monkeypatch.setattr(polynomial, "FACTORED_UNKNOWNS", design.coefficients.shape[1] - 1)
    monkeypatch.setattr(polynomial, "cholesky_factor", None)  # never called
    eigen = local_design(moments, squared, Q, degree)
    assert_same_design(design, eigen)


def test_estimates_of_both_paths_agree_through_the_public_fit(monkeypatch):
    """polynomial_estimate (what the smoother and the criterion take) gives the same
    estimates and self-weights on either path."""
    degree = 2
    _, _, Q, keys, w = _block(degree, d=1, seed=5)
    y = np.sin(keys[:, 0])
    values = (y - y.mean())[:, None]
    moments = np.hstack([values, values**2, np.ones((len(y), 1))])
    sums = w @ polynomial_columns(moments, values, keys, degree)
    squared = (w**2) @ np.hstack([np.ones((len(y), 1)), design_columns(keys, degree)])
    fit = polynomial_estimate(sums, squared, Q, 1, 1, degree)
    monkeypatch.setattr(polynomial, "inverse_trace", lambda L: np.full(len(Q), np.inf))
    eigen = polynomial_estimate(sums, squared, Q, 1, 1, degree)
    np.testing.assert_allclose(fit.mean, eigen.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fit.self_factor, eigen.self_factor, rtol=1e-10, atol=1e-12)
