"""fit_chunks: linear attention fitted in two passes over chunks of rows."""

import warnings

import numpy as np
import pytest

from kernattn import LinearAttentionRegressor, fit_chunks


def _data(n=2000, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + X[:, -1] ** 2 + 0.1 * rng.normal(size=n)
    return X, y


def _split(X, y, size, weight=None):
    starts = range(0, len(X), size)
    if weight is None:
        return [(X[s : s + size], y[s : s + size]) for s in starts]
    return [(X[s : s + size], y[s : s + size], weight[s : s + size]) for s in starts]


@pytest.mark.parametrize(
    "feature_map, bandwidth", [("positive", "scott"), ("nystroem", "scott"), ("trig", 2.0)]
)
def test_chunks_give_the_in_memory_fit(feature_map, bandwidth):
    X, y = _data()
    params = dict(
        feature_map=feature_map,
        n_components=64,
        n_near_keys=0,
        bandwidth=bandwidth,
        random_state=0,
    )
    whole = LinearAttentionRegressor(**params).fit(X, y)
    streamed = fit_chunks(LinearAttentionRegressor(**params), _split(X, y, 300))
    np.testing.assert_allclose(streamed.center_, whole.center_, rtol=1e-12)
    np.testing.assert_allclose(streamed.bandwidth_, whole.bandwidth_, rtol=1e-12)
    Q = X[:300]
    for h in range(whole.kernel_.n_heads):
        first, second, unreliable = whole.kernel_.moments(Q, h)
        got_first, got_second, got_unreliable = streamed.kernel_.moments(Q, h)
        np.testing.assert_array_equal(got_unreliable, unreliable)
        assert unreliable.mean() < 0.5
        np.testing.assert_allclose(got_first, first, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got_second, second, rtol=1e-10, atol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = whole.predict(Q)
        got = streamed.predict(Q)
    np.testing.assert_allclose(got[~unreliable], expected[~unreliable], rtol=1e-10, atol=1e-10)


def test_chunks_from_a_memmap_with_weights_and_two_outputs(tmp_path):
    X, y = _data(n=1500)
    Y = np.column_stack([y, 2 * y - 5])
    weight = np.random.default_rng(1).integers(0, 3, len(X)).astype(float)
    path = tmp_path / "rows.f64"
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(1500, 6))
    table[:] = np.column_stack([X, Y, weight])
    table.flush()
    del table
    rows = np.load(path, mmap_mode="r")

    def chunks():
        for start in range(0, len(rows), 400):
            block = np.asarray(rows[start : start + 400])
            yield block[:, :3], block[:, 3:5], block[:, 5]

    params = dict(n_components=64, n_near_keys=0, random_state=0, bandwidth=0.7)
    streamed = fit_chunks(LinearAttentionRegressor(**params), chunks)
    whole = LinearAttentionRegressor(**params).fit(X, Y, sample_weight=weight)
    assert streamed.predict(X[:5]).shape == (5, 2)
    np.testing.assert_allclose(
        streamed.predict(X[:200]), whole.predict(X[:200]), rtol=1e-10, atol=1e-10
    )


def test_sample_is_drawn_from_every_chunk():
    # Sorted rows: a sample taken from the first chunk would see only the left end.
    X, y = _data(n=6000, d=1)
    order = np.argsort(X[:, 0])
    X, y = X[order], y[order]
    params = dict(n_components=32, n_near_keys=0, n_subsample=600, random_state=0)
    streamed = fit_chunks(LinearAttentionRegressor(**params), _split(X, y, 1000))
    landmarks = (
        streamed.feature_maps_[0].landmarks_[:, 0] * streamed.bandwidth_[0] + streamed.center_[0]
    )
    assert landmarks.min() < -1.5 and landmarks.max() > 1.5
    first_chunk = LinearAttentionRegressor(**params).partial_fit(X[:1000], y[:1000])
    seen = first_chunk.feature_maps_[0].landmarks_[:, 0] * first_chunk.bandwidth_[0]
    assert (seen + first_chunk.center_[0]).max() < -0.5
    again = fit_chunks(LinearAttentionRegressor(**params), _split(X, y, 1000))
    np.testing.assert_array_equal(
        again.feature_maps_[0].landmarks_, streamed.feature_maps_[0].landmarks_
    )


def test_loo_bandwidth_on_the_sample_is_rescaled_like_the_subsample():
    X, y = _data(n=3000, d=2)
    params = dict(bandwidth="loo", n_subsample=500, n_components=32, n_near_keys=0, random_state=0)
    streamed = fit_chunks(LinearAttentionRegressor(**params), _split(X, y, 1000))
    whole = LinearAttentionRegressor(**params).fit(X, y)
    # Different subsamples of the same data: the same bandwidth within sampling noise.
    np.testing.assert_allclose(streamed.bandwidth_, whole.bandwidth_, rtol=0.5)
    assert np.isfinite(streamed.loo_error_)


def test_bad_chunks_raise_and_keep_the_last_fit():
    X, y = _data(n=600)
    model = LinearAttentionRegressor(n_components=16, n_near_keys=0, random_state=0).fit(X, y)
    before = model.predict(X[:5])
    with pytest.raises(TypeError, match="iterator"):
        fit_chunks(model, iter(_split(X, y, 200)))
    with pytest.raises(ValueError, match="features"):
        fit_chunks(model, [(X[:200], y[:200]), (X[200:, :2], y[200:])])
    with pytest.raises(ValueError, match="rows of X"):
        fit_chunks(model, [(X[:200], y[:199])])
    bad = X.copy()
    bad[3, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or infinity"):
        fit_chunks(model, _split(bad, y, 200))
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_chunks(model, [])
    passes = []

    def shrinking():
        passes.append(1)
        return iter(_split(X, y, 200)[: 4 - len(passes)])

    with pytest.raises(ValueError, match="same both times"):
        fit_chunks(model, shrinking)
    with pytest.raises(TypeError, match="LinearAttentionRegressor"):
        fit_chunks(object(), _split(X, y, 200))
    np.testing.assert_array_equal(model.predict(X[:5]), before)
    assert hasattr(model, "X_fit_")


def test_partial_fit_continues_a_chunked_fit():
    X, y = _data(n=1200)
    # The center and bandwidth given: nothing depends on which rows came first.
    params = dict(feature_map="positive", random_state=0, bandwidth=0.8, center=np.zeros(3))
    streamed = fit_chunks(LinearAttentionRegressor(**params), _split(X[:800], y[:800], 400))
    streamed.partial_fit(X[800:], y[800:])
    whole = LinearAttentionRegressor(**params).fit(X, y)
    np.testing.assert_allclose(
        streamed.predict(X[:100]), whole.predict(X[:100]), rtol=1e-6, atol=1e-8
    )


def test_threads_do_not_change_the_fit():
    X, y = _data(n=3000)
    fits = [
        fit_chunks(
            LinearAttentionRegressor(
                n_components=32, n_near_keys=0, random_state=0, n_jobs=n_jobs
            ),
            _split(X, y, 250),
        )
        for n_jobs in (1, 2)
    ]
    np.testing.assert_array_equal(fits[0].kernel_.key_sums, fits[1].kernel_.key_sums)
    np.testing.assert_array_equal(fits[0].center_, fits[1].center_)


def test_default_near_field_is_not_built_from_chunks_and_says_so():
    X, y = _data(n=1500)
    with pytest.warns(UserWarning, match="no near field"):
        streamed = fit_chunks(LinearAttentionRegressor(random_state=0), _split(X, y, 500))
    assert not hasattr(streamed, "weight_error_")
    far_only = LinearAttentionRegressor(n_near_keys=0, random_state=0).fit(X, y)
    np.testing.assert_allclose(
        streamed.kernel_.moments(X[:50], 0)[0], far_only.kernel_.moments(X[:50], 0)[0], rtol=1e-10
    )


def test_per_cell_sums_of_chunks_add_up_to_those_of_all_rows():
    from kernattn._core.rows import Part
    from kernattn.linear._near_field import NearFieldKernel
    from kernattn.linear._passes import cell_sums, merge_cell_sums

    X, y = _data(n=1200)
    weight = np.random.default_rng(3).uniform(0.1, 3.0, len(X))
    weight[::5] = 0.0
    fitted = LinearAttentionRegressor(n_near_keys=0, n_components=32, random_state=0).fit(X, y)

    def empty():
        far = fitted.kernel_.without_keys()
        return NearFieldKernel(
            far.__class__(
                far.heads,
                far.feature_maps,
                far.key_shift,
                far.head_bias,
                weight.max(),
                value_scale=far.value_scale,
            ),
            far.project(X[::40], 0, "key"),
            3,
        )

    template = empty()
    parts = [
        cell_sums(
            X[s : s + 500], y[s : s + 500], weight[s : s + 500], Part(s // 500, s), template, 0.25
        )
        for s in range(0, len(X), 500)
    ]
    (sums, scale, radius, targets), cell_sums, counts = merge_cell_sums(*parts)
    # The template is left empty.
    assert not template.cell_sums.any() and not template.far.key_sums.any()
    active = weight > 0
    whole = empty().accumulate(X[active], y[active, None] - 0.25, weight[active])
    np.testing.assert_array_equal(counts, whole.cell_counts)
    assert counts.sum() == active.sum()
    np.testing.assert_allclose(scale, whole.far.key_log_scale, rtol=1e-12)
    np.testing.assert_allclose(cell_sums, whole.cell_sums, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(sums, whole.far.key_sums, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(cell_sums.sum(axis=0), sums[0], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(targets, whole.far.target_sums, rtol=1e-10)
