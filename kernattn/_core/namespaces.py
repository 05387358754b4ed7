"""Arrays of other libraries at the estimators' door: in as numpy, out in the caller's library.

The estimators fit and predict in numpy on the CPU (their searches need scipy, and their
numerics are written for numpy's floating-point rules). An array of another array library
— a torch tensor (CPU or CUDA), a cupy or jax array, an ``array_api_strict`` array — is
accepted anywhere an array is: it is brought to numpy on the way in (from the GPU where it
is there), and what comes out goes back to the caller's library and device. A dask
collection is not converted here: it is computed where it lives (:mod:`kernattn.distributed`).
"""

import functools

import numpy as np
from array_api_compat import (
    array_namespace,
    device,
    is_array_api_obj,
    is_cupy_array,
    is_dask_array,
    is_numpy_array,
    is_torch_array,
)


def is_foreign(a):
    """Whether ``a`` is an array of another array library than numpy (not dask)."""
    return (
        a is not None
        and is_array_api_obj(a)
        and not is_numpy_array(a)
        and not is_dask_array(a)
        and not isinstance(a, np.generic)
    )


def to_numpy(a):
    """``a`` as a numpy array on the CPU (``a`` itself when it is not another library's)."""
    if not is_foreign(a):
        return a
    if is_torch_array(a):
        return a.detach().cpu().numpy()
    if is_cupy_array(a):
        return a.get()
    try:
        return np.from_dlpack(a)
    except (TypeError, RuntimeError, BufferError, AttributeError):
        return np.asarray(a)


def from_caller(*arrays):
    """The arrays as numpy (see :func:`to_numpy`), and the function that takes a numpy result
    (or a tuple of them) back to the library and device of the first foreign array among
    them (the identity when there is none)."""
    foreign = next((a for a in arrays if is_foreign(a)), None)
    converted = tuple(to_numpy(a) for a in arrays)
    if foreign is None:
        return converted, _same
    xp = array_namespace(foreign)
    where = device(foreign)

    def back(result):
        if isinstance(result, tuple):
            return tuple(back(r) for r in result)
        return xp.asarray(np.ascontiguousarray(result), device=where)

    return converted, back


def _same(result):
    return result


def in_caller_library(method):
    """A method whose first argument (after ``self``) is an array of queries: called with it
    as numpy, its result returned in the queries' library and device."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        (X,), back = from_caller(X)
        return back(method(self, X, *args, **kwargs))

    return wrapper
