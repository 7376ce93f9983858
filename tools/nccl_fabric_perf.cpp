// nccl-fabric-perf: point-to-point tests of any NCCL net plugin (latency, one-way and
// bidirectional bandwidth, several comms, grouped receives, size sweeps), measured next to raw
// libfabric doing the same transfers on the same provider, so the plugin's overhead shows as a
// ratio. It forks two processes on this host (rank 0 = parent, rank 1 = child) joined by a
// socketpair, or runs one side of a two-host test (--listen / --peer) over a TCP socket, or, built
// with MPI and started by mpirun, one of two MPI ranks with the channel over MPI.
//
// This file: the three ways of starting the pair and reporting one line on failure. The rest is
// under perf/ (see perf/perf.h).
#include <sys/prctl.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/oob.h"
#include "perf/bench.h"
#include "perf/channel.h"
#include "perf/channel_mpi.h"
#include "perf/perf.h"

namespace {

using nfp::Failure;
using nfp::kExitFail;
using nfp::kExitOk;
using nfp::kProg;

int plot_after(const nfp::Options& o, const std::vector<nfp::Result>& results) {
  if (o.plot_path.empty()) return kExitOk;
  return nfp::run_plot(o.plot_path, {}, &results, o.timeout_s);
}

// Two processes on this host.
int run_forked(nfp::Options& o) {
  const pid_t parent = getpid();
  nfc::Oob parent_end;
  const int pid = nfc::fork_with_oob(
      [&](nfc::Oob& child_end) -> int {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the parent, even when it is killed
        if (getppid() != parent) return kExitFail;
        nfp::Chan chan(std::move(child_end), 1, o.timeout_ms());
        std::string msg;
        try {
          nfp::run_rank(1, parent, chan, &o, nullptr);
          return kExitOk;
        } catch (const Failure& f) {
          if (f.peer) return kExitFail;  // rank 0 knows, and tells
          msg = f.what();
        } catch (const std::exception& e) {
          msg = std::string("unexpected failure: ") + e.what();
        }
        // Rank 0 prints it. When the channel is already gone, rank 0 failed too: its message
        // is the one printed, unless it sent none.
        if (!chan.send_error(msg) && chan.take_error(200).empty())
          fprintf(stderr, "%s: rank 1: %s\n", kProg, msg.c_str());
        return kExitFail;
      },
      &parent_end);
  if (pid < 0) {
    fprintf(stderr, "%s: cannot fork the peer process: %s\n", kProg, strerror(errno));
    return kExitFail;
  }

  nfp::Chan chan(std::move(parent_end), 0, o.timeout_ms());
  std::vector<nfp::Result> results;
  try {
    nfp::run_rank(0, pid, chan, &o, &results);
  } catch (const Failure& f) {
    if (!f.peer) chan.send_error(f.what());  // rank 1 stops at its next look at the channel
    std::string remote = f.remote;
    if (f.peer && remote.empty()) remote = chan.take_error(500);
    chan.close();
    nfc::wait_child(pid, 3000);  // killed after 3 s if it is stuck in a network wait
    // A failure rank 0 saw only because rank 1 went away is best told by rank 1's own message.
    if (f.peer && !remote.empty())
      fprintf(stderr, "%s: rank 1: %s\n", kProg, remote.c_str());
    else
      fprintf(stderr, "%s: rank 0: %s\n", kProg, f.what());
    return kExitFail;
  } catch (const std::exception& e) {
    chan.send_error(std::string("rank 0 failed: ") + e.what());
    chan.close();
    nfc::wait_child(pid, 3000);
    fprintf(stderr, "%s: rank 0: unexpected failure: %s\n", kProg, e.what());
    return kExitFail;
  }
  const int st = nfc::wait_child(pid, o.timeout_ms());
  if (st != 0) {
    fprintf(stderr, "%s: rank 1: %s\n", kProg,
            st < 0 ? "killed, died on a signal or did not exit in time"
                   : ("exited with status " + std::to_string(st)).c_str());
    return kExitFail;
  }
  return plot_after(o, results);
}

// One side of a run between two hosts.
int run_two_host(nfp::Options& o) {
  const int rank = o.listen_port > 0 ? 0 : 1;
  const std::string peer_name =
      rank == 0 ? "rank 1" : "rank 0 at " + o.peer_host + ":" + std::to_string(o.peer_port);
  std::string err;
  nfc::Oob oob;
  if (rank == 0) {
    fprintf(stderr, "%s: rank 0: waiting up to %d s for rank 1 (--peer THIS_HOST:%d)\n", kProg,
            o.timeout_s, o.listen_port);
    oob = nfc::Oob::tcp_listen(o.listen_port, o.timeout_ms(), &err);
  } else {
    oob = nfc::Oob::tcp_connect(o.peer_host, o.peer_port, o.timeout_ms(), &err);
  }
  if (!oob.valid()) {
    fprintf(stderr, "%s: rank %d: %s\n", kProg, rank, err.c_str());
    return kExitFail;
  }
  if (rank == 1) {
    if (!o.bench_opts_given.empty())
      fprintf(stderr, "%s: rank 1: note: %s and the other test options come from rank 0\n", kProg,
              o.bench_opts_given[0].c_str());
    printf("# %s: rank 1, connected to %s:%d; rank 0 prints the results\n", kProg,
           o.peer_host.c_str(), o.peer_port);
    fflush(stdout);
  }
  nfp::Chan chan(std::move(oob), rank, o.timeout_ms());
  std::vector<nfp::Result> results;
  try {
    nfp::run_rank(rank, 0, chan, &o, &results);
  } catch (const Failure& f) {
    if (!f.peer) chan.send_error(f.what());
    std::string remote = f.remote;
    if (f.peer && remote.empty()) remote = chan.take_error(500);
    fprintf(stderr, "%s: rank %d: %s%s\n", kProg, rank, f.what(),
            remote.empty() ? "" : (": " + remote).c_str());
    return kExitFail;
  } catch (const std::exception& e) {
    chan.send_error(std::string("unexpected failure: ") + e.what());
    fprintf(stderr, "%s: rank %d: unexpected failure: %s\n", kProg, rank, e.what());
    return kExitFail;
  }
  if (rank == 1) {
    printf("# %s: rank 1 done\n", kProg);
    return kExitOk;
  }
  return plot_after(o, results);
}

// One of the two ranks of an MPI job (mpirun -np 2): no fork, the channel over MPI, rank 0
// prints. MPI_Finalize only on success (it waits for the other rank); on failure the rank prints
// and exits with status 1, and the launcher ends the other one.
int run_mpi(nfp::Options& o) {
  int rank = -1, size = 0;
  std::string err;
  if (!nfp::mpi_init(&rank, &size, &err)) {
    fprintf(stderr, "%s: MPI (%s): %s\n", kProg, o.mpi_launcher.c_str(), err.c_str());
    return kExitFail;
  }
  if (size != 2) {
    if (rank == 0)
      fprintf(stderr,
              "%s: under MPI it runs as exactly 2 ranks, one per side of the test; this job has "
              "%d (%s). Start it with mpirun -np 2 (or srun -n 2)\n",
              kProg, size, o.mpi_launcher.c_str());
    fflush(stderr);
    nfp::mpi_finalize();
    return nfp::kExitUsage;
  }
  int rc = kExitOk;
  {
    nfp::Chan chan(nfp::mpi_link(1 - rank), rank, o.timeout_ms());
    std::vector<nfp::Result> results;
    try {
      nfp::run_rank(rank, 0, chan, &o, &results);
    } catch (const Failure& f) {
      std::string remote = f.remote;
      if (f.peer && remote.empty()) remote = chan.take_error(500);
      if (rank == 0) {
        // Printed first: once rank 0 exits, the launcher may end rank 1 at any moment.
        fprintf(stderr, "%s: rank 0: %s%s\n", kProg, f.what(),
                remote.empty() ? "" : (": " + remote).c_str());
        fflush(stderr);
        if (!f.peer) chan.send_error(f.what());
      } else if (f.peer) {
        if (remote.empty()) fprintf(stderr, "%s: rank 1: %s\n", kProg, f.what());
        // else it is rank 0's own failure, which rank 0 printed
      } else if (!chan.send_error(f.what()) || chan.take_error(5000).empty()) {
        // Rank 0 has it and prints it, then exits, which ends this rank; if it has not within
        // 5 s, this rank says it itself.
        fprintf(stderr, "%s: rank 1: %s\n", kProg, f.what());
      }
      return kExitFail;
    } catch (const std::exception& e) {
      fprintf(stderr, "%s: rank %d: unexpected failure: %s\n", kProg, rank, e.what());
      fflush(stderr);
      chan.send_error(std::string("rank ") + std::to_string(rank) +
                      " failed: unexpected failure: " + e.what());
      return kExitFail;
    }
    if (rank == 0) rc = plot_after(o, results);
  }
  fflush(nullptr);
  nfp::mpi_finalize();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  nfp::Options o;
  const int rc = nfp::parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  signal(SIGPIPE, SIG_IGN);

  if (!o.plot_inputs.empty())
    return nfp::run_plot(o.plot_path, o.plot_inputs, nullptr, o.timeout_s);
  if (!o.plot_path.empty() && o.listen_port == 0 && !o.peer_host.empty()) {
    fprintf(stderr, "%s: --plot: rank 1 prints no results; give --plot to rank 0 (--listen)\n",
            kProg);
    return nfp::kExitUsage;
  }
  if (!o.plot_path.empty() && nfp::find_gnuplot().empty()) {
    fprintf(stderr,
            "%s: --plot needs gnuplot, which is not in PATH; install it (e.g. apt-get install "
            "gnuplot-nox) or drop --plot\n",
            kProg);
    return kExitFail;
  }
  // Rank 1 of a two-host run learns whether the plugin runs from rank 0's plan; a path given
  // here is checked now all the same.
  if (o.run_plugin && (o.peer_host.empty() || !o.plugin.empty())) {
    std::string err;
    if (!nfp::resolve_plugin(&o, &err)) {
      fprintf(stderr, "%s: %s\n", kProg, err.c_str());
      return kExitFail;
    }
  }
  // Our plugin reads its provider from the environment; a forked child inherits it.
  setenv("NCCL_FABRIC_PROVIDER", o.provider.c_str(), 1);
  if (o.mpi) return run_mpi(o);
  return o.two_host() ? run_two_host(o) : run_forked(o);
}
