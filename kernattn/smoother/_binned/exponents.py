"""The monomials of a local polynomial on the grid and the moments it needs."""

from itertools import product

import numpy as np


def basis_exponents(degree, n_dims):
    """Exponents of the local polynomial's monomials, by total degree (the constant first).

    Examples
    --------
    >>> basis_exponents(1, 2).tolist()
    [[0, 0], [1, 0], [0, 1]]
    """
    exps = [e for e in product(range(degree + 1), repeat=n_dims) if sum(e) <= degree]
    exps.sort(key=lambda e: (sum(e), tuple(-v for v in e)))
    return np.array(exps, dtype=int).reshape(-1, n_dims)


def moment_exponents(degree, n_dims):
    """Exponents of the weight moments a local polynomial of ``degree`` needs (total degree
    up to ``2 * degree``), in the order of :func:`basis_exponents` of twice the degree."""
    return basis_exponents(2 * degree, n_dims)


def pair_index(degree, n_dims):
    """``index[i, j]``: the position of ``basis[i] + basis[j]`` among the moments."""
    basis = basis_exponents(degree, n_dims)
    lookup = {tuple(e): k for k, e in enumerate(moment_exponents(degree, n_dims))}
    return np.array([[lookup[tuple(a + b)] for b in basis] for a in basis], dtype=int)


def basis_in_moments(degree, n_dims):
    """Positions of the basis exponents among the moment exponents."""
    return pair_index(degree, n_dims)[0]


def gaussian_moment(exponent):
    """E[Π Z_a^{e_a}] for independent standard normals (0 for an odd exponent)."""
    out = 1.0
    for e in np.atleast_1d(exponent):
        out *= 0.0 if e % 2 else float(np.prod(np.arange(e - 1, 0, -2), initial=1))
    return out
