"""Every example runs in smoke mode (KERNATTN_SMOKE=1: small sizes), writes its figures, and
takes at most three times the smoke-mode run time its header states.

The examples are run by ``examples/run_examples.py`` (``--smoke``), which reads the stated
times; the same script checks the full-size times.
"""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
_SPEC = importlib.util.spec_from_file_location(
    "run_examples", os.path.join(EXAMPLES, "run_examples.py")
)
run_examples = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(run_examples)

# Each example and the figures it writes, in order.
FIGURES = {
    "01_attention_as_kernel_smoother.py": ["01_attention_as_kernel_smoother.png"],
    "02_why_scaled_dot_product.py": [
        "02_scaling_variance_saturation.png",
        "02_scale_ablation_heldout.png",
        "02_scale_absorbed.png",
    ],
    "03_dot_product_vs_cosine.py": ["03_dot_product_vs_cosine.png"],
    "04_multiple_heads.py": ["04_multiple_heads.png"],
    "05_random_features.py": ["05_random_features.png"],
    "06_full_comparison.py": ["06_full_comparison.png"],
    "07_scaling_to_millions.py": ["07_scaling_to_millions.png"],
    "08_collapse_without_leave_one_out.py": ["08_collapse_without_leave_one_out.png"],
    "09_learned_metric_twin_peaks.py": ["09_learned_metric_twin_peaks.png"],
    "10_kernel_gallery.py": ["10_kernel_gallery.png"],
    "11_confidence_bands.py": ["11_confidence_bands.png"],
    "12_streaming_from_disk.py": ["12_streaming_from_disk.png"],
    "13_balanced_weights.py": ["13_balanced_weights.png"],
    "14_smoothing_a_million_points.py": ["14_smoothing_a_million_points.png"],
    "15_attention_maps_of_a_small_model.py": ["15_attention_maps_of_a_small_model.png"],
    "16_significance_test.py": ["16_significance_test.png"],
    "17_induction_heads.py": ["17_induction_heads.png"],
    "18_in_context_regression.py": ["18_in_context_regression.png"],
    "19_scale_on_a_token_model.py": ["19_scale_on_a_token_model.png"],
    "20_conditional_distribution.py": ["20_conditional_distribution.png"],
    "21_attention_over_labels.py": ["21_attention_over_labels.png"],
}


def test_every_example_is_listed():
    scripts = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py") and f[0].isdigit())
    assert scripts == sorted(FIGURES) == run_examples.example_scripts()


@pytest.mark.parametrize("script", sorted(FIGURES))
def test_every_header_states_its_run_times(script):
    full = run_examples.stated_seconds(script)
    smoke = run_examples.stated_seconds(script, smoke=True)
    assert full is not None and smoke is not None, f"{script} states no run time"
    # The README's promise: no example over a minute on 2 cores.
    assert 0 < smoke <= full <= 60


@pytest.mark.parametrize("script", sorted(FIGURES))
def test_example_runs_and_writes_its_figures_in_its_stated_time(script, tmp_path):
    missing = run_examples.missing_dependency(script)
    if missing is not None:
        pytest.skip(f"{script} needs {missing}")
    limit = run_examples.FACTOR * run_examples.stated_seconds(script, smoke=True)
    # Stopped well past the limit only: the figures are checked even on a slow machine.
    done, seconds, _ = run_examples.run_example(
        script, tmp_path, smoke=True, timeout=max(120.0, 2 * limit)
    )
    assert done.returncode != -9, f"{script} was stopped after {seconds:.0f} s"
    assert done.returncode == 0, done.stderr
    for name in FIGURES[script]:
        path = tmp_path / name
        assert path.exists(), f"{script} did not write {name}:\n{done.stdout}\n{done.stderr}"
        with open(path, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000
    if seconds > limit:
        load, cores = run_examples.load_average(), run_examples.available_cores()
        if load is not None and load > 2 * cores:
            # Other work holds the cores (more than twice as many runnable threads as
            # cores): a wall time says nothing about the example then.
            pytest.skip(f"{script} took {seconds:.0f} s, over {limit:g} s, at load {load:.1f}")
        factor = run_examples.FACTOR
        pytest.fail(f"{script} took {seconds:.1f} s, over {limit:g} s ({factor:g} × stated)")
