"""The estimators on Dask collections: the same numbers as in memory, computed on workers."""

import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    with cluster, distributed.Client(cluster) as client:
        # Import the package on the workers once, here, not inside the first test.
        client.run(lambda: __import__("kernattn.linear"))
        yield client


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
        feature_map=feature_map, n_components=64, n_neighbors=0, random_state=0, n_subsample=5000
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
    params = dict(n_components=64, n_neighbors=0, random_state=0, bandwidth=0.8)
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
    params = dict(n_components=32, n_neighbors=0, n_subsample=500, random_state=3)
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
    params = dict(n_components=32, n_neighbors=0, random_state=0)
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
    model = LinearAttentionRegressor(n_components=16, n_neighbors=0, random_state=0).fit(X, y)
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
    expected_mean, expected_std = _quiet(model.predict, Q, return_std=True)
    np.testing.assert_allclose(mean.compute(), expected_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std.compute(), expected_std, rtol=1e-12, atol=1e-12)


def test_attention_predict_with_some_heads_on_partitions(client):
    X, y = _data(n=500)
    model = _quiet(AttentionRegressor(n_heads=2, head_dim=2, max_iter=5, random_state=0).fit, X, y)
    lazy = model.predict(da.from_array(X[:90], chunks=30), heads=[1])
    np.testing.assert_allclose(lazy.compute(), model.predict(X[:90], heads=[1]), rtol=1e-12)
