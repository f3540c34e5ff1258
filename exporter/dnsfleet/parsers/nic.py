"""Which interrupt vectors of a NIC are queues, and what to call them.

Drivers name their MSI-X vectors freely (``request_irq`` ``name``):

- ixgbe/igb/i40e/ice/bnxt: ``eth0-TxRx-3`` (i40e/ice prefix the driver: ``ice-eth0-TxRx-3``),
  plus a link/"other" vector named after the interface or ``i40e-0000:3b:00.0:misc``;
- ENA: ``eth0-Tx-Rx-3`` and ``ena-mgmnt@pci:0000:00:05.0``;
- mlx5: ``mlx5_comp3@pci:0000:08:00.0`` and ``mlx5_async0@pci:...``;
- e1000e: ``eth0-rx-0``, ``eth0-tx-0``; vmxnet3: ``eth0-rxtx-0``, ``eth0-event-4``;
- virtio_net: ``virtio2-input.0``, ``virtio2-output.0``, ``virtio2-config``.

Vectors are mapped to interfaces through ``/sys/class/net/<if>/device/msi_irqs`` wherever it
exists; the name patterns below only decide which of a device's vectors carry queues, and are
the fallback mapping when sysfs has no ``msi_irqs`` (Xen, some hypervisors, fixture trees).
"""

from __future__ import annotations

import re

# Control vectors: configuration, admin/async event queues, link state, errors.
_CONTROL = re.compile(
    r"(?i)(config|async|mgmnt|mgmt|misc|ctrl|control|event|other|lsc|"
    r"link|err|admin|fw)"
)
_TRAILING_NUMBER = re.compile(r"\d+$")


def vector_name(action: str) -> str:
    """``mlx5_comp3@pci:0000:08:00.0`` -> ``mlx5_comp3``; shared lines keep their first
    action (NIC queue vectors are never shared)."""
    return action.split(",", 1)[0].split("@", 1)[0].strip()


def is_queue_vector(action: str, ifname: str) -> bool:
    name = vector_name(action)
    # The interface name is the admin's choice ("uplink0") and must not read as a keyword.
    if not name or name == ifname or _CONTROL.search(name.replace(ifname, "")):
        return False
    return bool(_TRAILING_NUMBER.search(name))


def matches_interface(action: str, *, ifname: str, pci_slot: str | None) -> bool:
    """Name-based fallback: does this IRQ action belong to ``ifname``?"""
    full = action.split(",", 1)[0].strip()
    if pci_slot and full.endswith("@pci:" + pci_slot):
        return True
    name = vector_name(full)
    return name.startswith(ifname + "-") or f"-{ifname}-" in name
