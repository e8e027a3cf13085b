"""The GPU catalogue and the HAMi registration of a worker's simulated cards.

Memory is what NVML reports as the card's total (MiB), which is what HAMi's device plugin writes
into ``devmem`` (Project-HAMi/HAMi:pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go:
total bytes / 1024 / 1024 x deviceMemoryScaling). ``type`` follows the same file at v2.10.0: the
NVML name as-is when it starts with "NVIDIA", otherwise prefixed with "NVIDIA-".
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Final

# HAMi's defaults (charts/hami/values.yaml v2.10.0): devicePlugin.deviceSplitCount and devcore.
SPLIT_COUNT: Final = 10
CORES_PER_CARD: Final = 100

REGISTER_ANNOTATION: Final = "hami.io/node-nvidia-register"
GPU_COUNT_RESOURCE: Final = "nvidia.com/gpu"
GPU_MEMORY_RESOURCE: Final = "nvidia.com/gpumem"
GPU_CORES_RESOURCE: Final = "nvidia.com/gpucores"
GPU_NODE_LABEL: Final = ("gpu", "on")


# kubelet reads a device plugin's ListAndWatch stream with gRPC's default 4 MiB receive limit, and
# HAMi's mock plugin lists one fake device per MiB of nvidia.com/gpumem, ID "mock-devices-id-<i>"
# from 0, health "Healthy", no topology (Project-HAMi/mock-device-plugin:internal/pkg/mock/server.go).
# A larger list fails the stream and the node shows no gpumem; hami.md calls it "more than ~120 GB".
KUBELET_GRPC_MESSAGE_LIMIT: Final = 4 * 1024 * 1024
_MOCK_ID_PREFIX_LENGTH: Final = len("mock-devices-id-")
_HEALTHY_LENGTH: Final = len("Healthy")


def mock_device_list_bytes(devices: int) -> int:
    """Protobuf size of the mock plugin's ``ListAndWatchResponse`` listing ``devices`` devices."""
    total, first, digits = 0, 0, 1
    while first < devices:
        last = min(devices, 10**digits)  # indexes first..last-1 have `digits` digits
        # Per Device: ID and health fields (tag, length, bytes each), wrapped as one repeated
        # field (tag, length); every length here is below 128, so one varint byte.
        device = (2 + _MOCK_ID_PREFIX_LENGTH + digits) + (2 + _HEALTHY_LENGTH)
        total += (last - first) * (2 + device)
        first, digits = last, digits + 1
    return total


def mock_memory_limit_mib() -> int:
    """The most GPU memory (MiB) one node can declare before the mock's device list is too large."""
    low, high = 0, KUBELET_GRPC_MESSAGE_LIMIT
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if mock_device_list_bytes(middle) <= KUBELET_GRPC_MESSAGE_LIMIT else (low, middle - 1)
    return low


@dataclass(frozen=True)
class GpuModel:
    """One card model as NVML describes it."""

    model: str
    nvml_name: str
    memory_mib: int

    @property
    def hami_type(self) -> str:
        if self.nvml_name.upper().startswith("NVIDIA"):
            return self.nvml_name
        return f"NVIDIA-{self.nvml_name}"


CATALOGUE: Final[dict[str, GpuModel]] = {
    gpu.model: gpu
    for gpu in (
        GpuModel("A100-40GB", "NVIDIA A100-SXM4-40GB", 40960),
        GpuModel("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920),
        GpuModel("H100-80GB", "NVIDIA H100 80GB HBM3", 81559),
        GpuModel("H200", "NVIDIA H200", 143771),
        GpuModel("L4", "NVIDIA L4", 23034),
        GpuModel("L40S", "NVIDIA L40S", 46068),
        GpuModel("T4", "Tesla T4", 15360),
        GpuModel("A10", "NVIDIA A10", 23028),
    )
}

# Card identifiers must be unique per node and stable across runs, so they are name-based UUIDs.
_ID_NAMESPACE: Final = uuid.UUID("6f1d3c9e-3a52-4d0f-9a57-8c0f3b1e2d44")


def known_models() -> str:
    return ", ".join(CATALOGUE)


@dataclass(frozen=True)
class Card:
    """One simulated card on one worker, in HAMi's DeviceInfo shape."""

    id: str
    index: int
    model: GpuModel

    def register_entry(self) -> dict[str, object]:
        # Keys and meaning: Project-HAMi/HAMi@v2.10.0:pkg/device/devices.go DeviceInfo. `health`
        # must be true (omitempty), `count` > 0 or every request fails CardTimeSlicingExhausted.
        return {
            "id": self.id,
            "index": self.index,
            "count": SPLIT_COUNT,
            "devmem": self.model.memory_mib,
            "devcore": CORES_PER_CARD,
            "type": self.model.hami_type,
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }


def worker_cards(worker: str, gpus: list[tuple[str, int]]) -> list[Card]:
    """Expand a worker's ``[(model, count)]`` into cards with stable ids and indexes."""
    cards: list[Card] = []
    for model_name, count in gpus:
        model = CATALOGUE[model_name]
        for _ in range(count):
            index = len(cards)
            card_id = f"GPU-{uuid.uuid5(_ID_NAMESPACE, f'{worker}/{index}')}"
            cards.append(Card(card_id, index, model))
    return cards


def register_annotation(cards: list[Card]) -> str:
    """The JSON value of ``hami.io/node-nvidia-register`` (the only format HAMi >= 2.8 parses)."""
    return json.dumps([card.register_entry() for card in cards], separators=(",", ":"))


def gpu_capacity(cards: list[Card]) -> int:
    """The node's ``nvidia.com/gpu`` capacity, as the real plugin advertises: split count per card."""
    return SPLIT_COUNT * len(cards)


def inventory_totals(cards: list[Card]) -> tuple[int, int]:
    """Total (memory MiB, cores %) a set of cards offers, the bounds of a tenant's GPU quota."""
    return sum(card.model.memory_mib for card in cards), CORES_PER_CARD * len(cards)
