#!/usr/bin/env python3
"""Writes the synthetic hwloc topologies of tests/topo/ (run it here after changing a shape).

Each file is what hwloc would export for the PCI side of an instance type: host bridges, PCIe
switches (an upstream port with one downstream port per device), GPUs and EFA NICs. Shapes follow
the published layouts (GPUs and EFA NICs per PCIe switch); bus numbers are ours where AWS does not
publish them, and match what the tests give the mock provider (MOCKEFA_PCI_ADDRS, or its default
p4d addresses). CPUs are reduced to one core per socket: only the PCI tree matters here.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

EFA = "0200 [1d0f:efa1] [1d0f:efa1] 00"
EFA2 = "0200 [1d0f:efa2] [1d0f:efa2] 00"
A100 = "0302 [10de:20b0] [10de:134f] a1"
H100 = "0302 [10de:2330] [10de:16c1] a1"
H200 = "0302 [10de:2335] [10de:18be] a1"
A10G = "0300 [10de:2237] [10de:152f] a1"
NVME = "0108 [1d0f:cd01] [1d0f:cd01] 00"
NVSWITCH = "0680 [10de:22a3] [10de:1796] a1"
BRIDGE = "0604 [1d0f:0200] [0000:0000] 00"


class Xml:
    def __init__(self):
        self.lines = []
        self.gp = 100

    def gpi(self):
        self.gp += 1
        return self.gp

    def add(self, depth, text):
        self.lines.append("  " * depth + text)


def dev(x, depth, busid, pci_type):
    x.add(depth, f'<object type="PCIDev" gp_index="{x.gpi()}" pci_busid="{busid}" '
                 f'pci_type="{pci_type}" pci_link_speed="0.000000"/>')


def host_bridge(x, depth, dom, lo, hi):
    x.add(depth, f'<object type="Bridge" gp_index="{x.gpi()}" bridge_type="0-1" depth="0" '
                 f'bridge_pci="{dom:04x}:[{lo:02x}-{hi:02x}]">')


def pci_bridge(x, depth, busid, lo, hi, bdepth):
    dom = busid.split(":")[0]
    x.add(depth, f'<object type="Bridge" gp_index="{x.gpi()}" bridge_type="1-1" depth="{bdepth}" '
                 f'bridge_pci="{dom}:[{lo:02x}-{hi:02x}]" pci_busid="{busid}" '
                 f'pci_type="{BRIDGE}" pci_link_speed="0.000000">')


def close(x, depth):
    x.add(depth, "</object>")


def switch(x, depth, up_bus, devices):
    """A PCIe switch under its own host bridge: upstream port at up_bus:00.0, downstream port k at
    (up_bus+1):k.0 leading to devices[k] = (bus, pci_type) at bus:00.0."""
    buses = [b for b, _ in devices]
    hi = max(buses)
    host_bridge(x, depth, 0, up_bus, hi)
    pci_bridge(x, depth + 1, f"0000:{up_bus:02x}:00.0", up_bus + 1, hi, 1)
    for k, (bus, t) in enumerate(devices):
        pci_bridge(x, depth + 2, f"0000:{up_bus + 1:02x}:{k:02x}.0", bus, bus, 2)
        dev(x, depth + 3, f"0000:{bus:02x}:00.0", t)
        close(x, depth + 2)
    close(x, depth + 1)
    close(x, depth)


def machine(name, sockets_io):
    """sockets_io: one function per socket that writes that socket's I/O at a given depth."""
    x = Xml()
    n = len(sockets_io)
    full = (1 << n) - 1
    x.add(0, '<?xml version="1.0" encoding="UTF-8"?>')
    x.add(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    x.add(0, '<topology version="2.0">')
    x.add(1, f'<object type="Machine" os_index="0" cpuset="0x{full:08x}" complete_cpuset="0x{full:08x}" '
             f'allowed_cpuset="0x{full:08x}" nodeset="0x{full:08x}" complete_nodeset="0x{full:08x}" '
             f'allowed_nodeset="0x{full:08x}" gp_index="1">')
    x.add(2, f'<info name="TestTopology" value="{name}"/>')
    for s, io in enumerate(sockets_io):
        m = 1 << s
        sets = f'cpuset="0x{m:08x}" complete_cpuset="0x{m:08x}" nodeset="0x{m:08x}" complete_nodeset="0x{m:08x}"'
        x.add(2, f'<object type="Package" os_index="{s}" {sets} gp_index="{x.gpi()}">')
        x.add(3, f'<object type="NUMANode" os_index="{s}" {sets} gp_index="{x.gpi()}" local_memory="1073741824"/>')
        x.add(3, f'<object type="Core" os_index="{s}" {sets} gp_index="{x.gpi()}">')
        x.add(4, f'<object type="PU" os_index="{s}" {sets} gp_index="{x.gpi()}"/>')
        close(x, 3)
        if io:
            io(x, 3)
        close(x, 2)
    close(x, 1)
    x.add(0, "</topology>")
    with open(os.path.join(HERE, name + ".xml"), "w") as f:
        f.write("\n".join(x.lines) + "\n")


# p5.48xlarge: 8 H100, 32 EFA (100 Gb/s each); each GPU shares a PCIe switch with 4 EFA NICs
# (and an NVMe drive). GPUs at 53, 64, 75, 86 (socket 0) and 97, a8, b9, ca (socket 1); the
# switch above GPU bus G has its upstream port on G-6 and the NICs on G-4 .. G-1.
P5_GPUS = [0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA]


def gpu_switches(gpus, nics_per_gpu, gpu_type, nic_type):
    def socket(first):
        def io(x, depth):
            for g in gpus[first:first + len(gpus) // 2]:
                devs = [(g - nics_per_gpu + k, nic_type) for k in range(nics_per_gpu)]
                devs.append((g, gpu_type))
                devs.append((g + 1, NVME))
                switch(x, depth, g - 6, devs)
        return io
    return [socket(0), socket(len(gpus) // 2)]


def nvswitches(x, depth):
    # NVSwitches hang off the CPU too (class 0x0680): they are no GPU.
    host_bridge(x, depth, 0, 0x05, 0x05)
    for k in range(4):
        dev(x, depth + 1, f"0000:05:{k:02x}.0", NVSWITCH)
    close(x, depth)


def p5(name, nics_per_gpu, gpu_type, nic_type):
    s0, s1 = gpu_switches(P5_GPUS, nics_per_gpu, gpu_type, nic_type)

    def socket0(x, depth):
        nvswitches(x, depth)
        s0(x, depth)
    machine(name, [socket0, s1])


# p4d.24xlarge: 8 A100, 4 EFA; each PCIe switch holds 2 GPUs and 1 EFA (and NVMe). The NICs are
# the mock's default addresses 10:1b.0, 20:1b.0, 90:1b.0, a0:1b.0; GPUs sit beside them on
# 1c.0/1d.0 behind the switch's port 0f:00.0 (1f:00.0, ...), as p4d shows them.
def p4d_socket(buses):
    def io(x, depth):
        for b in buses:
            host_bridge(x, depth, 0, b - 1, b)
            pci_bridge(x, depth + 1, f"0000:{b - 1:02x}:00.0", b, b, 1)
            dev(x, depth + 2, f"0000:{b:02x}:1b.0", EFA)
            dev(x, depth + 2, f"0000:{b:02x}:1c.0", A100)
            dev(x, depth + 2, f"0000:{b:02x}:1d.0", A100)
            dev(x, depth + 2, f"0000:{b:02x}:1e.0", NVME)
            close(x, depth + 1)
            close(x, depth)
    return io


# g5.8xlarge: 1 A10G and 1 EFA straight on the host bridge's bus 0 (no switch).
def g5_8(x, depth):
    host_bridge(x, depth, 0, 0x00, 0x00)
    dev(x, depth + 1, "0000:00:06.0", EFA)
    dev(x, depth + 1, "0000:00:1e.0", A10G)
    close(x, depth)


# g5.48xlarge: 8 A10G and 1 EFA, all on bus 0 of one host bridge per socket.
def g5_48_socket(first):
    def io(x, depth):
        bus = 0x00 if first == 0 else 0x80
        host_bridge(x, depth, 0, bus, bus)
        if first == 0:
            dev(x, depth + 1, "0000:00:06.0", EFA)
        for k in range(4):
            dev(x, depth + 1, f"0000:{bus:02x}:{0x1a + k:02x}.0", A10G)
        close(x, depth)
    return io


# A CPU instance with 4 EFA (mock default addresses) behind switches, and no GPU.
def nogpu_socket(buses):
    def io(x, depth):
        for b in buses:
            host_bridge(x, depth, 0, b - 1, b)
            pci_bridge(x, depth + 1, f"0000:{b - 1:02x}:00.0", b, b, 1)
            dev(x, depth + 2, f"0000:{b:02x}:1b.0", EFA)
            dev(x, depth + 2, f"0000:{b:02x}:1e.0", NVME)
            close(x, depth + 1)
            close(x, depth)
    return io


# Edge cases: 6 EFA share one GPU's switch (more than 4 rails: split 3 + 3), one EFA sits alone
# under a host bridge, one more has a GPU only across the host bridge.
def mixed(x, depth):
    switch(x, depth, 0x20, [(0x22 + k, EFA2) for k in range(6)] + [(0x28, H100)])
    host_bridge(x, depth, 0, 0x40, 0x41)
    pci_bridge(x, depth + 1, "0000:40:00.0", 0x41, 0x41, 1)
    dev(x, depth + 2, "0000:41:00.0", EFA2)
    close(x, depth + 1)
    close(x, depth)
    host_bridge(x, depth, 0, 0x50, 0x52)
    pci_bridge(x, depth + 1, "0000:50:00.0", 0x51, 0x51, 1)
    dev(x, depth + 2, "0000:51:00.0", EFA2)
    close(x, depth + 1)
    pci_bridge(x, depth + 1, "0000:50:01.0", 0x52, 0x52, 1)
    dev(x, depth + 2, "0000:52:00.0", H100)
    close(x, depth + 1)
    close(x, depth)


if __name__ == "__main__":
    p5("p5.48xlarge", 4, H100, EFA2)
    p5("p5en.48xlarge", 2, H200, EFA2)
    machine("p4d.24xlarge", [p4d_socket([0x10, 0x20]), p4d_socket([0x90, 0xA0])])
    machine("g5.8xlarge", [g5_8])
    machine("g5.48xlarge", [g5_48_socket(0), g5_48_socket(1)])
    machine("nopci", [None, None])
    machine("nogpu", [nogpu_socket([0x10, 0x20]), nogpu_socket([0x90, 0xA0])])
    machine("mixed", [mixed])
