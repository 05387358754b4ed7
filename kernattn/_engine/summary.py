r"""The first pass over training rows in parts: the statistics and the uniform sample a fit
needs before its sums.

What a kernel needs from the data before its sums (the center, Scott's bandwidth, the
targets' offset and spread, Nyström landmarks, the queries of a bandwidth search) is taken
in one pass over the parts, each summarized on its own and the summaries merged:

- the weighted mean and sum of squared deviations of every input and target column,
  combined pairwise as Chan, Golub & LeVeque (1979) combine them,
  :math:`\bar x = \bar x_a + \delta\, W_b/W`,
  :math:`M_2 = M_{2,a} + M_{2,b} + \delta^2 W_a W_b / W` (:math:`\delta = \bar x_b - \bar
  x_a`, :math:`W` the sums of weights);
- a uniform sample of ``n_sample`` rows without replacement: every row draws a uniform
  sampling key from its part's seed (the estimator's seed and the part's index: the same
  draws wherever and whenever the part is summarized), each part keeps its ``n_sample``
  smallest and a merge keeps the smallest of both;
- counts of bad entries (NaN, infinity, negative weights), reported by :func:`check_summary`.
"""

import copy

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.rows import as_part


class RowSummary:
    """What the first pass takes from the rows of positive weight: weighted means and
    sums of squared deviations of the inputs and targets, the largest weight and |input|,
    the target extremes, checks, and the rows with the smallest sampling keys."""

    def __init__(self, X, Y, w, start, seed, n_sample):
        self.n_rows = len(X)
        self.n_sample = n_sample
        self.bad_inputs = int(np.sum(~np.isfinite(X))) + int(np.sum(~np.isfinite(Y)))
        self.bad_weights = int(np.sum(~(w >= 0)) + np.sum(~np.isfinite(w)))
        if self.bad_inputs or self.bad_weights:
            # Reported by check_summary; nothing else is needed from a bad chunk.
            X, Y, w = X[:0], Y[:0], w[:0]
        active = np.flatnonzero(w > 0)
        X, Y, w = X[active], Y[active], w[active]
        self.total = w.sum()
        self.count = len(w)
        self.max_weight = w.max(initial=0.0)
        self.max_abs = np.max(np.abs(X), axis=0, initial=0.0)
        self.y_min = np.min(Y, axis=0, initial=np.inf)
        self.y_max = np.max(Y, axis=0, initial=-np.inf)
        self.x_mean, self.x_m2 = self._moments(X, w)
        self.y_mean, self.y_m2 = self._moments(Y, w)
        keys = np.random.default_rng(seed).random(len(w))
        keep = np.argsort(keys, kind="stable")[:n_sample]
        self.sample = (keys[keep], start + active[keep], X[keep], Y[keep], w[keep])

    def _moments(self, A, w):
        if not len(w):
            return np.zeros(A.shape[1]), np.zeros(A.shape[1])
        mean = w @ A / self.total
        return mean, w @ (A - mean) ** 2

    @staticmethod
    def merge(*parts):
        out = copy.copy(parts[0])
        for b in parts[1:]:
            a = out
            out = copy.copy(a)
            out.n_rows = a.n_rows + b.n_rows
            out.bad_inputs = a.bad_inputs + b.bad_inputs
            out.bad_weights = a.bad_weights + b.bad_weights
            out.count = a.count + b.count
            out.total = a.total + b.total
            out.max_weight = max(a.max_weight, b.max_weight)
            out.max_abs = np.maximum(a.max_abs, b.max_abs)
            out.y_min = np.minimum(a.y_min, b.y_min)
            out.y_max = np.maximum(a.y_max, b.y_max)
            for name in ("x", "y"):
                mean_a, m2_a = getattr(a, f"{name}_mean"), getattr(a, f"{name}_m2")
                mean_b, m2_b = getattr(b, f"{name}_mean"), getattr(b, f"{name}_m2")
                if not b.total:
                    mean, m2 = mean_a, m2_a
                elif not a.total:
                    mean, m2 = mean_b, m2_b
                else:
                    # Chan et al.'s pairwise update: no cancellation of large sums.
                    delta = mean_b - mean_a
                    mean = mean_a + delta * (b.total / out.total)
                    m2 = m2_a + m2_b + delta**2 * (a.total * b.total / out.total)
                setattr(out, f"{name}_mean", mean)
                setattr(out, f"{name}_m2", m2)
            joined = [np.concatenate(pair) for pair in zip(a.sample, b.sample, strict=True)]
            keep = np.argsort(joined[0], kind="stable")[: out.n_sample]
            out.sample = tuple(column[keep] for column in joined)
        return out


def summarize(X, y, w, part, seed, n_sample):
    """The :class:`RowSummary` of one part (a :class:`~kernattn._core.rows.Part`: rows
    ``part.start, part.start + 1, …`` of the whole), its sampling keys drawn from
    ``[seed, part.index]``."""
    X, Y, w = as_part(X, y, w)
    return RowSummary(X, Y, w, part.start, [seed, part.index], n_sample)


def sample_seed(random_state):
    """A seed for the workers' sampling keys that leaves ``random_state`` untouched when it
    is an int (the kernel's own draws then match the in-memory fit's)."""
    if random_state is None or isinstance(random_state, np.random.RandomState):
        return int(check_random_state(random_state).randint(2**31 - 1))
    return int(random_state)


def check_summary(summary):
    """Raise for the bad entries the first pass counted."""
    if summary.bad_inputs:
        raise ValueError(
            f"Input contains NaN or infinity: {summary.bad_inputs} entries of X or y are not "
            "finite"
        )
    if summary.bad_weights:
        raise ValueError(
            f"sample_weight must be finite and non-negative; {summary.bad_weights} entries are not"
        )
    if not summary.count:
        raise ValueError("sample_weight must have at least one positive entry")
