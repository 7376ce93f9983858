#!/usr/bin/env python3
"""Writes the synthetic nccl-tests logs in this folder (see README.md). Not measurements: each
pair's time is latency + bytes / bandwidth, with made-up constants chosen so the fastest pair
changes with size, plus a fixed +-0.4 % ripple so the numbers do not look machine-exact. Run it
from this folder; tests/tuner/test_calibrate.cpp pins the results, so rerunning it must not
change any file."""

import math

SIZES = [8 << i for i in range(24)]  # 8 B .. 64 MiB
HOSTS = ["synth-node-a", "synth-node-b"]
NRANKS = 4
VERSION = "2.27.3+cuda12.8"
# pair: (latency us, bytes per us)
MODEL = {
    "ring-ll": (27, 900),
    "ring-ll128": (36, 2600),
    "ring-simple": (60, 6000),
    "tree-ll": (19, 300),
    "tree-simple": (52, 4200),
}
# A near tie on purpose: ring/ll128 within 3 % of ring/simple at 128K.
OVERRIDE = {("ring-ll128", 131072): 83.5}


def fmt_time(t):
    # nccl-tests keeps about five significant digits
    if t < 100:
        return "%.2f" % t
    if t < 10000:
        return "%.1f" % t
    return "%.0f" % t


def pair_time(pair, size, in_place):
    if (pair, size) in OVERRIDE and not in_place:
        return OVERRIDE[(pair, size)]
    lat, bw = MODEL[pair]
    ripple = 0.004 * math.sin(size * 0.7 + len(pair) + (1.3 if in_place else 0))
    return (lat + size / bw) * (1 + ripple)


def rank_lines(tag):
    out = []
    for r in range(NRANKS):
        host = HOSTS[r // 2]
        out.append(tag + "#  Rank %2d Group  0 Pid %6d on %12s device %2d [0000:%02x:00] "
                   "NVIDIA L4" % (r, 4100 + r, host, r % 2, 0x3a + r % 2))
    return out


def nccl_info(pair, algo_text, proto_text, tagged):
    lines = []
    for r in range(NRANKS):
        host = HOSTS[r // 2]
        prefix = "[1,%d]<stdout>:" % r if tagged else ""
        pid = 4100 + r
        lines.append(prefix + "%s:%d:%d [%d] NCCL INFO Bootstrap: Using eth0:10.0.0.%d<0>"
                     % (host, pid, pid, r % 2, 11 + r))
        if r == 0:
            lines.append(prefix + "%s:%d:%d [0] NCCL INFO NCCL version %s"
                         % (host, pid, pid, VERSION))
        if algo_text:
            lines.append(prefix + "%s:%d:%d [%d] NCCL INFO NCCL_ALGO set by environment to %s"
                         % (host, pid, pid, r % 2, algo_text))
        if proto_text:
            lines.append(prefix + "%s:%d:%d [%d] NCCL INFO NCCL_PROTO set by environment to %s"
                         % (host, pid, pid, r % 2, proto_text))
    return lines


def write_log(name, pair, coll="all_reduce", tagged=True, algo_text=None, proto_text=None,
              program_line=True, check=True, in_place=True, max_size=None, wrong_at=None):
    tag = "[1,0]<stdout>:" if tagged else ""
    sizes = [s for s in SIZES if max_size is None or s <= max_size]
    lines = []
    if program_line:
        lines.append(tag + "# Collective test starting: %s_perf" % coll)
    lines.append(tag + "# nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 2(factor) warmup "
                 "iters: 5 iters: 20 agg iters: 1 validation: %d graph: 0" % (1 if check else 0))
    lines.append(tag + "#")
    lines.append(tag + "# Using devices")
    lines += rank_lines(tag)
    lines.append(tag + "#")
    if max_size is not None:
        lines.append(tag + "# Reducing maxBytes to %d due to memory limitation" % max_size)
    if algo_text or proto_text:
        lines += nccl_info(pair, algo_text, proto_text, tagged)
    lines.append(tag + "NCCL version %s" % VERSION)
    lines.append(tag + "#")
    if in_place:
        lines.append(tag + "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place")
        lines.append(tag + "#       size         count      type   redop    root     time   "
                     "algbw   busbw #wrong     time   algbw   busbw #wrong")
        lines.append(tag + "#        (B)    (elements)                               (us)  "
                     "(GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)")
    else:
        lines.append(tag + "#" + " " * 62 + "out-of-place")
        lines.append(tag + "#       size         count      type   redop    root     time   "
                     "algbw   busbw #wrong")
        lines.append(tag + "#        (B)    (elements)                               (us)  "
                     "(GB/s)  (GB/s)")
    if coll == "all_gather":
        factor, redop = (NRANKS - 1) / NRANKS, "none"
    else:
        factor, redop = 2 * (NRANKS - 1) / NRANKS, "sum"
    total_bw, n_bw = 0.0, 0
    for i, size in enumerate(sizes):
        row = "%12d  %12d  %8s  %6s  %6d" % (size, size // 4, "float", redop, -1)
        for ip in ([False, True] if in_place else [False]):
            t = pair_time(pair, size, ip)
            algbw = size / t / 1000
            busbw = algbw * factor
            total_bw += busbw
            n_bw += 1
            wrong = "N/A" if not check else ("3" if wrong_at == size else "0")
            row += "  %7s  %6.2f  %6.2f  %5s" % (fmt_time(t), algbw, busbw, wrong)
        lines.append(tag + row)
        if tagged and i == 5:
            # Other ranks' chatter lands inside the table in real tagged logs.
            lines.append("[1,2]<stdout>:synth-node-b:4102:4102 [0] NCCL INFO Connected all trees")
            lines.append("[1,3]<stderr>:1024  warning from a launcher on stderr")
    lines.append(tag + "# Out of bounds values : 0 OK")
    lines.append(tag + "# Avg bus bandwidth    : %g" % round(total_bw / n_bw, 5))
    lines.append(tag + "#")
    lines.append(tag)
    with open(name, "w") as f:
        f.write("\n".join(lines) + "\n")


write_log("synthetic-2nodes-4ranks-all_reduce-ring-ll.log", "ring-ll",
          algo_text="Ring", proto_text="LL")
write_log("synthetic-2nodes-4ranks-all_reduce-ring-ll128.log", "ring-ll128",
          algo_text="ring", proto_text="ll128")
# -c 0, no prefixes, no NCCL INFO: the pair must come from a label; the collective from the
# file name only.
write_log("synthetic-2nodes-4ranks-all_reduce-ring-simple.log", "ring-simple", tagged=False,
          program_line=False, check=False)
write_log("synthetic-2nodes-4ranks-all_reduce-tree-ll.log", "tree-ll",
          algo_text="Tree", proto_text="LL", wrong_at=32768)
# Out-of-place columns only, and a smaller maxBytes.
write_log("synthetic-2nodes-4ranks-all_reduce-tree-simple.log", "tree-simple", tagged=False,
          algo_text="TREE", proto_text="Simple", in_place=False, max_size=16 << 20)
write_log("synthetic-2nodes-4ranks-all_gather_perf-ring-simple.log", "ring-simple",
          coll="all_gather", program_line=False, algo_text="Ring", proto_text="Simple")
