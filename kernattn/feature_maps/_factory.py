"""Feature maps by name, and the check of a ``feature_map`` parameter."""

from sklearn.base import clone

from kernattn.feature_maps._base import FeatureMap
from kernattn.feature_maps._deterministic import EluFeatureMap, ReluFeatureMap
from kernattn.feature_maps._nystroem import NystroemFeatures
from kernattn.feature_maps._random import PositiveRandomFeatures, TrigonometricRandomFeatures

#: The names :func:`make_feature_map` knows.
FEATURE_MAPS = ("positive", "hyperbolic", "optimal", "trig", "nystroem", "elu", "relu")


def _options():
    return ", ".join(map(repr, FEATURE_MAPS))


def make_feature_map(feature_map="positive", n_components=256, orthogonal=True):
    """An unfitted feature map from its name.

    Parameters
    ----------
    feature_map : str, default="positive"
        One of ``FEATURE_MAPS``:
        ``"positive"``, ``"hyperbolic"`` and ``"optimal"`` are
        :class:`PositiveRandomFeatures` (plain, with antithetic pairs, and with
        ``A="optimal"``); ``"trig"`` is :class:`TrigonometricRandomFeatures`;
        ``"nystroem"`` is :class:`NystroemFeatures`; ``"elu"`` and ``"relu"`` are
        :class:`EluFeatureMap` and :class:`ReluFeatureMap`.
    n_components : int, default=256
        r, for the random maps and the Nyström map (elu and relu have r = d).
    orthogonal : bool, default=True
        For the random maps: orthogonal blocks of frequencies.

    Returns
    -------
    feature_map : FeatureMap
        Not fitted.

    Examples
    --------
    >>> make_feature_map("hyperbolic", n_components=64)
    PositiveRandomFeatures(hyperbolic=True, n_components=64)
    """
    if not isinstance(feature_map, str):
        raise TypeError(f"feature_map must be one of {_options()}; got {feature_map!r}")
    if feature_map == "positive":
        return PositiveRandomFeatures(n_components, orthogonal=orthogonal)
    if feature_map == "hyperbolic":
        return PositiveRandomFeatures(n_components, orthogonal=orthogonal, hyperbolic=True)
    if feature_map == "optimal":
        return PositiveRandomFeatures(n_components, orthogonal=orthogonal, A="optimal")
    if feature_map == "trig":
        return TrigonometricRandomFeatures(n_components, orthogonal=orthogonal)
    if feature_map == "nystroem":
        return NystroemFeatures(n_components)
    if feature_map == "elu":
        return EluFeatureMap()
    if feature_map == "relu":
        return ReluFeatureMap()
    raise ValueError(f"feature_map must be one of {_options()}; got {feature_map!r}")


def check_feature_map(obj, name="feature_map", *, n_components=256, orthogonal=True):
    """An unfitted feature map from a ``feature_map`` parameter: a name or a :class:`FeatureMap`.

    A name goes through :func:`make_feature_map` (with ``n_components`` and ``orthogonal``);
    a :class:`FeatureMap` is cloned, so fitting the result leaves ``obj`` untouched.

    Parameters
    ----------
    obj : str or FeatureMap
        The parameter's value.
    name : str, default="feature_map"
        The parameter's name, for the error messages.
    n_components : int, default=256
        For a name, as in :func:`make_feature_map`.
    orthogonal : bool, default=True
        For a name, as in :func:`make_feature_map`.

    Returns
    -------
    feature_map : FeatureMap
        Not fitted; a template to clone and fit.

    Raises
    ------
    ValueError
        For a name that is not in ``FEATURE_MAPS``.
    TypeError
        For anything else that is not a :class:`FeatureMap`.

    Examples
    --------
    >>> check_feature_map("trig", n_components=8)
    TrigonometricRandomFeatures(n_components=8)
    >>> check_feature_map(NystroemFeatures(16))
    NystroemFeatures(n_components=16)
    """
    if isinstance(obj, str):
        if obj not in FEATURE_MAPS:
            raise ValueError(f"{name} must be one of {_options()}; got {obj!r}")
        return make_feature_map(obj, n_components, orthogonal)
    if not isinstance(obj, FeatureMap):
        raise TypeError(
            f"{name} must be one of {_options()} or a kernattn.feature_maps.FeatureMap; "
            f"got {obj!r}"
        )
    return clone(obj)
