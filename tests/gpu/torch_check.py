#!/usr/bin/env python3
"""One rank of a torch.distributed (NCCL backend) job: all_reduce, all_gather and send/recv to the
neighbours at every size, each result checked exactly, all_reduce timed per size. Prints rows in
the format of nccl-fabric-gpucheck. tests/gpu/run.sh starts two ranks on one GPU with different
NCCL_HOSTID values, so that NCCL carries everything over the net plugin.

Exit status: 0 all correct, 1 a wrong result or an error, 77 no PyTorch or no CUDA (skipped),
124 the watchdog fired.
"""
import argparse
import datetime
import os
import sys
import threading
import time

EXIT_OK, EXIT_FAIL, EXIT_SKIP, EXIT_TIMEOUT = 0, 1, 77, 124


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    if t and t[-1] in units:
        return int(t[:-1]) * units[t[-1]]
    return int(t)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--init-method", required=True,
                   help="file:///fresh/path or tcp://127.0.0.1:PORT")
    p.add_argument("--min-bytes", type=parse_size, default=8)
    p.add_argument("--max-bytes", type=parse_size, default=256 << 20)
    p.add_argument("--step-factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout-s", type=int, default=600,
                   help="bound on the whole run: past it, say where it was and exit 124")
    a = p.parse_args()
    if a.world_size < 2 or not 0 <= a.rank < a.world_size:
        p.error("need --world-size >= 2 and 0 <= --rank < --world-size")
    if not 0 < a.min_bytes <= a.max_bytes or a.step_factor < 2 or a.iters < 1 or a.warmup < 0:
        p.error("need 0 < --min-bytes <= --max-bytes, --step-factor >= 2, --iters >= 1")
    return a


class Watchdog:
    """Ends the process (NCCL's threads too) with 124 when the run is not done in time."""

    def __init__(self, rank, timeout_s):
        self.rank, self.timeout_s, self.phase = rank, timeout_s, ("start", 0)
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        if self.done.wait(self.timeout_s):
            return
        what, size = self.phase
        sys.stdout.flush()
        sys.stderr.write(f"torch_check rank {self.rank}: TIMEOUT: not done after {self.timeout_s} s "
                         f"(--timeout-s); it was in '{what}' (size {size} B)\n")
        sys.stderr.flush()
        os._exit(EXIT_TIMEOUT)


