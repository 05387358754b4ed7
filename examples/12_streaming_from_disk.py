"""Streaming: ten million rows from disk in bounded memory
=======================================================

**The question.** Linear attention summarizes the training set by sums over its rows,
``S = Σ_i φ(k_i) y_iᵀ`` and ``z = Σ_i φ(k_i)``. Can it then learn from more rows than fit in
memory, reading them from disk a chunk at a time — and what does that cost in memory, time
and accuracy?

**How.** Ten million rows (d = 8 inputs and the target, 690 MB of float64) are written to
a file under the temporary folder, a chunk at a time, and read back 250 000 rows at a time.
:func:`kernattn.fit_chunks` reads it twice: a first pass takes what the kernel needs from
the data (the mean and spread of every column, and a uniform sample of rows for the Nyström
landmarks), the second adds each chunk's features to the sums. A loop of ``partial_fit``
calls would fix all of that from the first chunk alone.

**What to look at.** In ``12_streaming_from_disk.png``:

- left: the memory the fit holds (numpy arrays and Python objects, traced with
  ``tracemalloc``) as the rows stream by, in both passes, against the size of the data on
  disk: flat, a few chunks' worth, however many rows;
- right: the held-out error of fits on more and more rows, streamed, against in-memory fits
  of the same estimator on the first rows, and the noise floor. Streamed and in-memory fits
  agree up to their samples of landmarks (and the few queries far from every landmark,
  which the in-memory fit computes exactly from its kept keys and a streamed fit gives the
  training mean). The error does not fall with n here: at this bandwidth the r = 64
  landmarks, not the number of rows, limit the resolution.

The script prints the peak memory (traced, and the process's largest resident set) and the
times. The file is deleted at the end. Run ``python 12_streaming_from_disk.py [--out DIR]``;
``KERNATTN_SMOKE=1`` streams 200 000 rows.

**Run time.** About 15 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import resource
import tempfile
import time
import tracemalloc
import warnings

import matplotlib.pyplot as plt
import numpy as np

from kernattn import LinearAttentionRegressor, fit_chunks

parser = argparse.ArgumentParser(description="Fit linear attention on rows streamed from disk.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

D = 8
N_ROWS = 200_000 if SMOKE else 10_000_000
CHUNK = 25_000 if SMOKE else 250_000
N_TEST = 20_000
# Bandwidths from leave-one-out on 2 000 rows of this task (as KernelSmoother(bandwidth=
# "loo") finds them): narrow on the three features the target depends on, wide elsewhere.
BANDWIDTH = np.array([0.32, 0.36, 0.44, 500.0, 500.0, 2.3, 500.0, 500.0])
# Nyström features alone: a streamed fit keeps no keys, hence no exact near field.
PARAMS = dict(
    feature_map="nystroem", n_components=64, n_near_keys=0, bandwidth=BANDWIDTH, random_state=0
)


def make_rows(n, seed):
    """Gaussian inputs, a smooth target of three of them, noise sd 0.5: (n, 9) float64."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    f = np.sin(0.7 * X[:, 0] + 0.5 * X[:, 1]) + 0.25 * X[:, 2] ** 2 / (1 + 0.25 * X[:, 2] ** 2)
    return np.column_stack([X, f + 0.5 * rng.standard_normal(n)])


# %%
# Write the rows to disk a chunk at a time: the whole table is never in memory.
folder = tempfile.mkdtemp(prefix="kernattn-stream-")
path = os.path.join(folder, "rows.f64")
ROW_BYTES = (D + 1) * 8
start = time.perf_counter()
with open(path, "wb") as handle:
    for i, first in enumerate(range(0, N_ROWS, CHUNK)):
        make_rows(min(CHUNK, N_ROWS - first), seed=i).tofile(handle)
print(
    f"wrote {N_ROWS:,} rows ({os.path.getsize(path) / 2**20:.0f} MB) in "
    f"{time.perf_counter() - start:.1f} s"
)
test = make_rows(N_TEST, seed=10**6)
X_test, y_test = test[:, :D], test[:, D]


# %%
# The chunks: read from the file one at a time (``np.fromfile`` with an offset; a
# ``numpy.memmap`` works as well, but the pages it maps count in the process's resident
# set until the system reclaims them). ``memory`` records the traced memory as each chunk
# is read (in both passes).
memory = []


