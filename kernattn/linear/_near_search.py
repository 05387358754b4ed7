r"""The near field's error, measured, and the searches that choose the near field and the far
field's rank from it.

A :class:`~kernattn.linear._near_field.NearFieldKernel` computes each query's near keys
exactly and the rest from Nyström features; its error is measured, not assumed: the split
weights of sampled training rows (each left out of its own sums) against the exact weights
(:func:`weight_errors`). The error probe (:class:`ErrorProbe`) keeps only what does not
depend on the near field or the far field's map — each sampled row's exact total, its
largest logit, its exact kernel on a sample of keys — so that the near field can be grown
(:func:`grow_near_cells`) and several maps compared (:func:`search_rank`,
``n_components="auto"``) at the cost of the near keys of 100 rows per step. The searches
take plain settings (the tolerance, the most near keys, the cost of a split) and return
values; the in-memory fit runs them on all keys, a fit in parts on the sample of its first
pass.
"""

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.blocks import query_block_size
from kernattn._core.sums import augment_queries, kernel_sums, rescaling, row_shift
from kernattn.linear._cost import CANDIDATE_COMPONENTS, MAX_COMPONENTS, split_cost
from kernattn.linear._near_field import NEAR_MASS


def weight_errors(kernel, rows, n_keys_sample=None, random_state=None):
    r"""The L1 distance between the split weights and the exact weights of training rows.

    Row ``i`` (an index into the keys given to ``kernel.bind``) is a query left out of the
    sums, as a new query would be: its own key is removed from its near field and from
    the exact weights. With ``n_keys_sample`` below the number of keys, the far keys'
    part of the distance is estimated from a uniform sample of that many keys (scaled
    by the number of far keys over the number sampled); the near keys' part is exact.

    Parameters
    ----------
    rows : array_like of int
        Training rows (indices into the keys given to :meth:`bind`).
    n_keys_sample : int, optional
        Keys the far part is measured on; all by default.
    random_state : int, RandomState instance or None
        Draws the sample of keys.

    Returns
    -------
    errors : ndarray of shape (len(rows),)
        :math:`\sum_j |\hat w_j - w_j|` per row, between 0 and 2.
    """
    return ErrorProbe(kernel, rows, n_keys_sample, random_state).use_kernel().errors()


