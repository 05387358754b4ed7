r"""The one solve of the local fits: a batch of small symmetric positive-definite systems
(a local polynomial's normal equations at every query, a tilt's Newton step), factored
entry by entry over the batch.

A matrix of the batch is given by its lower triangle, each entry an array over the batch
(``entry(i, j)``, ``j ≤ i``, of shape ``(b,)``): the Cholesky factor
:math:`A = L L^\top` is then :math:`P(P+1)(P+2)/6` vectorized operations, whatever the batch
size. For the few unknowns of a local fit (2 to 10) this is several times faster than a
batched LAPACK call, whose cost per matrix dominates at 10⁶ queries, and its arithmetic on
one row of the batch does not depend on the others.

A squared pivot (a Schur complement: the variance of an unknown about its fit on the ones
before it) is raised to its ``floor`` where rounding takes it below; the caller sets the
floor (a ridge, or the smallest positive double), and reads how well each matrix is
resolved from the pivots or from :func:`inverse_trace`.
"""

import numpy as np

#: The smallest positive double: the default floor of a squared pivot.
TINY = np.finfo(float).tiny


def cholesky_factor(entry, size, floors=None):
    """The lower Cholesky factor of a batch of symmetric matrices.

    Parameters
    ----------
    entry : callable
        ``entry(i, j)`` (``j ≤ i``): the matrices' entry (i, j), an array of shape (b,) (or
        broadcasting to it), asked for once, when the factorization reaches it.
        ``entry(0, 0)`` may be ``None``: every matrix has 1 there (it is scaled so), and the
        first column of the factor is the first column of the matrices.
    size : int
        ``P``, the matrices' order.
    floors : sequence of float or ndarray, optional
        The least value of each squared pivot (default :data:`TINY`).

    Returns
    -------
    list of lists of ndarray
        ``L[i][j]`` (``j ≤ i``; ``None`` above the diagonal).
    """
    P = size
    floors = [TINY] * P if floors is None else floors
    L = [[None] * P for _ in range(P)]
    for j in range(P):
        s = entry(j, j)
        if j == 0 and s is None:
            L[0][0] = 1.0
            for i in range(1, P):
                L[i][0] = entry(i, 0)
            continue
        for k in range(j):
            s = s - L[j][k] ** 2
        L[j][j] = np.sqrt(np.maximum(s, floors[j]))
        for i in range(j + 1, P):
            v = entry(i, j)
            for k in range(j):
                v = v - L[i][k] * L[j][k]
            L[i][j] = v / L[j][j]
    return L


def cholesky_solve(L, rhs):
    """:math:`(L L^\top)^{-1}` ``rhs`` for a factor of :func:`cholesky_factor`.

    ``rhs``: a sequence of ``P`` arrays (one per unknown) whose last axis is the batch's;
    returns their solution stacked, shape ``(P, ...)``."""
    P = len(L)
    z = _forward(L, rhs)
    x = [None] * P
    for i in reversed(range(P)):
        v = z[i]
        for k in range(i + 1, P):
            v = v - L[k][i] * x[k]
        x[i] = v / L[i][i]
    return np.stack(x)


def inverse_trace(L):
    r""":math:`\operatorname{tr} A^{-1} = \|L^{-1}\|_F^2` per matrix of the batch: a bound on
    the smallest eigenvalue, :math:`\lambda_{\min} \ge 1 / \operatorname{tr} A^{-1}`."""
    P = len(L)
    total = 0.0
    for c in range(P):
        # Column c of L⁻¹: the unit vector e_c, whose entries before c are 0.
        column = _forward(L, [1.0 if i == c else 0.0 for i in range(P)], first=c)
        for i in range(c, P):
            total = total + column[i] ** 2
    return total


def _forward(L, rhs, first=0):
    """:math:`L^{-1}` ``rhs`` by forward substitution, from unknown ``first`` on (``rhs`` is
    0 before it, and so is the solution; those entries are left ``None``)."""
    z = [None] * len(L)
    for i in range(first, len(L)):
        v = rhs[i]
        for k in range(first, i):
            v = v - L[i][k] * z[k]
        z[i] = v / L[i][i]
    return z


def batch_entries(matrices):
    """The entries of a batch of matrices ``(b, P, P)`` as :func:`cholesky_factor` asks for
    them (contiguous over the batch), and ``P``."""
    columns = np.ascontiguousarray(np.moveaxis(matrices, 0, -1))

    def entry(i, j):
        return columns[i, j]

    return entry, matrices.shape[1]
