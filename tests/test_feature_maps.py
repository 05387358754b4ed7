"""Feature maps: definitions, unbiasedness, variance, and the approximation diagnostic."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.kernel_approximation import RBFSampler

from kernattn.attention import softmax_attention
from kernattn.feature_maps import (
    FEATURE_MAPS,
    EluFeatureMap,
    FeatureMap,
    NystroemFeatures,
    PositiveRandomFeatures,
    ReluFeatureMap,
    TrigonometricRandomFeatures,
    check_feature_map,
    gaussian_rows,
    kernel_approximation_error,
    make_feature_map,
    optimal_positive_parameter,
)


def _pair(d=4, norm=0.4, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, d))
    return norm * q / np.linalg.norm(q), norm * k / np.linalg.norm(k)


def _dim(d):
    """Keys that give a data-independent map only its input dimension d."""
    return np.zeros((1, d))


def _gaussian(q, k):
    return np.exp(-0.5 * np.sum((q - k) ** 2))


# ------------------------------------------------------------------ definitions


def test_positive_features_match_formula():
    rng = np.random.default_rng(1)
    U = rng.standard_normal((5, 3))
    phi = PositiveRandomFeatures(n_components=7).fit(_dim(3), random_state=0)
    expected = np.exp(U @ phi.omega_.T - 0.5 * np.sum(U**2, axis=1, keepdims=True)) / np.sqrt(7)
    np.testing.assert_allclose(phi.transform(U), expected, rtol=1e-13)
    np.testing.assert_allclose(phi.log_transform(U), np.log(expected), atol=1e-12)
    shifted = np.log(expected) - np.log(expected).max(axis=1, keepdims=True)
    np.testing.assert_allclose(phi.shifted_log_transform(U), shifted, atol=1e-12)


def test_generalised_positive_features_match_formula():
    rng = np.random.default_rng(1)
    U = rng.standard_normal((5, 3))
    A = -0.7
    phi = PositiveRandomFeatures(n_components=6, A=A).fit(_dim(3), random_state=0)
    omega = phi.omega_
    expected = (
        (1 - 4 * A) ** (3 / 4)
        * np.exp(
            A * np.sum(omega**2, axis=1)
            + np.sqrt(1 - 4 * A) * U @ omega.T
            - 0.5 * np.sum(U**2, axis=1, keepdims=True)
        )
        / np.sqrt(6)
    )
    np.testing.assert_allclose(phi.transform(U), expected, rtol=1e-12)
    shifted = np.log(expected) - np.log(expected).max(axis=1, keepdims=True)
    np.testing.assert_allclose(phi.shifted_log_transform(U), shifted, atol=1e-12)


def test_optimal_parameter_minimizes_second_moment():
    d, rho = 6, 12.0
    A = np.linspace(-20, 0.12, 400001)
    t = 1 - 8 * A
    log_moment = d / 2 * np.log((1 - 4 * A) ** 2 / t) + rho / t
    assert optimal_positive_parameter(rho, d) == pytest.approx(A[np.argmin(log_moment)], abs=1e-3)
    with pytest.raises(ValueError, match="mean_sq_sum"):
        optimal_positive_parameter(-1.0, d)


def test_generalised_parameter_validated():
    with pytest.raises(ValueError, match="A must be a float below 1/8"):
        PositiveRandomFeatures(A=0.2).fit(_dim(2))
    with pytest.raises(ValueError, match="needs mean_sq_sum"):
        PositiveRandomFeatures(A="optimal").fit(np.empty((0, 2)))
    with pytest.raises(ValueError, match="needs mean_sq_sum"):
        PositiveRandomFeatures(A="optimal").fit(np.ones((3, 2)), sample_weight=np.zeros(3))


def test_hyperbolic_features_are_antithetic_pairs():
    phi = PositiveRandomFeatures(n_components=8, hyperbolic=True).fit(_dim(3), random_state=0)
    np.testing.assert_array_equal(phi.omega_[4:], -phi.omega_[:4])
    assert phi.transform(np.ones((2, 3))).shape == (2, 8)


def test_trigonometric_features_match_formula_and_self_kernel_is_one():
    rng = np.random.default_rng(2)
    U = rng.standard_normal((6, 3))
    phi = TrigonometricRandomFeatures(n_components=10).fit(_dim(3), random_state=0)
    angles = U @ phi.omega_.T
    expected = np.hstack([np.cos(angles), np.sin(angles)]) * np.sqrt(2 / 10)
    np.testing.assert_allclose(phi.transform(U), expected, rtol=1e-13)
    np.testing.assert_allclose(np.sum(phi.transform(U) ** 2, axis=1), 1.0, rtol=1e-13)


def test_elu_and_relu_maps():
    U = np.array([[-2.0, 0.0, 3.0]])
    elu = EluFeatureMap().fit(_dim(3))
    np.testing.assert_allclose(elu.transform(U), [[np.exp(-2.0), 1.0, 4.0]])
    np.testing.assert_allclose(elu.log_transform(U), [[-2.0, 0.0, np.log(4.0)]])
    np.testing.assert_array_equal(ReluFeatureMap().fit(_dim(3)).transform(U), [[0.0, 0.0, 3.0]])


def test_shifted_log_features_finite_for_huge_inputs():
    phi = PositiveRandomFeatures(n_components=16).fit(_dim(2), random_state=0)
    U = np.array([[1e200, -3e199], [1e-300, 0.0]])
    logs = phi.shifted_log_transform(U)
    assert np.all(np.isfinite(logs))
    np.testing.assert_array_equal(logs.max(axis=1), 0.0)


def test_orthogonal_rows_are_orthogonal_within_blocks_and_seeded():
    omega = gaussian_rows(10, 4, orthogonal=True, random_state=3)
    gram = omega[:4] @ omega[:4].T
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-12)
    np.testing.assert_array_equal(omega, gaussian_rows(10, 4, True, 3))
    assert omega.shape == (10, 4)


def test_orthogonal_row_norms_are_chi_distributed():
    omega = gaussian_rows(20000, 5, orthogonal=True, random_state=0)
    # E‖ω‖² = d for ω ~ N(0, I_d).
    assert abs(np.mean(np.sum(omega**2, axis=1)) - 5) < 0.1


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="positive integer"):
        PositiveRandomFeatures(n_components=0).fit(_dim(2))
    with pytest.raises(ValueError, match="dimension d"):
        EluFeatureMap().fit(_dim(0))


def test_unfitted_and_wrong_shape_raise():
    with pytest.raises(ValueError, match="not fitted"):
        TrigonometricRandomFeatures().transform(np.ones((1, 2)))
    phi = TrigonometricRandomFeatures(n_components=4).fit(_dim(2), random_state=0)
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        phi.transform(np.ones((1, 3)))
    with pytest.raises(ValueError, match="feature_map must be one of"):
        make_feature_map("softplus")


# ---------------------------------------------------------------- statistics


def _estimates(make, q, k, seeds):
    out = []
    for seed in seeds:
        phi = make().fit(_dim(len(q)), random_state=seed)
        out.append((phi.transform(q[None]) @ phi.transform(k[None]).T).item())
    return np.array(out)


@pytest.mark.parametrize("orthogonal", [False, True])
@pytest.mark.parametrize(("hyperbolic", "A"), [(False, 0.0), (True, 0.0), (False, -0.6)])
def test_positive_features_unbiased_for_softmax_kernel(orthogonal, hyperbolic, A):
    q, k = _pair(norm=0.6)
    est = _estimates(
        lambda: PositiveRandomFeatures(8, orthogonal=orthogonal, hyperbolic=hyperbolic, A=A),
        q,
        k,
        range(2000),
    )
    standard_error = est.std(ddof=1) / np.sqrt(len(est))
    assert abs(est.mean() - np.exp(q @ k)) < 4 * standard_error


@pytest.mark.parametrize("orthogonal", [False, True])
def test_trigonometric_features_unbiased_for_gaussian_kernel(orthogonal):
    q, k = _pair(norm=0.8, seed=5)
    est = _estimates(lambda: TrigonometricRandomFeatures(8, orthogonal), q, k, range(2000))
    standard_error = est.std(ddof=1) / np.sqrt(len(est))
    assert abs(est.mean() - _gaussian(q, k)) < 4 * standard_error


def _mean_kernel_error(feature_map, orthogonal, r, seeds, scale=0.3):
    rng = np.random.default_rng(7)
    Q, K = scale * rng.standard_normal((2, 20, 8))
    errors = [
        kernel_approximation_error(
            Q, K, feature_map=feature_map, n_components=r, orthogonal=orthogonal, random_state=s
        )["kernel_rmse"]
        for s in seeds
    ]
    return float(np.mean(np.square(errors)))


@pytest.mark.parametrize("feature_map", ["positive", "trig"])
def test_orthogonal_features_lower_error_than_iid(feature_map):
    iid = _mean_kernel_error(feature_map, False, 16, range(100))
    orthogonal = _mean_kernel_error(feature_map, True, 16, range(100))
    assert orthogonal < 0.9 * iid


def test_optimal_features_lower_error_for_large_inputs():
    plain = _mean_kernel_error("positive", False, 64, range(60), scale=0.35)
    optimal = _mean_kernel_error("optimal", False, 64, range(60), scale=0.35)
    assert optimal < 0.75 * plain


@pytest.mark.parametrize("feature_map", ["positive", "hyperbolic", "optimal", "trig"])
def test_error_falls_like_inverse_square_root_of_r(feature_map):
    rs = np.array([16, 64, 256, 1024])
    rmse = [np.sqrt(_mean_kernel_error(feature_map, False, r, range(20))) for r in rs]
    slope = np.polyfit(np.log(rs), np.log(rmse), 1)[0]
    assert -0.7 <= slope <= -0.3


# ------------------------------------------------------------------ diagnostic


def test_kernel_approximation_error_matches_direct_computation():
    rng = np.random.default_rng(4)
    Q, K, V = 0.5 * rng.standard_normal((4, 3)), 0.5 * rng.standard_normal((9, 3)), rng.random(9)
    phi = PositiveRandomFeatures(32).fit(_dim(3), random_state=1)
    errors = kernel_approximation_error(Q, K, V, feature_map=phi)
    approx = phi.transform(Q) @ phi.transform(K).T
    exact = np.exp(Q @ K.T)
    assert errors["kernel_error"] == pytest.approx(
        np.linalg.norm(approx - exact) / np.linalg.norm(exact), rel=1e-12
    )
    linear = approx @ V / approx.sum(axis=1)
    softmax = softmax_attention(Q, K, V, scale=1.0)
    assert errors["output_rmse"] == pytest.approx(
        np.sqrt(np.mean((linear - softmax) ** 2)), rel=1e-10
    )
    assert errors["n_nonpositive"] == 0


def test_kernel_approximation_error_counts_nonpositive_denominators():
    rng = np.random.default_rng(0)
    Q, K = 3 * rng.standard_normal((50, 2)), 3 * rng.standard_normal((5, 2))
    errors = kernel_approximation_error(
        Q, K, np.ones(5), feature_map="trig", n_components=2, random_state=0
    )
    phi = TrigonometricRandomFeatures(2).fit(_dim(2), random_state=0)
    expected = int(np.sum(phi.transform(Q) @ phi.transform(K).sum(axis=0) <= 0))
    assert errors["n_nonpositive"] == expected > 0
    assert np.isfinite(errors["output_rmse"])


def test_kernel_approximation_error_small_at_large_r():
    rng = np.random.default_rng(0)
    Q, K = 0.3 * rng.standard_normal((10, 4)), 0.3 * rng.standard_normal((40, 4))
    for name in ("positive", "trig"):
        errors = kernel_approximation_error(
            Q, K, rng.random(40), feature_map=name, n_components=8192, random_state=0
        )
        assert errors["kernel_error"] < 0.03
        assert errors["output_rmse"] < 0.02


# -------------------------------------------------------------------- Nyström


def _gaussian_matrix(A, B):
    """exp(-‖a - b‖²/2) for every row a of A and b of B, by broadcasting."""
    return np.exp(-0.5 * np.sum((A[:, None, :] - B[None, :, :]) ** 2, axis=2))


def _nystroem_sample(n_keys=300, n_queries=40, scale=1.5, seed=0):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((n_queries, 2)), scale * rng.standard_normal((n_keys, 2))


def test_nystroem_estimate_matches_pseudo_inverse_formula():
    Q, K = _nystroem_sample()
    phi = NystroemFeatures(20).fit(K, random_state=0)
    L = phi.landmarks_
    assert L.shape == (20, 2) and phi.rank_ == 20
    expected = (
        _gaussian_matrix(Q, L) @ np.linalg.pinv(_gaussian_matrix(L, L)) @ _gaussian_matrix(K, L).T
    )
    np.testing.assert_allclose(phi.transform(Q) @ phi.transform(K).T, expected, rtol=1e-8)


def test_nystroem_inner_applies_pseudo_inverse_of_landmark_gram():
    _, K = _nystroem_sample()
    phi = NystroemFeatures(20).fit(K, random_state=0)
    M = np.random.default_rng(1).standard_normal((20, 3))
    G = np.linalg.pinv(_gaussian_matrix(phi.landmarks_, phi.landmarks_))
    np.testing.assert_allclose(phi.inner_matrix_, G, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(phi.inner(M), phi.inner_matrix_ @ M, rtol=1e-14)


def test_nystroem_log_features_match_formula():
    Q, K = _nystroem_sample()
    phi = NystroemFeatures(20).fit(K, random_state=0)
    U = 3.0 * Q
    np.testing.assert_allclose(
        np.exp(phi.log_transform(U)), _gaussian_matrix(U, phi.landmarks_), rtol=1e-12
    )
    shifted = phi.shifted_log_transform(U)
    np.testing.assert_array_equal(shifted.max(axis=1), 0.0)
    offset = phi.log_transform(U) - shifted
    np.testing.assert_allclose(offset, offset[:, :1] * np.ones((1, 20)), rtol=1e-12, atol=1e-12)


def test_nystroem_exact_when_either_input_is_a_landmark():
    Q, K = _nystroem_sample()
    phi = NystroemFeatures(20).fit(K, random_state=0)
    assert phi.rank_ == phi.n_components_
    L = phi.landmarks_
    np.testing.assert_allclose(
        phi.transform(L) @ phi.transform(Q).T, _gaussian_matrix(L, Q), atol=1e-10
    )


def test_nystroem_random_landmarks_are_distinct_key_rows():
    distinct = np.random.default_rng(1).standard_normal((40, 2))
    keys = np.repeat(distinct, 5, axis=0)
    phi = NystroemFeatures(30, landmarks="random").fit(keys, random_state=0)
    L = phi.landmarks_
    assert L.shape == (30, 2)
    assert len(np.unique(L, axis=0)) == 30
    assert all(np.any(np.all(keys == row, axis=1)) for row in L)


def test_nystroem_given_landmarks_used_as_is_without_keys():
    L = np.array([[0.0, 0.0], [1.0, -0.5], [2.0, 3.0]])
    phi = NystroemFeatures(landmarks=L).fit(np.empty((0, 2)))
    np.testing.assert_array_equal(phi.landmarks_, L)
    assert phi.n_components_ == 3
    u = np.array([[0.4, 0.7]])
    np.testing.assert_allclose(phi.transform(u) @ phi.transform(L).T, _gaussian_matrix(u, L))


def test_nystroem_few_distinct_keys_become_the_landmarks():
    distinct = np.random.default_rng(2).standard_normal((7, 3))
    keys = np.vstack([distinct, distinct[:4], distinct[::-1]])
    for landmarks in ("kmeans", "random"):
        phi = NystroemFeatures(10, landmarks=landmarks).fit(keys, random_state=0)
        np.testing.assert_array_equal(phi.landmarks_, np.unique(distinct, axis=0))
        assert phi.n_components_ == 7


def test_nystroem_kmeans_landmarks_set_by_random_state():
    _, K = _nystroem_sample(scale=3.0)
    a = NystroemFeatures(16).fit(K, random_state=0).landmarks_
    b = NystroemFeatures(16).fit(K, random_state=0).landmarks_
    c = NystroemFeatures(16).fit(K, random_state=1).landmarks_
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(np.sort(a, axis=0), np.sort(c, axis=0))


def test_nystroem_error_falls_with_landmarks_far_below_random_features():
    # Bandwidth 0.3 next to a spread of 1: inputs in kernel units have norm ~ 3.
    rng = np.random.default_rng(1)
    K, Q = rng.standard_normal((1000, 2)) / 0.3, rng.standard_normal((100, 2)) / 0.3
    errors = [
        kernel_approximation_error(Q, K, feature_map=NystroemFeatures(m), random_state=0)[
            "kernel_error"
        ]
        for m in (16, 64, 256)
    ]
    assert errors[1] < 0.5 * errors[0] and errors[2] < 0.5 * errors[1]
    for name, factor in (("positive", 0.02), ("trig", 0.1)):
        random = kernel_approximation_error(
            Q, K, feature_map=name, n_components=256, random_state=0
        )["kernel_error"]
        assert errors[2] < factor * random


def test_nystroem_by_name_and_in_diagnostic():
    phi = make_feature_map("nystroem", 64)
    assert isinstance(phi, NystroemFeatures) and phi.n_components == 64
    Q, K = _nystroem_sample(n_keys=200, n_queries=10)
    errors = kernel_approximation_error(
        Q, K, feature_map="nystroem", n_components=64, random_state=3
    )
    fitted = NystroemFeatures(64).fit(K, random_state=3)
    approx = fitted.transform(Q) @ fitted.transform(K).T
    exact = _gaussian_matrix(Q, K)
    assert errors["kernel_error"] == pytest.approx(
        np.linalg.norm(approx - exact) / np.linalg.norm(exact), rel=1e-10
    )


@pytest.mark.parametrize(
    ("params", "fit_kwargs", "match"),
    [
        ({}, {}, "keys=U"),
        ({"landmarks": "grid"}, {"keys": np.ones((5, 2))}, "landmarks must be one of"),
        ({"landmarks": np.ones((3, 3))}, {}, r"shape \(n, 2\)"),
        ({"landmarks": np.ones((0, 2))}, {}, "at least one row"),
        ({"landmarks": np.array([[np.inf, 0.0]])}, {}, "must be finite"),
        ({"rcond": 1.0}, {"keys": np.ones((5, 2))}, r"rcond must be a number in \[0, 1\)"),
        ({"rcond": -1e-3}, {"keys": np.ones((5, 2))}, "rcond must be"),
        ({"rcond": np.nan}, {"keys": np.ones((5, 2))}, "rcond must be"),
        ({}, {"keys": np.array([[0.0, 1.0], [np.nan, 2.0]])}, "keys given to fit must be finite"),
        ({}, {"keys": np.array([[0.0, 1.0], [np.inf, 2.0]])}, "keys given to fit must be finite"),
        ({"n_components": 0}, {"keys": np.ones((5, 2))}, "positive integer"),
        ({}, {"keys": np.ones((5, 2)), "queries": np.ones((4, 3))}, r"shape \(n, 2\)"),
    ],
)
def test_nystroem_bad_arguments_raise(params, fit_kwargs, match):
    fit_kwargs = dict(fit_kwargs)
    keys = fit_kwargs.pop("keys", np.empty((0, 2)))
    with pytest.raises(ValueError, match=match):
        NystroemFeatures(**params).fit(keys, random_state=0, **fit_kwargs)


@pytest.mark.parametrize("method", ["transform", "log_transform", "shifted_log_transform"])
def test_nystroem_unfitted_raises(method):
    with pytest.raises(ValueError, match="not fitted"):
        getattr(NystroemFeatures(), method)(np.ones((1, 2)))


def test_nystroem_empty_keys_raise_value_error():
    with pytest.raises(ValueError, match="keys"):
        NystroemFeatures(4).fit(np.empty((0, 2)), random_state=0)


def test_nystroem_covers_queries_within_six_of_a_landmark():
    landmarks = np.array([[0.0, 0.0], [10.0, 0.0]])
    phi = NystroemFeatures(landmarks=landmarks).fit(np.empty((0, 2)))
    U = np.array([[5.9, 0.0], [16.0, 0.0], [0.0, 6.01], [5.0, 5.0], [1e300, 0.0]])
    np.testing.assert_array_equal(phi.covered(U), [True, True, False, False, False])


def test_nystroem_drops_tiny_eigenvalues_when_landmarks_nearly_coincide():
    # A bandwidth 100 times the spread: the landmarks' gram is numerically low rank.
    Q, K = _nystroem_sample(scale=0.01)
    phi = NystroemFeatures(32).fit(K, random_state=0)
    gram = _gaussian_matrix(phi.landmarks_, phi.landmarks_)
    assert phi.n_components_ == 32 and phi.rank_ < 32
    assert np.linalg.norm(phi.inner_matrix_, 2) <= 1.0 / (phi.rcond * np.linalg.eigvalsh(gram)[-1])
    features = phi.transform(Q)
    assert np.all(np.isfinite(features))
    np.testing.assert_allclose(features @ phi.transform(K).T, _gaussian_matrix(Q, K), atol=1e-8)


# ------------------------------------------------------------------- protocol

ALL_MAPS = [
    PositiveRandomFeatures(n_components=8),
    PositiveRandomFeatures(n_components=8, hyperbolic=True),
    PositiveRandomFeatures(n_components=8, A="optimal"),
    TrigonometricRandomFeatures(n_components=8),
    NystroemFeatures(n_components=8),
    EluFeatureMap(),
    ReluFeatureMap(),
]
MAP_IDS = ["positive", "hyperbolic", "optimal", "trig", "nystroem", "elu", "relu"]


def _keys(n=40, d=3, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


@pytest.mark.parametrize("template", ALL_MAPS, ids=MAP_IDS)
def test_every_map_follows_the_protocol(template):
    phi = clone(template)
    assert isinstance(phi, FeatureMap)
    assert phi.approximates in ("softmax", "gaussian", None)
    assert phi.fit(_keys(), random_state=0) is phi
    assert phi.n_features_in_ == 3
    U = _keys(5, seed=1)
    features = phi.transform(U)
    assert features.shape == (5, phi.n_components_)
    assert phi.n_components_ == (3 if isinstance(phi, (EluFeatureMap, ReluFeatureMap)) else 8)
    if phi.log_domain:
        assert phi.log_transform(U).shape == features.shape
        np.testing.assert_array_equal(phi.shifted_log_transform(U).max(axis=1), 0.0)
    else:
        with pytest.raises(NotImplementedError, match="log_domain"):
            phi.log_transform(U)
    if not phi.signed:
        assert np.all(features >= 0)
    assert set(phi.get_params()) == set(template.get_params())
    assert repr(phi) == repr(template)


@pytest.mark.parametrize("template", ALL_MAPS[:4] + ALL_MAPS[5:], ids=MAP_IDS[:4] + MAP_IDS[5:])
def test_default_inner_is_identity_and_every_query_is_covered(template):
    phi = clone(template).fit(_keys(), random_state=0)
    sums = np.arange(2.0 * phi.n_components_).reshape(-1, 2)
    assert phi.inner(sums) is sums
    covered = phi.covered(1e6 * _keys(4))
    assert covered.dtype == bool
    np.testing.assert_array_equal(covered, True)


@pytest.mark.parametrize("template", ALL_MAPS, ids=MAP_IDS)
def test_same_seed_and_clone_give_identical_features(template):
    U = _keys(6, seed=2)
    first = clone(template).fit(_keys(), random_state=np.random.RandomState(7)).transform(U)
    again = clone(template).fit(_keys(), random_state=np.random.RandomState(7)).transform(U)
    np.testing.assert_array_equal(first, again)
    fitted = clone(template).fit(_keys(), random_state=7)
    refitted = clone(fitted).fit(_keys(), random_state=7)
    assert not hasattr(clone(fitted), "n_components_")
    np.testing.assert_array_equal(refitted.transform(U), fitted.transform(U))


def test_random_state_instance_is_advanced_by_fit():
    rng = np.random.RandomState(3)
    a = PositiveRandomFeatures(8).fit(_dim(3), random_state=rng).omega_
    b = PositiveRandomFeatures(8).fit(_dim(3), random_state=rng).omega_
    assert not np.allclose(a, b)
    replay = np.random.RandomState(3)
    np.testing.assert_array_equal(gaussian_rows(8, 3, True, replay), a)
    np.testing.assert_array_equal(gaussian_rows(8, 3, True, replay), b)


@pytest.mark.parametrize("template", ALL_MAPS, ids=MAP_IDS)
def test_transform_before_fit_raises_not_fitted(template):
    with pytest.raises(NotFittedError, match=type(template).__name__):
        clone(template).transform(np.ones((1, 3)))


def test_orthogonal_is_the_default():
    assert PositiveRandomFeatures().orthogonal and TrigonometricRandomFeatures().orthogonal
    assert make_feature_map("positive").orthogonal
    omega = PositiveRandomFeatures(4).fit(_dim(4), random_state=0).omega_
    gram = omega @ omega.T
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-12)


@pytest.mark.parametrize("name", FEATURE_MAPS)
def test_make_feature_map_gives_a_feature_map_for_every_name(name):
    phi = make_feature_map(name, n_components=16)
    assert isinstance(phi, FeatureMap)
    assert phi.get_params().get("n_components", 16) == 16
    assert type(check_feature_map(name, n_components=16)) is type(phi)


def test_check_feature_map_clones_a_feature_map():
    phi = NystroemFeatures(16).fit(_keys(), random_state=0)
    template = check_feature_map(phi)
    assert isinstance(template, NystroemFeatures) and template is not phi
    assert template.get_params() == phi.get_params()
    assert not hasattr(template, "n_components_")


def test_check_feature_map_rejects_other_objects_and_unknown_names():
    with pytest.raises(TypeError, match=r"feature_map must be one of 'positive', .*RBFSampler"):
        check_feature_map(RBFSampler())
    with pytest.raises(TypeError, match="kernattn.feature_maps.FeatureMap"):
        check_feature_map(PositiveRandomFeatures)
    with pytest.raises(ValueError, match="kernel_map must be one of 'positive'.*'softplus'"):
        check_feature_map("softplus", name="kernel_map")


@pytest.mark.parametrize(
    ("keys", "fit_kwargs", "error", "match"),
    [
        (np.ones(3), {}, ValueError, r"keys must be a 2-D array of shape \(n, d\)"),
        (np.ones((3, 0)), {}, ValueError, "keys must be"),
        (np.array([[np.nan, 1.0]]), {}, ValueError, "keys given to fit must be finite"),
        (np.ones((3, 2)), {"queries": np.ones((3, 3))}, ValueError, r"queries .*\(n, 2\)"),
        (np.ones((3, 2)), {"queries": np.full((1, 2), np.inf)}, ValueError, "queries given"),
        (np.ones((3, 2)), {"sample_weight": np.ones(2)}, ValueError, r"sample_weight .*\(3,\)"),
        (np.ones((3, 2)), {"sample_weight": -np.ones(3)}, ValueError, "non-negative"),
    ],
)
def test_fit_validates_its_inputs(keys, fit_kwargs, error, match):
    with pytest.raises(error, match=match):
        PositiveRandomFeatures(4).fit(keys, **fit_kwargs)


def test_fit_records_input_dimension_and_transform_checks_it():
    phi = ReluFeatureMap().fit(np.empty((0, 4)))
    assert phi.n_features_in_ == phi.n_components_ == 4
    with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
        phi.transform(np.ones((2, 3)))


def test_optimal_parameter_from_queries_and_weighted_keys():
    rng = np.random.default_rng(5)
    K, Q, w = 2 * rng.standard_normal((30, 3)), rng.standard_normal((20, 3)), rng.random(30)

    def mean_sq_sum(Q, q_weight, K, k_weight):
        pairs = np.sum((Q[:, None, :] + K[None, :, :]) ** 2, axis=2)
        return np.average(np.average(pairs, axis=1, weights=k_weight), weights=q_weight)

    cases = [
        ({}, mean_sq_sum(K, None, K, None)),
        ({"sample_weight": w}, mean_sq_sum(K, w, K, w)),
        ({"queries": Q, "sample_weight": w}, mean_sq_sum(Q, None, K, w)),
    ]
    for fit_kwargs, rho in cases:
        phi = PositiveRandomFeatures(4, A="optimal").fit(K, random_state=0, **fit_kwargs)
        assert phi.A_ == pytest.approx(optimal_positive_parameter(rho, 3), rel=1e-12)


def test_kernel_approximation_error_leaves_an_unfitted_map_unfitted():
    rng = np.random.default_rng(0)
    Q, K = 0.3 * rng.standard_normal((4, 2)), 0.3 * rng.standard_normal((10, 2))
    phi = PositiveRandomFeatures(16)
    errors = kernel_approximation_error(Q, K, feature_map=phi, random_state=0)
    assert not hasattr(phi, "n_components_")
    fitted = PositiveRandomFeatures(16).fit(K, queries=Q, random_state=0)
    assert kernel_approximation_error(Q, K, feature_map=fitted) == errors


def test_default_shifted_log_keeps_rows_of_zero_features_at_minus_infinity():
    phi = EluFeatureMap().fit(_dim(2))
    logs = phi.shifted_log_transform(np.array([[-np.inf, -np.inf], [1.0, -1.0]]))
    np.testing.assert_array_equal(logs[0], -np.inf)
    np.testing.assert_allclose(logs[1], [0.0, -1.0 - np.log(2.0)])


@pytest.mark.parametrize(
    "make, kernel",
    [
        (lambda r: PositiveRandomFeatures(n_components=r, hyperbolic=True), "softmax"),
        (lambda r: TrigonometricRandomFeatures(n_components=r), "gaussian"),
    ],
)
@pytest.mark.parametrize("r", [1, 3])
def test_paired_maps_with_an_odd_number_of_features_stay_unbiased(make, kernel, r):
    q, k = np.array([[0.3, -0.2]]), np.array([[-0.1, 0.4]])
    if kernel == "softmax":
        exact = np.exp(q @ k.T).item()
    else:
        exact = np.exp(-0.5 * np.sum((q - k) ** 2))
    estimates = []
    for seed in range(4000):
        phi = make(r).fit(_dim(2), random_state=seed)
        assert phi.n_components_ == r and phi.transform(q).shape == (1, r)
        estimates.append((phi.transform(q) @ phi.transform(k).T).item())
    error = np.std(estimates) / np.sqrt(len(estimates))
    assert abs(np.mean(estimates) - exact) < 4 * error
