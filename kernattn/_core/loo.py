"""Leave-one-out bookkeeping shared by every objective that fits a kernel.

Fitting a kernel (a bandwidth, projections, a feature map's input map) minimizes the
leave-one-out error: each training point is predicted from the others. Its own key is left
out, and so is every *exact duplicate* of it: otherwise a vanishing bandwidth (or a sharp
learned kernel) would copy each target from its twin, and repeated rows would not act like
integer sample weights. This module finds the groups of identical inputs and leaves them out
of a block of logits, of a set of queries, or of feature sums; and it chooses among
candidates by their held-out errors, those groups counted once
(:func:`one_standard_error_choice`).
"""

import numpy as np


def duplicate_groups(X):
    """Group id per row: rows with identical inputs share an id (ids are 0, 1, …)."""
    _, groups = np.unique(X, axis=0, return_inverse=True)
    return groups.ravel()


class DuplicateGroups:
    """The groups of identical training inputs, and what leaving them out needs.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        The training inputs.

    Attributes
    ----------
    ids : ndarray of shape (n,)
        Group id of every row.
    n_groups : int
    """

    def __init__(self, X):
        self.ids = duplicate_groups(X)
        self.n_groups = int(self.ids.max()) + 1 if len(self.ids) else 0
        self._pairs = None
        self._by_group = None

    def _left_out_pairs(self):
        """(query row, key row) pairs with identical inputs, sorted by query row."""
        if self._pairs is None:
            groups = self.ids
            order = np.argsort(groups, kind="stable")
            starts = np.searchsorted(groups[order], np.arange(self.n_groups + 1))
            sizes = np.diff(starts)
            rows = np.repeat(order, sizes[groups[order]])
            cols = np.concatenate([order[starts[g] : starts[g + 1]] for g in groups[order]])
            by_row = np.argsort(rows, kind="stable")
            self._pairs = rows[by_row], cols[by_row]
        return self._pairs

    def pairs_of(self, queries):
        """The left-out pairs of a block of query rows for the reduction: ``(i, j)`` for
        every query ``queries[i]`` and every row ``j`` of its group (itself included)."""
        if self._by_group is None:
            order = np.argsort(self.ids, kind="stable")
            self._by_group = order, np.searchsorted(self.ids[order], np.arange(self.n_groups + 1))
        order, starts = self._by_group
        members = [order[starts[self.ids[q]] : starts[self.ids[q] + 1]] for q in queries]
        return (
            np.repeat(np.arange(len(queries)), [len(m) for m in members]),
            np.concatenate(members),
        )

    def leave_out(self, block, rows, keys=None, value=-np.inf):
        """Set ``block[i, j] = value`` where query ``rows[i]`` and key ``keys[j]`` share a group.

        ``rows`` is a slice or an array of row indices; ``keys`` an array of row indices or
        ``None`` for all rows in order. The pairs are looked up among all of them (O(block)
        work), the keys found at their positions; only keys given twice compare the group
        ids of the whole block.
        """
        left_rows, left_cols = self._left_out_pairs()
        if keys is None and isinstance(rows, slice):
            lo, hi = np.searchsorted(left_rows, [rows.start, rows.stop])
            block[left_rows[lo:hi] - rows.start, left_cols[lo:hi]] = value
            return block
        n = len(self.ids)
        if keys is None:
            position = np.arange(n)
        else:
            keys = np.asarray(keys)
            position = np.full(n, -1)
            position[keys] = np.arange(len(keys))
            if np.any(position[keys] != np.arange(len(keys))):  # a key given twice
                block[self.ids[rows][:, None] == self.ids[keys][None, :]] = value
                return block
        # Each query's pairs, from the sorted list of all of them: O(block) work.
        rows = np.arange(n)[rows]
        start = np.searchsorted(left_rows, rows)
        counts = np.searchsorted(left_rows, rows, side="right") - start
        query = np.repeat(np.arange(len(rows)), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        cols = position[left_cols[np.repeat(start, counts) + offsets]]
        kept = cols >= 0
        block[query[kept], cols[kept]] = value
        return block

    def valid_queries(self, queries, keys):
        """The queries that have at least one key outside their own group."""
        in_keys = np.bincount(self.ids[keys], minlength=self.n_groups)
        return queries[in_keys[self.ids[queries]] < len(keys)]

    def own_sums(self, sample_weight, values):
        """Per row: the sum of ``sample_weight`` and of ``sample_weight × values`` over its
        own group (what a query leaves out of sums taken over all keys)."""
        weight = np.bincount(self.ids, weights=sample_weight, minlength=self.n_groups)
        sums = np.zeros((self.n_groups,) + values.shape[1:])
        np.add.at(sums, self.ids, sample_weight.reshape((-1,) + (1,) * (values.ndim - 1)) * values)
        return weight[self.ids], sums[self.ids]


def one_standard_error_choice(errors, sample_weight, levels, multiple=1.0, groups=None):
    r"""The largest level whose mean held-out (or leave-one-out) error is within one standard
    error (or ``multiple`` of one) of the lowest mean: the one-standard-error rule of
    Breiman et al. (1984), with the levels ordered from the least to the most
    conservative (a choice within noise of a more conservative one keeps that).

    The standard error is that of the weighted mean of the paired differences,
    :math:`\sqrt{\sum_i p_i (d_i - \bar d)^2 / (n_\mathrm{eff} - 1)}` with
    :math:`p_i` the normalized weights and :math:`n_\mathrm{eff} = 1/\sum_i p_i^2`.

    Parameters
    ----------
    errors : ndarray of shape (n_queries, n_levels)
        Each query's error at every level (finite).
    sample_weight : ndarray of shape (n_queries,)
    levels : sequence of float
        Increasing.
    multiple : float
        How many standard errors a lower level must gain to be chosen.
    groups : ndarray of int of shape (n_queries,), optional
        Ids of the groups of identical inputs: a group's errors are pooled first (their
        weighted mean, with their summed weight), so that a row of weight 3 and three
        copies of it count as the same evidence.

    Returns
    -------
    level : float

    Examples
    --------
    >>> errors = np.array([[1.0, 1.1], [2.0, 1.9], [1.5, 1.6], [0.5, 0.5]])
    >>> one_standard_error_choice(errors, np.ones(4), (0.0, 1.0))
    1.0
    """
    if groups is not None:
        _, ids = np.unique(groups, return_inverse=True)
        ids = ids.reshape(-1)
        pooled_weight = np.bincount(ids, weights=sample_weight)
        errors = (
            np.column_stack([np.bincount(ids, weights=sample_weight * e) for e in errors.T])
            / pooled_weight[:, None]
        )
        sample_weight = pooled_weight
    p = sample_weight / sample_weight.sum()
    means = p @ errors
    best = int(np.argmin(means))
    n_eff = 1.0 / np.sum(p**2)
    for j in range(len(levels) - 1, best, -1):
        difference = errors[:, j] - errors[:, best]
        excess = p @ difference
        spread = np.sqrt(max(p @ (difference - excess) ** 2, 0.0) / max(n_eff - 1.0, 1.0))
        if excess <= multiple * spread:
            return float(levels[j])
    return float(levels[best])