def read_rows(first, n):
    block = np.fromfile(path, dtype=np.float64, count=n * (D + 1), offset=first * ROW_BYTES)
    return block.reshape(n, D + 1)


def chunks(n_rows):
    """A function giving a fresh iterator over the first ``n_rows`` rows, chunk by chunk
    (``fit_chunks`` reads the chunks twice)."""

    def read():
        for first in range(0, n_rows, CHUNK):
            block = read_rows(first, min(CHUNK, n_rows - first))
            memory.append(tracemalloc.get_traced_memory()[0])
            yield block[:, :D], block[:, D]

    return read


def peak_resident_mb():
    """The process's peak resident set: Linux's VmHWM (``ru_maxrss`` would also count the
    process this one was started from), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_mse(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # rows far from every landmark
        return float(np.mean((model.predict(X_test) - y_test) ** 2))


# %%
# The full fit, streamed, with its memory traced.
tracemalloc.start()
start = time.perf_counter()
streamed = fit_chunks(LinearAttentionRegressor(n_jobs=2, **PARAMS), chunks(N_ROWS))
fit_time = time.perf_counter() - start
_, traced_peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
trace = np.array(memory) / 2**20
full_mse = test_mse(streamed)
peak_rss = peak_resident_mb()
data_mb = N_ROWS * (D + 1) * 8 / 2**20
print(
    f"streamed fit of {N_ROWS:,} rows in {fit_time:.1f} s; peak traced memory "
    f"{traced_peak / 2**20:.0f} MB, peak resident set of the process {peak_rss:.0f} MB, "
    f"data {data_mb:.0f} MB; held-out MSE {full_mse:.4f} (noise 0.25)"
)

# %%
# Smaller fits: streamed and in memory on the first rows.
sizes = [N_ROWS // 100, N_ROWS // 10]
streamed_mse, memory_mse = [], []
for n in sizes:
    part = fit_chunks(LinearAttentionRegressor(n_jobs=2, **PARAMS), chunks(n))
    streamed_mse.append(test_mse(part))
    block = read_rows(0, n)
    whole = LinearAttentionRegressor(**PARAMS).fit(block[:, :D], block[:, D])
    memory_mse.append(test_mse(whole))
    del block, whole
sizes.append(N_ROWS)
streamed_mse.append(full_mse)
for n, s, m in zip(sizes, streamed_mse, memory_mse + [None], strict=True):
    in_memory = "    (not run)" if m is None else f"{m:13.4f}"
    print(f"{n:>12,} rows: held-out MSE streamed {s:.4f}, in memory{in_memory}")
os.remove(path)
os.rmdir(folder)

# %%
# The figure.
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
n_chunks = len(trace) // 2
rows_read = np.arange(1, len(trace) + 1) * CHUNK / 1e6
left.plot(rows_read[:n_chunks], trace[:n_chunks], "o-", ms=3, label="first pass (statistics)")
left.plot(rows_read[n_chunks:], trace[n_chunks:], "s-", ms=3, label="second pass (sums)")
left.axhline(data_mb, color="0.4", ls="--", label=f"data on disk ({data_mb:.0f} MB)")
left.set_yscale("log")
left.set_xlabel("rows read, both passes (millions)")
left.set_ylabel("traced memory (MB)")
left.set_title("Memory held while streaming")
left.legend(fontsize=9)
right.semilogx(sizes, streamed_mse, "o-", label="streamed (fit_chunks)")
right.semilogx(sizes[:-1], memory_mse, "x", ms=10, label="in memory (fit)")
right.axhline(0.25, color="0.4", ls="--", label="noise variance")
right.set_xlabel("training rows")
right.set_ylabel("held-out MSE")
right.set_title(f"Accuracy (Nyström, r = {PARAMS['n_components']})")
right.legend(fontsize=9)
for axis in (left, right):
    axis.tick_params(labelsize=9)
fig.tight_layout()
fig.savefig(os.path.join(args.out, "12_streaming_from_disk.png"))
print("wrote", os.path.join(args.out, "12_streaming_from_disk.png"))