class ErrorProbe:
    r"""The exact kernel of sampled training rows (each left out of its own sums), against
    which any number of near cells, and any Nyström map of the far field, is measured.

    For a query :math:`q` with exact kernel values :math:`\kappa_j` (shifted by the
    largest), total :math:`T = \sum_j \kappa_j`, near mass :math:`M = \sum_{N(q)}
    \kappa_j`, low-rank values :math:`\ell_j = a(q)^\top G\, a(k_j) s_j` and far mass
    :math:`F` (the low-rank sum over the far keys, 0 when it is not positive), the split
    weights are :math:`\kappa_j / D` on the near keys and :math:`\ell_j / D` on the far
    keys, :math:`D = M + F`, so the L1 error is

    .. math::

        M \left|\tfrac1D - \tfrac1T\right| + \sum_{j \notin N(q)}
        \left|\tfrac{\ell_j}{D} - \tfrac{\kappa_j}{T}\right| :

    the near keys' part is exact, the far keys' part is measured on a uniform sample of
    keys (scaled by the far keys over the far keys sampled). :math:`F` is the kernel's own
    far sum (:meth:`use_kernel`), or, for a map whose sums over every key are not taken
    (:meth:`use_map`, to choose the rank), the same scaled sum over the sampled far keys.
    A query with a near mass below :math:`e^{-18}` of a key at distance 0 is computed
    exactly by the estimator: its error is 0.
    """

    def __init__(self, kernel, rows, n_keys_sample=None, random_state=None):
        self.kernel = kernel
        near = kernel.near_keys
        n = len(near["order"])
        position = np.empty(n, dtype=np.int64)
        position[near["order"]] = np.arange(n)
        self.own = position[np.asarray(rows)]
        self.Q = near["keys"][self.own]
        self.cells = near["cells"][self.own]
        if n_keys_sample is None or n_keys_sample >= n:
            self.sample = np.arange(n)
        else:
            rng = np.random.default_rng(check_random_state(random_state).randint(2**31 - 1))
            self.sample = np.sort(rng.choice(n, n_keys_sample, replace=False))
        self.sample_cells = near["cells"][self.sample]
        self._augmented = augment_queries(self.Q)
        self.top, self.total = self._exact_totals()
        self.sample_kernel = self._kernel(np.arange(len(self.Q)), self.sample)
        self.low_rank = None
        self._masses = {}

    def _kernel(self, queries, positions):
        """Exact kernel values of queries (indices into the probe's) on keys at
        ``positions`` (cell order), shifted by each query's largest, own key at 0."""
        p = self.Q.shape[1] + 2
        logits = self._augmented[queries] @ self.kernel.near_keys["table"][positions, :p].T
        logits[positions[None, :] == self.own[queries][:, None]] = -np.inf
        logits -= self.top[queries][:, None]
        with np.errstate(under="ignore"):
            return np.exp(logits, out=logits)

    def _exact_totals(self):
        """Per query the largest logit over the other keys and the sum of the kernel
        shifted by it (the online softmax over tiles of keys)."""
        table = self.kernel.near_keys["table"]
        p = self.Q.shape[1] + 2

        def logits(keys, out):
            return np.matmul(self._augmented, table[keys, :p].T, out=out)

        def total(weights, keys):
            return weights.sum(axis=1, keepdims=True)

        own = (np.arange(len(self.Q)), self.own)
        tile = query_block_size(len(table), len(self.Q))
        top, sums = kernel_sums(logits, len(table), total, floor=False, left_out=own, tile=tile)
        return top, sums[:, 0]

    def _near_mass(self):
        """Per query the exact kernel's mass on its near keys (at the kernel's current near
        cells; kept for each number of cells, since every far field meets the same)."""
        kernel = self.kernel
        P = kernel.n_near_cells
        if P not in self._masses:
            mass = np.zeros(len(self.Q))
            for c in np.unique(self.cells):
                group = np.flatnonzero(self.cells == c)
                mass[group] = self._kernel(group, kernel.near_rows(c)).sum(axis=1)
            self._masses[P] = mass
        return self._masses[P]

    def use_kernel(self):
        """Measure the kernel's own far field (its sums over every key)."""
        kernel = self.kernel
        self._map = kernel.feature_map
        logs = self._map.log_transform(self.Q)
        self._query_scale = row_shift(logs)
        features = np.exp(logs - self._query_scale[:, None])
        self._far_logs = logs + kernel.far.key_log_scale[0] - self.top[:, None]
        with np.errstate(over="ignore", under="ignore"):
            scale = np.exp(self._query_scale + kernel.far.key_log_scale[0] - self.top)
            self.low_rank = self._map.inner(features.T).T @ kernel.key_features(self.sample).T
            self.low_rank *= scale[:, None]
        self.sampled_far = False
        self.columns = slice(None)
        return self

    def use_map(self, feature_map):
        """Measure a far field of another fitted Nyström map, its far sums estimated on the
        sampled keys."""
        near = self.kernel.near_keys
        logs = feature_map.log_transform(self.Q)
        query_scale = row_shift(logs)
        # Every few sampled keys: a map being compared with others needs less precision.
        self.columns = slice(None, None, max(1, len(self.sample) // SEARCH_KEYS))
        sample = self.sample[self.columns]
        key_logs = feature_map.log_transform(near["keys"][sample])
        key_logs += near["log_weight"][sample][:, None]
        key_scale = row_shift(key_logs, axis=None)
        with np.errstate(over="ignore", under="ignore"):
            queries = feature_map.inner(np.exp(logs - query_scale[:, None]).T).T
            self.low_rank = queries @ np.exp(key_logs - key_scale).T
            self.low_rank *= rescaling(query_scale + key_scale, self.top)[:, None]
        self.sampled_far = True
        return self

    def errors(self):
        """Per query, the L1 distance of the split weights (at the kernel's current near
        cells) from the exact ones: near keys exactly, far keys on the sample."""
        kernel = self.kernel
        counts = np.diff(kernel.near_keys["start"])
        queries = np.arange(len(self.Q))
        near_cells = kernel.near_cells[self.cells]
        # Which sampled keys are far from each query: their cell is not one of its near.
        is_near = np.zeros((len(self.Q), kernel.n_cells), dtype=bool)
        is_near[queries[:, None], near_cells] = True
        far_sample = ~is_near[:, self.sample_cells[self.columns]]
        n_far_sample = far_sample.sum(axis=1)
        factor = (counts.sum() - counts[near_cells].sum(axis=1)) / np.maximum(n_far_sample, 1)
        mass = self._near_mass()
        far = np.zeros(len(self.Q))
        if not self.sampled_far:
            for c in np.unique(self.cells):
                group = np.flatnonzero(self.cells == c)
                with np.errstate(over="ignore", invalid="ignore"):
                    far[group] = np.exp(self._far_logs[group]) @ kernel.far_sums(c)[:, -1]
        low_rank = np.where(far_sample, self.low_rank, 0.0)
        if self.sampled_far:
            far = factor * low_rank.sum(axis=1)
        keep = (far > 0) & np.isfinite(far)
        denominator = mass + np.where(keep, far, 0.0)
        low_rank[~keep] = 0.0
        exact = np.where(far_sample, self.sample_kernel[:, self.columns], 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gap = np.abs(low_rank / denominator[:, None] - exact / self.total[:, None])
            errors = mass * np.abs(1 / denominator - 1 / self.total) + factor * gap.sum(axis=1)
            served = np.log(mass) + self.top > np.log(NEAR_MASS)
        return np.where(served & np.isfinite(errors), errors, 0.0)


#: Sampled keys on which a candidate map's far field is measured (every few of the probe's).
SEARCH_KEYS = 5000
#: Near cells tried, in this order: steps of about 2^(1/4), so the chosen near field is at most
#: about 1.2 times the smallest that meets the tolerance.
NEAR_CELL_STEPS = np.unique(np.round(2.0 ** (np.arange(80) / 4)).astype(np.int64))


def grow_near_cells(kernel, probe, tol, max_near_keys, first=1):
    """The fewest near cells (on ``NEAR_CELL_STEPS``) whose measured mean weight error is
    within ``tol``, or the most within ``max_near_keys`` keys per query; the kernel is left
    set to them. The search starts at ``first`` cells (a guess) and moves down while the
    tolerance is met, else up (doubling, then back step by step). Returns the errors at the
    chosen number and whether they meet ``tol``."""
    steps = NEAR_CELL_STEPS[NEAR_CELL_STEPS < kernel.n_cells].tolist() + [kernel.n_cells]
    measured = {}

    def measure(i):
        if i not in measured:
            kernel.set_near_cells(steps[i])
            too_many = i > 0 and kernel.mean_near_keys > max_near_keys
            measured[i] = None if too_many else probe.errors()
        return measured[i]

    def met(i):
        errors = measure(i)
        return errors is not None and errors.mean() <= tol

    i = int(np.searchsorted(steps, max(first, 1)))
    i = min(i, len(steps) - 1)
    while i > 0 and measure(i) is None:
        i -= 1
    if met(i):
        # Down while the tolerance is met.
        while i > 0 and met(i - 1):
            i -= 1
    else:
        # Up by doubling (four steps) until met or out of bounds, then back while met.
        low = i
        while not met(i):
            if measure(i) is None or i == len(steps) - 1:
                break
            low, i = i, min(i + 4, len(steps) - 1)
        while met(i) and i - 1 > low and met(i - 1):
            i -= 1
        if not met(i):
            # The most cells within the bound: the last step that was measured.
            i = max(j for j, errors in measured.items() if errors is not None)
    kernel.set_near_cells(steps[i])
    errors = measure(i)
    return errors, bool(errors.mean() <= tol)


def choose_near_cells(kernel, tol, max_near_keys, rows, n_keys_sample, random_state=None):
    """The fewest near cells whose measured weight error is within ``tol``.

    Grows the near cells (1, 2, 3, 4, 6, 8, 11, …, steps of about √2) until the mean L1
    weight error of the sampled training ``rows`` (:func:`weight_errors`)
    is at most ``tol``, or until more cells would compute more than ``max_near_keys`` keys
    exactly per query (then the most cells within that bound). The exact kernel of the
    rows is computed once.

    Parameters
    ----------
    kernel : NearFieldKernel
        With its keys accumulated; left set to the chosen number of cells.
    tol : float
        Tolerance on the mean L1 distance between split and exact weights.
    max_near_keys : float
        Most keys computed exactly per query (on average).
    rows : ndarray of int
        Training rows (indices into the bound keys) used as left-out queries.
    n_keys_sample : int
        Keys on which the far field's part of the error is measured.
    random_state : int, RandomState instance or None

    Returns
    -------
    errors : ndarray of shape (len(rows),)
        The per-row L1 errors at the chosen number of cells.
    met : bool
        Whether the mean error is within ``tol``.
    """
    probe = ErrorProbe(kernel, rows, n_keys_sample, random_state).use_kernel()
    return grow_near_cells(kernel, probe, tol, max_near_keys)


def search_rank(kernel, probe, n_keys, cap, fit_map, cost_of, tol, n_subsample):
    """The far field's rank chosen with the near field, from the accuracy target.

    For each candidate rank (32, 64, …, at most a quarter of the kernel's keys and half of
    ``n_subsample``), the map ``fit_map(r)`` and the fewest near cells meeting ``tol`` on
    ``kernel`` (in memory, or the sample of a fit in parts), at most ``cap`` near keys,
    starting from the lower rank's; the map of the lowest ``cost_of(map)`` meeting ``tol``
    is kept (the highest rank if none does). A rank whose features alone, at ``n_keys``
    keys, cost more than the best so far ends the search. Returns the map and its near
    cells on ``kernel``."""
    top = min(kernel.n_keys // 4, n_subsample // 2, MAX_COMPONENTS)
    ranks = [r for r in CANDIDATE_COMPONENTS if r <= max(top, CANDIDATE_COMPONENTS[0])]
    best, fallback, first = None, None, 1
    for r in ranks:
        if best is not None and split_cost(n_keys, r, 0, 0, kernel.n_outputs) >= best[0]:
            break  # with no near field at all, r features cost more than the best
        feature_map = fit_map(r)
        probe.use_map(feature_map)
        # A higher rank needs at most the near field of a lower one: start there.
        _, met = grow_near_cells(kernel, probe, tol, cap, first)
        first = kernel.n_near_cells
        choice = (cost_of(feature_map), feature_map, kernel.n_near_cells)
        if met and (best is None or choice[0] < best[0]):
            best = choice
        if not met:
            fallback = choice
    _, feature_map, cells = best if best is not None else fallback
    return feature_map, cells
