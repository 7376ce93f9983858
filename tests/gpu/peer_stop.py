#!/usr/bin/env python3
"""A peer that stops in the middle of a torch.distributed (NCCL backend) job must turn into an
error on the other rank within NCCL_FABRIC_PEER_TIMEOUT, not a hang until PyTorch's own timeout.

Starts two ranks on GPU 0 with different NCCL_HOSTID values (so NCCL sends everything through the
net plugin), runs all_reduce of 64 MiB in a loop with every result checked; after a few seconds
rank 1 stops itself (SIGSTOP: alive to the kernel, its TCP connections open, but it answers
nothing). Rank 0 must exit with an error; the parent measures how long after the stop that took.
The process group's own timeout is 120 s, so an exit well before it is the plugin's doing.

Exit status: 0 as expected, 1 not (rank 0 completed, hung, or saw no ncclRemoteError (ncclTimeout
where NCCL >= 2.30 loads the plugin's net ABI v12) within
--bound-s of the stop), 77 no
PyTorch or no CUDA. Usage (with the bundle's env.sh sourced):
    NCCL_FABRIC_PEER_TIMEOUT=5 python3 tests/gpu/peer_stop.py --bound-s 30
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time


def rank_main(rank, init_method, stamp):
    import datetime
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    x = torch.empty(16 << 20, dtype=torch.float32, device="cuda")
    start = time.time()
    it = 0
    while True:
        x.fill_(rank + 1.0)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if not torch.all(x == 3.0).item():
            print(f"rank {rank}: wrong all_reduce result at iteration {it}", flush=True)
            return 1
        it += 1
        if rank == 1 and time.time() - start > 4:
            with open(stamp, "w") as f:
                f.write(f"{time.time()}\n")
            print(f"rank 1: stopping myself after {it} iterations", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        if rank == 0 and time.time() - start > 600:
            return 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--init-method", default="")
    p.add_argument("--stamp", default="")
    p.add_argument("--bound-s", type=float, default=30.0)
    a = p.parse_args()
    if a.rank >= 0:
        return rank_main(a.rank, a.init_method, a.stamp)
    try:
        import torch
        if not torch.cuda.is_available():
            print("SKIP: no CUDA device")
            return 77
    except ImportError:
        print("SKIP: no PyTorch")
        return 77
    tmp = tempfile.mkdtemp()
    init = "file://" + os.path.join(tmp, "rendezvous")
    stamp = os.path.join(tmp, "stopped")
    procs = []
    for r in range(2):
        # PyTorch's watchdog would first spend a minute trying to dump debug state of the stuck
        # collective (TORCH_NCCL_DUMP_ON_TIMEOUT): the error is what is measured, not that.
        env = dict(os.environ, NCCL_HOSTID=f"peer-stop-host-{r}", CUDA_VISIBLE_DEVICES="0",
                   TORCH_NCCL_DUMP_ON_TIMEOUT="0")
        out = subprocess.PIPE if r == 0 else None
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", str(r),
                                       "--init-method", init, "--stamp", stamp], env=env,
                                      stdout=out, stderr=subprocess.STDOUT if r == 0 else None,
                                      text=True))

    # Rank 0's output, each line stamped with the time since rank 1 stopped: when the plugin's
    # WARN came, and when PyTorch acted on it.
    first_error = []  # seconds after the stop at which rank 0 first saw ncclRemoteError

    def stamp_lines(stream):
        for line in stream:
            t = "      "
            if os.path.exists(stamp):
                try:
                    dt = time.time() - float(open(stamp).read())
                    t = f"{dt:+6.1f}"
                    if ("ncclRemoteError" in line or "ncclTimeout" in line) and not first_error:
                        first_error.append(dt)
                except ValueError:
                    pass
            if "NET/FABRIC" in line or "rank" in line.lower() or "error" in line.lower():
                print(f"[{t} s] {line.rstrip()[:400]}", flush=True)
    import threading
    threading.Thread(target=stamp_lines, args=(procs[0].stdout,), daemon=True).start()
    rc0 = None
    deadline = time.time() + 300
    while time.time() < deadline:
        rc0 = procs[0].poll()
        if rc0 is not None:
            break
        time.sleep(0.05)
    end = time.time()
    for pr in procs:
        try:
            pr.send_signal(signal.SIGCONT)
            pr.kill()
        except OSError:
            pass
        pr.wait()
    if rc0 is None:
        print("FAIL: rank 0 still running 300 s later (hang)")
        return 1
    if not os.path.exists(stamp):
        print(f"FAIL: rank 0 exited ({rc0}) before rank 1 stopped")
        return 1
    stopped = float(open(stamp).read())
    took = end - stopped
    print(f"rank 0 exit status {rc0}, {took:.1f} s after rank 1 stopped "
          f"(NCCL_FABRIC_PEER_TIMEOUT={os.environ.get('NCCL_FABRIC_PEER_TIMEOUT', '10 (default)')}, "
          f"process group timeout 120 s)")
    if rc0 == 0:
        print("FAIL: rank 0 completed although its peer stopped")
        return 1
    if not first_error:
        print("FAIL: rank 0 never reported ncclRemoteError or ncclTimeout")
        return 1
    print(f"rank 0 saw the peer's failure {first_error[0]:.1f} s after rank 1 stopped")
    if first_error[0] > a.bound_s:
        print(f"FAIL: the error came later than {a.bound_s} s")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