def sizes_of(a):
    align = 4 * a.world_size  # floats for all_reduce, equal parts for all_gather
    out, b = [], a.min_bytes
    while b <= a.max_bytes:
        s = max(align, b // align * align)
        if not out or out[-1] != s:
            out.append(s)
        b *= a.step_factor
    last = max(align, a.max_bytes // align * align)
    if out[-1] != last:
        out.append(last)
    return out


def main():
    a = parse_args()
    dog = Watchdog(a.rank, a.timeout_s)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"SKIP: torch_check: PyTorch is not installed ({e})", flush=True)
        return EXIT_SKIP
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("SKIP: torch_check: torch.cuda sees no GPU", flush=True)
        return EXIT_SKIP
    if not dist.is_available() or not dist.is_nccl_available():
        print("SKIP: torch_check: this PyTorch has no NCCL backend", flush=True)
        return EXIT_SKIP

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    nccl_version = ".".join(str(v) for v in torch.cuda.nccl.version())
    print(f"# torch {torch.__version__}, NCCL version {nccl_version}; rank {a.rank}/{a.world_size} "
          f"on {torch.cuda.get_device_name(dev)}; NCCL_NET={os.environ.get('NCCL_NET', '(unset)')} "
          f"NCCL_NET_PLUGIN={os.environ.get('NCCL_NET_PLUGIN', '(unset)')}", flush=True)

    dog.phase = ("init_process_group", 0)
    dist.init_process_group("nccl", init_method=a.init_method, rank=a.rank,
                            world_size=a.world_size,
                            timeout=datetime.timedelta(seconds=a.timeout_s))
    rank, world = a.rank, a.world_size
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    print(f"# {'size(B)':>12} {'count':>12} {'type':>6} {'redop':>6} {'time(us)':>11} "
          f"{'algbw(GB/s)':>11} {'busbw(GB/s)':>11}  {'allreduce':<10} {'allgather':<10} "
          f"{'sendrecv':<10} result", flush=True)

    def pattern(n, r, salt):
        # Values mod 251 never equal the 0xFF poison put in receive buffers first.
        i = torch.arange(n, device=dev, dtype=torch.int64)
        return ((i * 7 + r * 31 + salt) % 251).to(torch.uint8)

    def reduce_input(n, r):
        # Small integers: every summation order gives the same float, so equality is exact.
        return ((torch.arange(n, device=dev, dtype=torch.int64) % 253) + 1).to(torch.float32) * (r + 1)

    def exact(got, want, what, size):
        g, w = got.view(torch.uint8), want.view(torch.uint8)
        if torch.equal(g, w):
            return True
        i = int((g != w).nonzero()[0])
        print(f"torch_check rank {rank}: WRONG RESULT: {what} at {size} B: byte {i} is "
              f"0x{int(g[i]):02x}, expected 0x{int(w[i]):02x}", file=sys.stderr, flush=True)
        return False

    all_ok = True
    for size in sizes_of(a):
        n = size // 4
        # all_reduce, in place: checked, then timed on zeros (which stay zeros), then checked.
        dog.phase = ("all_reduce check", size)
        x = reduce_input(n, rank)
        dist.all_reduce(x)
        want = reduce_input(n, 0) * (world * (world + 1) // 2)
        ar = exact(x, want, "all_reduce", size)
        del x, want
        z = torch.zeros(n, device=dev, dtype=torch.float32)
        dog.phase = ("all_reduce warmup", size)
        for _ in range(a.warmup):
            dist.all_reduce(z)
        torch.cuda.synchronize(dev)
        dog.phase = ("all_reduce timing", size)
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(z)
        torch.cuda.synchronize(dev)
        sec = (time.perf_counter() - t0) / a.iters
        ar = exact(z, torch.zeros_like(z), "all_reduce (timed)", size) and ar
        del z

        dog.phase = ("all_gather check", size)
        per = size // world
        out = torch.full((size,), 0xFF, device=dev, dtype=torch.uint8)
        dist.all_gather_into_tensor(out, pattern(per, rank, 1))
        want = torch.cat([pattern(per, r, 1) for r in range(world)])
        ag = exact(out, want, "all_gather", size)
        del out, want

        dog.phase = ("send/recv check", size)
        send = pattern(size, rank, 2)
        recv = torch.full((size,), 0xFF, device=dev, dtype=torch.uint8)
        ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prev)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        torch.cuda.synchronize(dev)
        sr = exact(recv, pattern(size, prev, 2), "send/recv", size)
        del send, recv

        ok = ar and ag and sr
        all_ok = all_ok and ok
        algbw = size / sec / 1e9
        busbw = algbw * 2 * (world - 1) / world
        mark = lambda b: "ok" if b else "WRONG"
        print(f"  {size:>12} {n:>12} {'float':>6} {'sum':>6} {sec * 1e6:>11.2f} {algbw:>11.3f} "
              f"{busbw:>11.3f}  {mark(ar):<10} {mark(ag):<10} {mark(sr):<10} "
              f"{'OK' if ok else 'FAIL'}", flush=True)

    dog.phase = ("destroy_process_group", 0)
    dist.destroy_process_group()
    print(f"# rank {rank}: {'all results correct' if all_ok else 'WRONG RESULTS'}", flush=True)
    dog.done.set()
    return EXIT_OK if all_ok else EXIT_FAIL


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException as e:  # an NCCL or CUDA error: a failure, said in one line
        sys.stdout.flush()
        print(f"torch_check: FAIL: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_FAIL)
