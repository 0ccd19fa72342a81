"""What a machine without a GPU gets without asking: `PODSConfig` trains in float32 where TRL's bf16 default cannot
run (and keeps TRL's default where it can)."""

import pytest

from trl_pods import PODSConfig


def test_podsconfig_trains_in_float32_where_bf16_cannot_run(tmp_path):
    """The README's Python quick start failed on a laptop: `PODSConfig(...)` raised transformers' "Your setup doesn't
    support bf16/gpu" (TRL defaults bf16 to True). Without a bf16 GPU an unset bf16 is now False; a bf16 the user asked
    for, or bf16 autocast on the CPU with use_cpu, is left to TRL and transformers."""
    from transformers.utils import is_torch_bf16_gpu_available

    if is_torch_bf16_gpu_available():
        pytest.skip("this machine has a GPU with bf16")
    assert PODSConfig(output_dir=str(tmp_path), pods_n=4, pods_m=2, per_device_train_batch_size=2).bf16 is False
    assert PODSConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is True  # TRL's meaning: bf16 autocast on CPU
    with pytest.raises(ValueError, match="doesn't support bf16/gpu"):
        PODSConfig(output_dir=str(tmp_path), bf16=True)


def test_podsconfig_keeps_trls_bf16_default_on_a_bf16_gpu(tmp_path, monkeypatch):
    """Where bf16 runs (simulated: transformers told there is a bf16 GPU), an unset bf16 stays TRL's default, True."""
    monkeypatch.setattr("transformers.utils.is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")  # restored after the test, whatever the config sets
    assert PODSConfig(output_dir=str(tmp_path)).bf16 is True
