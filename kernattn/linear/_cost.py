r"""The cost model of linear attention's split kernel, in exact kernel values.

The split (each query's near keys exactly, the rest from Nyström features) pays when it costs
less than the exact weights; its cost, per query, for ``n_keys`` keys and as many queries,
counts what it does in units of an exact kernel value (the exact smoother's cost per query is
``n_keys``). The constants were measured once for the package (d = 8, two cores; see
``examples/benchmarks/bench_linear.py``): a near key costs about 1.5 exact kernel values, a
Nyström feature about 2.4 per key and per query, the far sums of a cell about
``near_cells × n_components × (2 n_outputs + 1)`` additions for its ``KEYS_PER_CELL`` keys,
the two cell searches about 460, the error probe about 100, and the fit ``FIT_OVERHEAD`` in
all, whatever n.
"""

import numpy as np

#: Keys per cell of the near field (its cells are the nearest-center cells of random keys).
KEYS_PER_CELL = 50
#: Training rows used as queries to measure the weight error at fit.
ERROR_QUERIES = 100
#: Keys on which the far field's part of the weight error is measured.
ERROR_KEYS = 20_000
#: Ranks tried by ``n_components="auto"`` with the near field (at most a quarter of the keys,
#: at most half of ``n_subsample``).
CANDIDATE_COMPONENTS = (32, 64, 128, 256, 512, 1024)
MAX_COMPONENTS = 1024
#: Costs of the split in exact kernel values (see :func:`split_cost`).
NEAR_KEY_COST = 1.5
FEATURE_COST = 2.4
SUM_COST = 0.16
CELL_COST = 460
#: The split is used when its predicted cost is below this share of the exact weights'.
SPLIT_MARGIN = 0.5
#: The split's fit costs at least this much in exact kernel values, whatever n (landmarks,
#: the error probe and the search of the rank and near field). Measured with
#: ``bench_linear.py`` (d = 8, two cores): the fit takes about 0.9 s + 7 µs per row, and an
#: exact kernel value about 1.7 ns.
FIT_OVERHEAD = 5e8
#: The cheapest split per query (one cell of 50 keys, 32 features, the cell searches and the
#: probe), in exact kernel values.
CHEAPEST_SPLIT = 800
#: With ``n_near_keys="auto"``, up to this many rows get the exact weights without trying the
#: split: for n queries its cheapest form, FIT_OVERHEAD + n CHEAPEST_SPLIT, costs more than
#: SPLIT_MARGIN times the exact n² (about 32 400).
EXACT_ROWS = int(
    (CHEAPEST_SPLIT + np.sqrt(CHEAPEST_SPLIT**2 + 4 * SPLIT_MARGIN * FIT_OVERHEAD))
    / (2 * SPLIT_MARGIN)
)
#: Above this share of queries computed against every key, prediction is no longer linear.
LINEAR_SHARE = 0.1
#: With ``n_near_keys="auto"`` a query computes at most this many keys exactly (beyond
#: 200 000 keys, where 10 % of them would be more): the cost per query stops growing with n.
MAX_NEAR_KEYS = 20_000


def split_cost(n_keys, n_components, near_keys, near_cells, n_outputs=1):
    """Predicted cost of fitting the split kernel on ``n_keys`` keys and predicting as
    many queries, per query, in exact kernel values."""
    m = 2 * n_outputs + 1
    return (
        FIT_OVERHEAD / max(n_keys, 1)
        + NEAR_KEY_COST * near_keys
        + 2 * FEATURE_COST * n_components
        + SUM_COST * near_cells * n_components * m / KEYS_PER_CELL
        + CELL_COST
        + ERROR_QUERIES
    )


def split_pays(kernel):
    """Whether the split kernel (a fitted near field) is predicted to cost less than
    ``SPLIT_MARGIN`` times the exact weights (fit and as many queries as keys)."""
    cost = split_cost(
        kernel.n_keys,
        kernel.n_components,
        kernel.mean_near_keys,
        kernel.n_near_cells,
        kernel.n_outputs,
    )
    return cost < SPLIT_MARGIN * kernel.n_keys


def near_key_cap(n_keys, n_subsample):
    """The most keys of ``n_keys`` a query computes exactly with ``n_near_keys="auto"``:
    ``LINEAR_SHARE`` of them unless that is few keys (``2 n_subsample``), at most
    ``MAX_NEAR_KEYS`` (a cost per query bounded whatever n)."""
    return min(max(LINEAR_SHARE * n_keys, 2 * n_subsample), MAX_NEAR_KEYS)
