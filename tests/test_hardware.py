"""Hardware presets: the whole registry loads and is sane; a few values pinned to their sources (docs/hardware.md)."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest
import yaml

from zeroplan.hardware.presets import all_hardware, load_hardware
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.registry import preset_paths
from zeroplan.validate import as_json, validated

REQUIRED = {
    "h100-sxm-80gb",
    "h100-pcie-80gb",
    "h100-nvl-94gb",
    "h200-141gb",
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "a100-pcie-80gb",
    "b200-180gb",
    "l40s-48gb",
    "l4-24gb",
    "rtx4090-24gb",
    "v100-sxm-32gb",
    "mi300x-192gb",
}

PRESETS = sorted(preset_paths("hardware").items())
IDS = [name for name, _ in PRESETS]


def test_registry_has_every_required_preset() -> None:
    assert REQUIRED <= set(IDS)


def test_all_hardware_loads() -> None:
    assert [hw.name for hw in all_hardware()] == IDS


@pytest.mark.parametrize(("stem", "path"), PRESETS, ids=IDS)
def test_preset_names_every_field_and_its_source(stem: str, path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data["name"] == stem
    assert set(data) == {f.name for f in fields(HardwareSpec)}, "every field stated, none defaulted"
    assert data["source"].startswith("https://"), "source opens with the public page its numbers come from"
    assert "docs/hardware.md" in data["source"], "derived planning defaults are derived in docs/hardware.md"
    assert as_json(validated(HardwareSpec, data)) == data, "load-then-dump gives the file back"


@pytest.mark.parametrize(("stem", "path"), PRESETS, ids=IDS)
def test_preset_values_are_sane(stem: str, path) -> None:
    hw = load_hardware(stem)
    assert 16 <= hw.memory_gib <= 256
    assert hw.fp32_tflops < hw.fp16_tflops, "tensor fp16 beats fp32 on every training GPU"
    assert hw.bf16_tflops in (0, hw.fp16_tflops), "bf16 and fp16 share one tensor rate (or bf16 is absent)"
    assert 0.2 <= hw.default_mfu <= 0.65, "docs/hardware.md: published MFUs lie in 9-64%"
    assert 0.2 <= hw.hbm_bandwidth_tbps <= 10
    assert hw.pcie_busbw_gbps <= hw.intra_node_busbw_gbps
    if hw.intra_node_fabric == "pcie":
        assert hw.intra_node_busbw_gbps == hw.pcie_busbw_gbps
        assert hw.intra_node_alpha_us == hw.pcie_alpha_us
    assert hw.host_link_gbps <= 63, "PCIe Gen5 x16 is 63 GB/s per direction (docs/hardware.md)"
    assert hw.nic_gbps_per_gpu <= 100
    assert hw.intra_node_alpha_us <= hw.inter_node_alpha_us
    assert 1.0 <= hw.cuda_context_gib + hw.nccl_gib <= 3.0


PINNED = [
    ("h100-sxm-80gb", "memory_gib", 79.65, "1a-H100-SXM5-nvidia-smi-81559MiB"),
    ("h100-sxm-80gb", "bf16_tflops", 989, "1a-H100-SXM5-dense-bf16"),
    ("h100-sxm-80gb", "intra_node_busbw_gbps", 360, "2e-8xH100-NVSwitch-AG/RS"),
    ("h100-sxm-80gb", "nic_gbps_per_gpu", 50, "1b-DGX-H100-8x400G-NDR"),
    ("h200-141gb", "memory_gib", 140.40, "1a-H200-nvidia-smi-143771MiB"),
    ("a100-sxm-80gb", "memory_gib", 80.0, "1a-A100-80GB-nvidia-smi-81920MiB"),
    ("a100-sxm-80gb", "intra_node_busbw_gbps", 230, "2e-8xA100-NVSwitch"),
    ("a100-sxm-80gb", "nic_gbps_per_gpu", 25, "1b-DGX-A100-8x200G-HDR"),
    ("b200-180gb", "intra_node_busbw_gbps", 680, "2e-8xB200-NVSwitch-ring"),
    ("l40s-48gb", "memory_gib", 44.99, "0-ECC-on-GDDR-46068MiB"),
    ("l40s-48gb", "intra_node_busbw_gbps", 20, "2e-PCIe-Gen4-P2P"),
    ("rtx4090-24gb", "bf16_tflops", 165, "0-GeForce-tensor-rate-fp32-accumulate"),
    ("rtx4090-24gb", "intra_node_busbw_gbps", 10, "2e-PCIe-GeForce-no-P2P"),
    ("v100-sxm-32gb", "bf16_tflops", 0, "1a-V100-no-bf16"),
    ("v100-sxm-32gb", "fp16_tflops", 125, "1a-V100-fp16"),
    ("mi300x-192gb", "bf16_tflops", 1307, "0-MI300X-dense-not-2615"),
    ("mi300x-192gb", "intra_node_busbw_gbps", 310, "2e-8xMI300X-xGMI"),
]


@pytest.mark.parametrize(("stem", "field", "expected"), [p[:3] for p in PINNED], ids=[p[3] for p in PINNED])
def test_pinned_values(stem: str, field: str, expected: float) -> None:
    assert getattr(load_hardware(stem), field) == expected


def test_bf16_flag_must_agree_with_bf16_rate() -> None:
    data = asdict(load_hardware("v100-sxm-32gb")) | {"supports_bf16": True}
    with pytest.raises(ValueError, match=r"supports_bf16 \(True\) disagrees with bf16_tflops \(0.0\)"):
        HardwareSpec(**data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"memory_gb": 80}, "memory_gb: unknown key; did you mean memory_gib?"),
        ({"default_mfu": 1.5}, "default_mfu: must be <= 1, got 1.5"),
        ({"gpus_per_node": "8"}, "gpus_per_node: expected a whole number, got '8'"),
    ],
)
def test_a_hardware_file_error_names_the_file_and_the_key(tmp_path, change, message) -> None:
    from zeroplan.errors import SpecError
    from zeroplan.hardware.presets import load_hardware_file

    path = tmp_path / "my-gpu.yaml"
    path.write_text(yaml.safe_dump(as_json(load_hardware("h100-sxm-80gb")) | change))
    with pytest.raises(SpecError) as err:
        load_hardware_file(path)
    assert str(err.value) == f"{path}: {message}"
