"""Every example runs in smoke mode (KERNATTN_SMOKE=1: small sizes) and writes its figures."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

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
    "20_attention_over_labels.py": ["20_attention_over_labels.png"],
}
# Examples that train kernattn.torch models: skipped without torch (the torch extra).
NEEDS_TORCH = {
    "17_induction_heads.py",
    "18_in_context_regression.py",
    "19_scale_on_a_token_model.py",
}


def _run(script, out):
    env = dict(
        os.environ,
        KERNATTN_SMOKE="1",
        MPLBACKEND="Agg",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), "--out", str(out)],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_example_is_listed():
    scripts = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py") and f[0].isdigit())
    assert scripts == sorted(FIGURES)


@pytest.mark.parametrize("script", sorted(FIGURES))
def test_example_runs_and_writes_its_figures(script, tmp_path):
    if script in NEEDS_TORCH:
        pytest.importorskip("torch")
    done = _run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    for name in FIGURES[script]:
        path = tmp_path / name
        assert path.exists(), f"{script} did not write {name}:\n{done.stdout}\n{done.stderr}"
        with open(path, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000
