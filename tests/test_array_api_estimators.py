"""The estimators with arrays of other libraries: torch tensors and array_api_strict arrays in,
the same library (and device) out, the same numbers as numpy."""

import os

import numpy as np
import pytest

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor

torch = pytest.importorskip("torch")
xps = pytest.importorskip("array_api_strict")

ESTIMATORS = {
    "smoother": lambda: KernelSmoother(bandwidth="loo"),
    "local-linear": lambda: KernelSmoother(bandwidth=0.4, degree=1),
    "attention": lambda: AttentionRegressor(n_heads=2, max_iter=15, random_state=0),
    "linear": lambda: LinearAttentionRegressor(random_state=0),
}


def _data(n=150, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)).astype(dtype)
    y = (np.sin(2 * X[:, 0]) + X[:, 1] ** 2).astype(dtype)
    return X, y


def _quiet(call, *args, **kwargs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_torch_in_torch_out_with_the_numpy_numbers(name):
    X, y = _data()
    Q = 1.2 * _data(n=20, seed=1)[0]
    in_numpy = _quiet(ESTIMATORS[name]().fit, X, y)
    in_torch = _quiet(ESTIMATORS[name]().fit, torch.from_numpy(X), torch.from_numpy(y))
    mean, std = _quiet(in_torch.predict, torch.from_numpy(Q), return_std=True)
    assert isinstance(mean, torch.Tensor) and isinstance(std, torch.Tensor)
    assert mean.dtype == torch.float64 and mean.device.type == "cpu"
    expected_mean, expected_std = _quiet(in_numpy.predict, Q, return_std=True)
    np.testing.assert_array_equal(mean.numpy(), expected_mean)
    np.testing.assert_array_equal(std.numpy(), expected_std)
    weights = _quiet(in_torch.attention_weights, torch.from_numpy(Q))
    assert isinstance(weights, torch.Tensor) and weights.shape == (len(Q), len(X))
    np.testing.assert_array_equal(weights.numpy(), _quiet(in_numpy.attention_weights, Q))
    neighbors = _quiet(in_torch.effective_neighbors, torch.from_numpy(Q))
    assert isinstance(neighbors, torch.Tensor)
    # Queries in numpy get numpy back, whatever the training set was.
    assert isinstance(_quiet(in_torch.predict, Q), np.ndarray)


def test_float32_tensors_stay_float32():
    X, y = _data(dtype=np.float32)
    model = KernelSmoother(bandwidth=0.4).fit(torch.from_numpy(X), torch.from_numpy(y))
    prediction = model.predict(torch.from_numpy(X[:5]))
    assert prediction.dtype == torch.float32
    assert model.predict(torch.from_numpy(X[:5]), return_std=True)[1].dtype == torch.float32
    assert model.attention_weights(torch.from_numpy(X[:5])).dtype == torch.float32
    np.testing.assert_array_equal(
        prediction.numpy(), KernelSmoother(bandwidth=0.4).fit(X, y).predict(X[:5])
    )


def test_array_api_strict_arrays_come_back_as_such():
    X, y = _data()
    model = KernelSmoother(bandwidth=0.4).fit(xps.asarray(X), xps.asarray(y))
    prediction = model.predict(xps.asarray(X[:5]))
    assert type(prediction).__module__.startswith("array_api_strict")
    np.testing.assert_array_equal(
        np.from_dlpack(prediction), KernelSmoother(bandwidth=0.4).fit(X, y).predict(X[:5])
    )


def test_inference_methods_return_tensors():
    X, y = _data()
    model = KernelSmoother(bandwidth=0.4, degree=1).fit(torch.from_numpy(X), torch.from_numpy(y))
    lower, upper = model.predict_interval(torch.from_numpy(X[:4]))
    slope = model.gradient(torch.from_numpy(X[:4]))
    assert all(isinstance(a, torch.Tensor) for a in (lower, upper, slope))
    assert torch.all(lower < upper)


def test_partial_fit_takes_tensors():
    X, y = _data(n=400)
    params = dict(feature_map="positive", n_near_keys=0, bandwidth=0.8, random_state=0)
    chunked = LinearAttentionRegressor(**params)
    for rows in np.array_split(np.arange(len(X)), 4):
        chunked.partial_fit(torch.from_numpy(X[rows]), torch.from_numpy(y[rows]))
    whole = LinearAttentionRegressor(**params)
    for rows in np.array_split(np.arange(len(X)), 4):
        whole.partial_fit(X[rows], y[rows])
    np.testing.assert_array_equal(
        chunked.predict(torch.from_numpy(X[:5])).numpy(), whole.predict(X[:5])
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_come_back_on_their_device():
    X, y = _data()
    model = KernelSmoother(bandwidth=0.4).fit(
        torch.from_numpy(X).cuda(), torch.from_numpy(y).cuda()
    )
    prediction = model.predict(torch.from_numpy(X[:5]).cuda())
    assert prediction.device.type == "cuda"
    np.testing.assert_array_equal(
        prediction.cpu().numpy(), KernelSmoother(bandwidth=0.4).fit(X, y).predict(X[:5])
    )


@pytest.mark.skipif(
    os.environ.get("SCIPY_ARRAY_API") != "1",
    reason="scikit-learn's array API dispatch needs SCIPY_ARRAY_API=1 before scipy is imported",
)
def test_scikit_learn_array_api_dispatch_keeps_tensors_through_its_utilities():
    from sklearn import config_context
    from sklearn.model_selection import cross_val_score

    X, y = _data()
    with config_context(array_api_dispatch=True):
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        model = KernelSmoother(bandwidth=0.4).fit(Xt, yt)
        assert isinstance(model.predict(Xt[:3]), torch.Tensor)
        scores = cross_val_score(KernelSmoother(bandwidth=0.4), Xt, yt, cv=3)
    expected = cross_val_score(KernelSmoother(bandwidth=0.4), X, y, cv=3)
    np.testing.assert_allclose(np.asarray(scores, dtype=float), expected, rtol=1e-12)
