"""The estimators on Dask collections: the same numbers as in memory, computed on workers."""

import copy
import functools
import os
import threading
import time
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor  # noqa: E402
from kernattn.linear import _cost as cost_module  # noqa: E402
from kernattn.linear import _regressor as linear_module  # noqa: E402
from kernattn.linear._conformal_parts import weights_on_parts  # noqa: E402
from kernattn.linear._near_field import NearFieldKernel  # noqa: E402


@pytest.fixture(scope="module")
def client():
    # Starting worker processes sets thread variables such as OMP_NUM_THREADS=1 in this
    # process's environment; they are put back afterwards, so that libraries loaded by later
    # tests start with their usual number of threads.
    environ = dict(os.environ)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    with cluster, distributed.Client(cluster) as client:
        # Import the package on the workers once, here, not inside the first test.
        client.run(lambda: __import__("kernattn.linear"))
        yield client
    os.environ.clear()
    os.environ.update(environ)


def _data(n=2400, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    return X, y


def _quiet(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return call(*args, **kwargs)


@pytest.mark.parametrize("feature_map", ["positive", "nystroem"])
def test_linear_fit_on_partitions_is_the_in_memory_fit(client, feature_map):
    X, y = _data()
    # Queries spread wider than the data: some lie beyond the features' reach and are
    # computed exactly, in memory from the kept keys, on the cluster from the partitions.
    Q = 1.6 * np.random.default_rng(1).normal(size=(400, 3))
    params = dict(
        feature_map=feature_map, n_components=64, n_near_keys=0, random_state=0, n_subsample=5000
    )
    memory = LinearAttentionRegressor(**params).fit(X, y)
    cluster = LinearAttentionRegressor(**params).fit(
        da.from_array(X, chunks=500), da.from_array(y, chunks=500)
    )
    np.testing.assert_allclose(cluster.center_, memory.center_, rtol=1e-12)
    np.testing.assert_allclose(cluster.bandwidth_, memory.bandwidth_, rtol=1e-12)
    prediction, spread = cluster.predict(da.from_array(Q, chunks=150), return_std=True)
    assert isinstance(prediction, da.Array)
    assert prediction.chunks == ((150, 150, 100),)
    expected, expected_spread = _quiet(memory.predict, Q, return_std=True)
    _, _, unreliable = memory.kernel_.moments(Q, 0)
    assert unreliable.any()
    np.testing.assert_allclose(prediction.compute(), expected, rtol=1e-10, atol=1e-10)
    # The spreads the features lose to cancellation are redone with the exact weights
    # against the partitions, as in memory against the kept keys.
    np.testing.assert_allclose(spread.compute(), expected_spread, rtol=1e-8, atol=1e-10)
    # A model fitted on the cluster predicts numpy queries through it, with the same result.
    np.testing.assert_allclose(cluster.predict(Q[:40]), expected[:40], rtol=1e-10, atol=1e-10)


def test_linear_fit_with_sample_weight_and_several_outputs(client):
    X, y = _data(n=1500)
    Y = np.column_stack([y, -3 * y + 1])
    weight = np.random.default_rng(2).integers(0, 3, len(X)).astype(float)
    params = dict(n_components=64, n_near_keys=0, random_state=0, bandwidth=0.8)
    memory = LinearAttentionRegressor(**params).fit(X, Y, sample_weight=weight)
    cluster = LinearAttentionRegressor(**params).fit(
        da.from_array(X, chunks=400),
        da.from_array(Y, chunks=(400, 2)),
        sample_weight=da.from_array(weight, chunks=400),
    )
    Q = X[:200]
    mean, std = cluster.predict(da.from_array(Q, chunks=100), return_std=True)
    assert mean.shape == std.shape == (200, 2)
    expected_mean, expected_std = _quiet(memory.predict, Q, return_std=True)
    np.testing.assert_allclose(mean.compute(), expected_mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(std.compute(), expected_std, rtol=1e-6, atol=1e-8)


def test_linear_sample_on_the_workers_is_uniform_and_reproducible(client):
    X, y = _data(n=6000)
    params = dict(n_components=32, n_near_keys=0, n_subsample=500, random_state=3)
    Xd, yd = da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)
    first = LinearAttentionRegressor(**params).fit(Xd, yd)
    second = LinearAttentionRegressor(**params).fit(Xd, yd)
    np.testing.assert_array_equal(
        first.feature_maps_[0].landmarks_, second.feature_maps_[0].landmarks_
    )
    # Landmarks chosen from a sample drawn across all partitions cover all of the data:
    # the first input's landmarks reach both of its tails (in kernel units).
    landmarks = first.feature_maps_[0].landmarks_[:, 0] * first.bandwidth_[0] + first.center_[0]
    assert landmarks.min() < -1.5 and landmarks.max() > 1.5
    Q = X[:300]
    memory = LinearAttentionRegressor(**params).fit(X, y)
    error_cluster = np.mean((_quiet(first.predict, Q) - y[:300]) ** 2)
    error_memory = np.mean((_quiet(memory.predict, Q) - y[:300]) ** 2)
    assert error_cluster < 1.5 * error_memory


def test_linear_fit_accepts_dask_dataframes(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y = _data(n=1200)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    params = dict(n_components=32, n_near_keys=0, random_state=0)
    memory = LinearAttentionRegressor(**params).fit(frame, y)
    cluster = LinearAttentionRegressor(**params).fit(
        dd.from_pandas(frame, npartitions=3), dd.from_pandas(pd.Series(y), npartitions=3)
    )
    assert list(cluster.feature_names_in_) == ["a", "b", "c"]
    prediction = cluster.predict(dd.from_pandas(frame.iloc[:100], npartitions=2))
    np.testing.assert_allclose(
        prediction.compute(), _quiet(memory.predict, frame.iloc[:100]), rtol=1e-10
    )
    with pytest.raises(ValueError, match="feature names"):
        cluster.predict(dd.from_pandas(frame.rename(columns={"a": "z"}), npartitions=1))


def test_linear_fit_rejects_bad_data_and_keeps_the_last_fit(client):
    X, y = _data(n=600)
    model = LinearAttentionRegressor(n_components=16, n_near_keys=0, random_state=0).fit(X, y)
    before = model.predict(X[:5])
    bad = X.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        model.fit(da.from_array(bad, chunks=200), da.from_array(y, chunks=200))
    with pytest.raises(ValueError, match="non-negative"):
        model.fit(
            da.from_array(X, chunks=200),
            da.from_array(y, chunks=200),
            sample_weight=-np.ones(len(X)),
        )
    with pytest.raises(ValueError, match="rows"):
        model.fit(da.from_array(X, chunks=200), da.from_array(y[:-1], chunks=200))
    np.testing.assert_array_equal(model.predict(X[:5]), before)
    with pytest.raises(ValueError, match="features"):
        model.predict(da.from_array(X[:, :2], chunks=200))


# ------------------------------------------------------------ the near field on partitions


def _near_field_in_memory(cluster, X, y, weight):
    """An in-memory near field with the cluster model's centers, feature map and near
    cells, its sums taken from the whole training set at once."""
    kernel = NearFieldKernel(
        cluster.kernel_.far.empty(),
        cluster.kernel_.centers,
        cluster.kernel_.n_near_cells,
    )
    values = y.reshape(len(y), -1) - cluster._y_offset
    active = weight > 0
    kernel.bind(X[active], weight[active])
    return kernel.accumulate(X[active], values[active], weight[active])


def _near_field_on_partitions(X, y, n_near_keys, chunks):
    """Uneven sample weights (every ninth 0) and a near-field fit on partitions of
    ``chunks`` rows."""
    weight = np.random.default_rng(7).uniform(0.5, 2.0, len(X))
    weight[::9] = 0.0
    model = LinearAttentionRegressor(n_near_keys=n_near_keys, bandwidth=0.3, random_state=0)
    cluster = _quiet(
        model.fit,
        da.from_array(X, chunks=chunks),
        da.from_array(y, chunks=chunks),
        sample_weight=da.from_array(weight, chunks=chunks),
    )
    return weight, cluster


def test_linear_near_field_on_partitions_is_the_in_memory_split(client):
    X, y = _data(n=6000)
    # Some queries far from the data: beyond every near key, computed exactly.
    Q = np.vstack([X[:250] + 0.05, 3.5 * np.random.default_rng(8).normal(size=(50, 3))])
    weight, cluster = _near_field_on_partitions(X, y, 300, 1700)
    kernel = cluster.kernel_
    assert isinstance(kernel, NearFieldKernel)
    # Cells of about 50 keys, their centers from the rows sampled on the workers.
    assert kernel.n_cells == (weight > 0).sum() // 50
    assert 300 <= cluster.n_near_keys_ < 600
    memory = _near_field_in_memory(cluster, X, y, weight)
    np.testing.assert_array_equal(kernel.cell_counts, memory.cell_counts)
    np.testing.assert_allclose(kernel.cell_sums, memory.cell_sums, rtol=1e-9, atol=1e-12)
    mean, std = cluster.predict(da.from_array(Q, chunks=120), return_std=True)
    mean, std = mean.compute(), std.compute()
    first, second, unreliable = memory.moments(Q, 0)
    assert unreliable[:250].sum() == 0 and unreliable[250:].sum() >= 10
    expected = cluster._y_offset + cluster._value_scale[0] * first[:, 0]
    # The near keys' exponentials are taken in single precision, in memory and here.
    np.testing.assert_allclose(mean[~unreliable], expected[~unreliable], rtol=1e-6)
    # The rows beyond reach of every near key: the exact smoother, from the partitions.
    exact = KernelSmoother(bandwidth=cluster.bandwidth_).fit(X, y, sample_weight=weight)
    np.testing.assert_allclose(mean[unreliable], exact.predict(Q[unreliable]), rtol=1e-8)
    assert np.all(np.isfinite(std))
    # Numpy queries through the same graph.
    np.testing.assert_allclose(_quiet(cluster.predict, Q[:40]), mean[:40], rtol=1e-12)


def test_linear_default_on_partitions_has_a_near_field_as_accurate_as_in_memory(
    client, monkeypatch
):
    # In memory, 20 000 rows get the exact weights by default; the split is the reference.
    monkeypatch.setattr(linear_module, "EXACT_ROWS", 0)
    monkeypatch.setattr(cost_module, "SPLIT_MARGIN", np.inf)
    X, y = _data(n=20_000)
    Xt, yt = _data(n=2000, seed=5)
    Xd, yd = da.from_array(X, chunks=5000), da.from_array(y, chunks=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "no near field" warning
        cluster = LinearAttentionRegressor(bandwidth=0.2, random_state=0).fit(Xd, yd)
    assert isinstance(cluster.kernel_, NearFieldKernel)
    assert cluster.n_near_keys_ > 50 and 0 < cluster.weight_error_ <= cluster.tol
    # The rank chosen with the near field, on the sample (at most half of n_subsample).
    assert cluster.n_components_ in (32, 64, 128, 256, 512)
    assert cluster.kernel_.n_components == cluster.n_components_
    memory = LinearAttentionRegressor(bandwidth=0.2, random_state=0).fit(X, y)
    far_only = LinearAttentionRegressor(n_near_keys=0, bandwidth=0.2, random_state=0)
    far_only = _quiet(far_only.fit, Xd, yd)
    errors = {
        name: np.mean((_quiet(model.predict, da.from_array(Xt, chunks=1000)) - yt) ** 2)
        for name, model in [("cluster", cluster), ("memory", memory), ("far", far_only)]
    }
    errors = {name: float(np.asarray(e)) for name, e in errors.items()}
    assert errors["cluster"] < 1.2 * errors["memory"]
    assert errors["cluster"] < 0.5 * errors["far"]


@pytest.mark.parametrize(
    "estimator",
    [
        KernelSmoother(bandwidth=0.4),
        AttentionRegressor(n_heads=2, head_dim=2, max_iter=10, random_state=0),
        LinearAttentionRegressor(random_state=0),  # the default: near field + Nyström
    ],
    ids=["smoother", "attention", "linear-in-memory"],
)
def test_predict_on_partitions_is_the_in_memory_prediction(client, estimator):
    X, y = _data(n=800)
    model = _quiet(estimator.fit, X, y)
    Q = 1.3 * np.random.default_rng(4).normal(size=(300, 3))
    mean, std = model.predict(da.from_array(Q, chunks=120), return_std=True)
    assert isinstance(mean, da.Array) and mean.chunks == ((120, 120, 60),)
    # Each partition is the in-memory prediction of its rows.
    parts = [_quiet(model.predict, Q[i : i + 120], return_std=True) for i in (0, 120, 240)]
    expected_mean, expected_std = (np.concatenate(p) for p in zip(*parts, strict=True))
    np.testing.assert_allclose(mean.compute(), expected_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std.compute(), expected_std, rtol=1e-12, atol=1e-12)
    # And all rows at once, to rounding: with local lines (the learned kernel's default may
    # choose them) a query's estimate moves with the block of queries it is computed in, by
    # about 1e-8 of its value.
    whole_mean, whole_std = _quiet(model.predict, Q, return_std=True)
    np.testing.assert_allclose(mean.compute(), whole_mean, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(std.compute(), whole_std, rtol=1e-7, atol=1e-12)


def test_attention_predict_with_some_heads_on_partitions(client):
    X, y = _data(n=500)
    model = _quiet(AttentionRegressor(n_heads=2, head_dim=2, max_iter=5, random_state=0).fit, X, y)
    lazy = model.predict(da.from_array(X[:90], chunks=30), heads=[1])
    np.testing.assert_allclose(lazy.compute(), model.predict(X[:90], heads=[1]), rtol=1e-12)


# ------------------------------------------------------------- the smoother's search


def _search_data(n=6000, d=3, seed=0):
    X, y = _data(n=n, d=d, seed=seed)
    # Exact duplicates (left out with their twin), some across partitions.
    X[100] = X[n - 1000]
    X[200] = X[201]
    weight = np.random.default_rng(seed + 1).uniform(0.5, 2.0, n)
    weight[::7] = 0.0
    return X, y, weight


def _worker_sample(X, y, weight, chunks, random_state, size=2400):
    """The queries the workers sample (their global rows, in sampling order), drawn here
    from the same seeds."""
    from kernattn._core.rows import ArrayRows
    from kernattn._engine.summary import RowSummary, sample_seed, summarize

    rows = ArrayRows(X, y, weight, n_parts=len(range(0, len(X), chunks)))
    seed = sample_seed(random_state)
    return rows.reduce(summarize, RowSummary.merge, seed, size).sample[1]


def _as_dask(chunks, *arrays):
    return [da.from_array(a, chunks=chunks) for a in arrays]


def test_partitioned_criterion_is_the_in_memory_criterion_on_the_same_queries(client):
    from kernattn._engine.summary import RowSummary, summarize
    from kernattn.bandwidth._criterion import Criterion
    from kernattn.distributed._rows import DaskRows

    X, y, weight = _search_data()
    rows = DaskRows.from_collections(*_as_dask(1500, X, y, weight))
    summary = rows.reduce(summarize, RowSummary.merge, 7, 2400)
    on_workers = Criterion.on_parts(rows, summary)
    active = np.flatnonzero(weight > 0)
    in_memory = Criterion(X[active], y[active, None], weight[active], "gaussian")
    queries = np.searchsorted(active, summary.sample[1])
    log_h = np.log(on_workers.scott) + np.array([-0.5, 0.2, 0.8])
    for size in (600, 2400):
        rows = np.arange(size)
        value, grad = on_workers.scaled_loss_and_grad(log_h, rows)
        expected, expected_grad = in_memory.scaled_loss_and_grad(log_h, queries[:size])
        np.testing.assert_allclose(value, expected, rtol=1e-10)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-10, atol=1e-12)
        factors = np.array([0.1, 1.0, 3.0])
        np.testing.assert_allclose(
            on_workers.scaled_grid_losses(on_workers.scott, factors, rows),
            in_memory.scaled_grid_losses(on_workers.scott, factors, queries[:size]),
            rtol=1e-10,
        )
        np.testing.assert_allclose(
            on_workers.effective_dof(log_h, rows),
            in_memory.effective_dof(log_h, queries[:size]),
            rtol=1e-10,
        )


def test_smoother_search_on_workers_is_the_in_memory_search_on_the_same_queries(client, capsys):
    from kernattn.bandwidth import rule_of_thumb_bandwidth
    from kernattn.bandwidth._criterion import Criterion
    from kernattn.bandwidth._search import search_criterion

    X, y, weight = _search_data()
    model = KernelSmoother(bandwidth="loo", random_state=5, verbose=1)
    model.fit(*_as_dask(1500, X, y), sample_weight=da.from_array(weight, chunks=1500))
    printed = capsys.readouterr().out
    assert "2400 queries sampled on the workers" in printed
    assert "2400 queries: criterion" in printed
    # The in-memory search's steps on the queries the workers drew.
    active = np.flatnonzero(weight > 0)
    queries = np.searchsorted(active, _worker_sample(X, y, weight, 1500, 5))
    objective = Criterion(X[active], y[active, None], weight[active], "gaussian")
    start = rule_of_thumb_bandwidth(X[active], weight[active])
    expected = search_criterion(objective, start, [queries[:600], queries])
    # The criterion reported is the in-memory criterion at the bandwidth found, on the
    # same queries; sums added in another order (1e-16) steer the optimizer a little
    # differently, and both searches stop within the stage's tolerance (1e-6) of the same
    # minimum.
    found = objective.scaled_loss(np.log(model.bandwidth_), queries)
    np.testing.assert_allclose(model.loo_error_, objective.in_target_units(found), rtol=1e-10)
    np.testing.assert_allclose(model.loo_error_, expected.value, rtol=1e-5)
    np.testing.assert_allclose(model.bandwidth_[:2], expected.bandwidth[:2], rtol=1e-4)
    np.testing.assert_allclose(model.bandwidth_, expected.bandwidth, rtol=1e-2)
    np.testing.assert_allclose(model.effective_dof_, expected.effective_dof, rtol=1e-3)
    # The fitted smoother is the in-memory one at that bandwidth, training rows in memory.
    reference = KernelSmoother(bandwidth=model.bandwidth_).fit(X, y, sample_weight=weight)
    assert isinstance(model.X_fit_, np.ndarray)
    Q = np.random.default_rng(3).normal(size=(50, 3))
    np.testing.assert_allclose(model.predict(Q), reference.predict(Q), rtol=1e-12)
    lazy = model.predict(da.from_array(Q, chunks=25))
    np.testing.assert_allclose(lazy.compute(), reference.predict(Q), rtol=1e-12)


def test_smoother_search_on_workers_is_reproducible_and_checks_its_data(client):
    X, y, _ = _search_data(n=4800, d=2)
    Xd, yd = _as_dask(1200, X, y)
    first = KernelSmoother(bandwidth="loo", random_state=1).fit(Xd, yd)
    second = KernelSmoother(bandwidth="loo", random_state=1).fit(Xd, yd)
    np.testing.assert_array_equal(first.bandwidth_, second.bandwidth_)
    assert first.loo_error_ == second.loo_error_
    before = first.predict(X[:5])
    bad = X.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        first.fit(*_as_dask(1200, bad, y))
    with pytest.raises(ValueError, match="distinct training inputs"):
        first.fit(*_as_dask(1200, np.ones_like(X), y))
    with pytest.raises(ValueError, match="non-negative"):
        first.fit(Xd, yd, sample_weight=-np.ones(len(X)))
    np.testing.assert_array_equal(first.predict(X[:5]), before)


def test_smoother_searches_the_workers_cannot_run_are_run_in_memory(client):
    X, y, _ = _search_data(n=4800, d=2)
    Xd, yd = _as_dask(1200, X, y)
    params = dict(bandwidth="gcv", random_state=0)
    with pytest.warns(UserWarning, match="bandwidth='gcv'.*runs in memory"):
        cluster = KernelSmoother(**params).fit(Xd, yd)
    memory = KernelSmoother(**params).fit(X, y)
    np.testing.assert_array_equal(cluster.bandwidth_, memory.bandwidth_)
    assert cluster.criterion_ == memory.criterion_
    # At most 4 000 rows the search is exact, on all rows: in memory, as a fit in memory.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small = KernelSmoother(bandwidth="loo").fit(*_as_dask(1000, X[:3000], y[:3000]))
    np.testing.assert_array_equal(
        small.bandwidth_, KernelSmoother(bandwidth="loo").fit(X[:3000], y[:3000]).bandwidth_
    )
    # A rule or a given bandwidth needs no search: the fit in memory.
    for bandwidth in ("silverman", 0.3):
        np.testing.assert_array_equal(
            KernelSmoother(bandwidth=bandwidth).fit(Xd, yd).predict(X[:5]),
            KernelSmoother(bandwidth=bandwidth).fit(X, y).predict(X[:5]),
        )


def test_smoother_fit_on_a_dask_dataframe_keeps_its_feature_names(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y, _ = _search_data(n=4800, d=2)
    frame = pd.DataFrame(X, columns=["a", "b"])
    model = KernelSmoother(bandwidth="loo", random_state=0).fit(
        dd.from_pandas(frame, npartitions=4), dd.from_pandas(pd.Series(y), npartitions=4)
    )
    assert list(model.feature_names_in_) == ["a", "b"]
    assert model.bandwidth_.shape == (2,) and hasattr(model, "irrelevant_features_")
    np.testing.assert_allclose(
        model.predict(frame.iloc[:5]),
        KernelSmoother(bandwidth=model.bandwidth_).fit(frame, y).predict(frame.iloc[:5]),
        rtol=1e-12,
    )


# ------------------------------------------------------------ faults and reruns


def _with_a_worker_restarted(client, call):
    """``call()`` in a thread, one worker restarted while a task of it runs; its result."""
    result = {}

    def run():
        result["value"] = call()

    thread = threading.Thread(target=run)
    thread.start()
    restarted = False
    while thread.is_alive() and not restarted:
        busy = [worker for worker, tasks in client.processing().items() if tasks]
        if busy:
            # Under load, distributed's nanny can close instead of coming back (a race between
            # its own restart and the scheduler's); the cluster then goes on with the other
            # worker, which the tests' point, the same numbers, does not depend on.
            client.restart_workers([busy[0]], raise_for_error=False)
            restarted = True
        time.sleep(0.002)
    thread.join()
    assert restarted, "the call ended before a worker could be restarted"
    return result["value"]


def test_smoother_search_is_the_same_after_a_worker_restart_and_on_a_rerun(client):
    X, y, weight = _search_data(n=20_000)
    data = (*_as_dask(2500, X, y), da.from_array(weight, chunks=2500))
    params = dict(bandwidth="loo", random_state=3)
    undisturbed = KernelSmoother(**params).fit(data[0], data[1], sample_weight=data[2])
    rerun = KernelSmoother(**params).fit(data[0], data[1], sample_weight=data[2])
    disturbed = _with_a_worker_restarted(
        client, lambda: KernelSmoother(**params).fit(data[0], data[1], sample_weight=data[2])
    )
    Q = np.random.default_rng(9).normal(size=(40, 3))
    for other in (rerun, disturbed):
        np.testing.assert_array_equal(other.bandwidth_, undisturbed.bandwidth_)
        assert other.loo_error_ == undisturbed.loo_error_
        assert other.effective_dof_ == undisturbed.effective_dof_
        np.testing.assert_array_equal(other.predict(Q), undisturbed.predict(Q))


def test_linear_fit_is_the_same_after_a_worker_restart_and_on_a_rerun(client):
    X, y = _data(n=20_000)
    data = _as_dask(2500, X, y)
    params = dict(bandwidth=0.3, random_state=0)  # the default near field, on partitions
    undisturbed = _quiet(LinearAttentionRegressor(**params).fit, *data)
    rerun = _quiet(LinearAttentionRegressor(**params).fit, *data)
    disturbed = _with_a_worker_restarted(
        client, lambda: _quiet(LinearAttentionRegressor(**params).fit, *data)
    )
    Q = da.from_array(1.2 * np.random.default_rng(2).normal(size=(600, 3)), chunks=200)
    expected = undisturbed.predict(Q, return_std=True)
    expected = [a.compute() for a in expected]
    for other in (rerun, disturbed):
        assert isinstance(other.kernel_, NearFieldKernel)
        np.testing.assert_array_equal(other.kernel_.cell_sums, undisturbed.kernel_.cell_sums)
        np.testing.assert_array_equal(other.kernel_.far.key_sums, undisturbed.kernel_.far.key_sums)
        assert other.n_near_keys_ == undisturbed.n_near_keys_
        assert other.weight_error_ == undisturbed.weight_error_
        for got, want in zip(other.predict(Q, return_std=True), expected, strict=True):
            np.testing.assert_array_equal(got.compute(), want)
    # A worker restarted between fit and predict (and during the prediction) changes nothing.
    client.restart_workers([next(iter(client.scheduler_info()["workers"]))], raise_for_error=False)
    again = _with_a_worker_restarted(
        client, lambda: [a.compute() for a in undisturbed.predict(Q, return_std=True)]
    )
    for got, want in zip(again, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_threads_predicting_at_once_agree_with_a_serial_prediction():
    from concurrent.futures import ThreadPoolExecutor

    X, y = _data(n=3000)
    model = LinearAttentionRegressor(bandwidth=0.3, random_state=0).fit(X, y)
    smoother = KernelSmoother(bandwidth=0.3).fit(X, y)
    blocks = [1.3 * np.random.default_rng(s).normal(size=(200, 3)) for s in range(16)]
    for fitted in (model, smoother):
        predict = functools.partial(_quiet, fitted.predict, return_std=True)
        serial = [predict(Q) for Q in blocks]
        with ThreadPoolExecutor(16) as pool:
            parallel = list(pool.map(predict, blocks))
        for (m1, s1), (m2, s2) in zip(serial, parallel, strict=True):
            np.testing.assert_array_equal(m1, m2)
            np.testing.assert_array_equal(s1, s2)


def _same_intervals(cluster, memory, Q):
    """Jackknife+ (also with coverage given the rows, ``confidence``) and local intervals
    at ``Q`` of a fit on partitions equal those of the same model in memory; the last
    method's in-memory intervals."""
    for method, confidence in (("jackknife+", None), ("jackknife+", 0.9), ("local", None)):
        expected = memory.conformal_interval(Q, alpha=0.2, method=method, confidence=confidence)
        got = cluster.conformal_interval(Q, alpha=0.2, method=method, confidence=confidence)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
        assert np.all(got[0] < got[1])
    return expected


def test_conformal_interval_on_partitions_is_the_in_memory_interval(client):
    X, y = _data(n=600)
    # Exact duplicates in different partitions leave one out together, as in memory.
    X[5] = X[400]
    # Queries spread wider than the data: some lie beyond the features' reach and take the
    # exact kernel, its sums over the partitions merged at their shifts.
    Q = np.vstack([1.6 * np.random.default_rng(1).normal(size=(40, 3)), 4.0 * X[:20]])
    params = dict(n_components=64, n_near_keys=0, random_state=0, n_subsample=5000)
    memory = _quiet(LinearAttentionRegressor(**params).fit, X, y)
    cluster = _quiet(
        LinearAttentionRegressor(**params).fit,
        da.from_array(X, chunks=150),
        da.from_array(y, chunks=150),
    )
    _, _, unreliable = memory.kernel_.moments(Q, 0)
    assert unreliable.any()
    expected = _same_intervals(cluster, memory, Q)
    # The residuals are kept for later calls on this fit, and a new fit replaces them: the
    # targets moved by 1 move the intervals by 1.
    _quiet(cluster.fit, da.from_array(X, chunks=150), da.from_array(y + 1.0, chunks=150))
    moved = cluster.conformal_interval(Q, alpha=0.2, method="local")
    for a, b in zip(moved, expected, strict=True):
        np.testing.assert_allclose(a, b + 1.0, rtol=1e-9, atol=1e-9)


def test_conformal_interval_with_a_near_field_on_partitions_is_the_in_memory_interval(client):
    X, y = _data(n=900)
    # Exact duplicates in different partitions leave one out together, as in memory.
    X[5] = X[400]
    # Queries spread wider than the data: some have no near key within reach and take the
    # exact kernel.
    Q = np.vstack([1.6 * np.random.default_rng(1).normal(size=(40, 3)), 4.0 * X[:20]])
    weight, cluster = _near_field_on_partitions(X, y, 150, 250)
    assert isinstance(cluster.kernel_, NearFieldKernel)
    # The same model in memory: the cluster's cells, features and near cells, with the
    # training set and its keys kept.
    memory = copy.copy(cluster)
    active = weight > 0
    Y = y.reshape(len(y), -1)
    memory._set_training_set(X, y, weight, active, Y[active], weight[active])
    memory.kernel_ = _near_field_in_memory(cluster, X, y, weight)
    memory.exact_weights_ = False
    _, unserved = memory.kernel_.weights(Q, 0)
    assert 0 < unserved.sum() < len(Q)
    _same_intervals(cluster, memory, Q)
    # The split weights of a query on every partition sum to 1.
    weights = weights_on_parts(cluster, Q).head_weights(Q, 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)


def test_conditional_distribution_of_a_fit_on_partitions_says_what_it_needs(client):
    X, y = _data(n=400)
    far = _quiet(
        LinearAttentionRegressor(n_near_keys=0, random_state=0).fit,
        da.from_array(X, chunks=100),
        da.from_array(y, chunks=100),
    )
    for call in (
        lambda: far.predict_quantiles(X[:5]),
        lambda: far.predict_cdf(X[:5], [0.0]),
    ):
        with pytest.raises(RuntimeError, match="partitions of a dask collection"):
            call()
