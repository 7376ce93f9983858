// nccl-fabric-gpucheck: one rank of an NCCL job that checks all-reduce, all-gather and send/recv
// byte for byte at every size and times all-reduce, printing nccl-tests-like rows. Run one process
// per rank (tests/gpu/run.sh starts two on one GPU with different NCCL_HOSTID, so that NCCL sends
// everything through the net plugin). Exit: 0 all correct, 1 a wrong result or an NCCL/CUDA
// error, 77 no GPU (skipped), 124 the watchdog fired.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu_api.h"

namespace gpucheck {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFail = 1;
constexpr int kExitSkip = 77;
constexpr int kExitTimeout = 124;

struct Options {
  int rank = -1;
  int nranks = 2;
  std::string id_file;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{256} << 20;
  size_t step_factor = 4;
  int iters = 20;
  int warmup = 5;
  int timeout_s = 600;
  int id_timeout_s = 120;
  std::string nccl_lib;
};

void usage(FILE* f) {
  fprintf(f,
          "usage: nccl-fabric-gpucheck --rank R --id-file PATH [options]\n"
          "One rank of an NCCL job: all-reduce (float sum), all-gather and send/recv to the\n"
          "neighbours, each result checked byte for byte, all-reduce timed per size.\n"
          "  --rank R            this process's rank (0 writes the unique id, others read it)\n"
          "  --nranks N          ranks in the job (default 2)\n"
          "  --id-file PATH      where rank 0 publishes ncclUniqueId (written to a temporary\n"
          "                      file and renamed); use a fresh path per job\n"
          "  --min-bytes B       smallest size (default 8; K/M/G suffixes)\n"
          "  --max-bytes B       largest size (default 256M)\n"
          "  --step-factor F     size multiplier between rows (default 4)\n"
          "  --iters N           timed all-reduces per size (default 20)\n"
          "  --warmup N          untimed all-reduces before them (default 5)\n"
          "  --timeout-s S       the whole run's bound: past it the watchdog says where it was\n"
          "                      and exits 124 (default 600)\n"
          "  --id-timeout-s S    how long rank > 0 waits for the id file (default 120)\n"
          "  --nccl-lib PATH     NCCL library (default $NF_NCCL_LIB, else libnccl.so.2)\n"
          "Exit status: 0 all correct, 1 a wrong result or an error, 77 no GPU (skipped),\n"
          "124 timed out.\n");
}

bool parse_size(const char* s, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  switch (*end) {
    case '\0': break;
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    default: return false;
  }
  if (*end != '\0' || v > (~0ULL >> shift)) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

bool parse_int(const char* s, int lo, int hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// Returns -1 to go on, else the exit status.
int parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return kExitOk;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "nccl-fabric-gpucheck: %s needs a value (or is unknown)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    int step = 0;
    bool ok = true;
    if (a == "--rank")
      ok = parse_int(v, 0, 1 << 20, &o->rank);
    else if (a == "--nranks")
      ok = parse_int(v, 2, 1 << 20, &o->nranks);
    else if (a == "--id-file")
      o->id_file = v;
    else if (a == "--min-bytes")
      ok = parse_size(v, &o->min_bytes);
    else if (a == "--max-bytes")
      ok = parse_size(v, &o->max_bytes);
    else if (a == "--step-factor") {
      ok = parse_int(v, 2, 1024, &step);
      o->step_factor = step;
    } else if (a == "--iters")
      ok = parse_int(v, 1, 1000000, &o->iters);
    else if (a == "--warmup")
      ok = parse_int(v, 0, 1000000, &o->warmup);
    else if (a == "--timeout-s")
      ok = parse_int(v, 1, 86400, &o->timeout_s);
    else if (a == "--id-timeout-s")
      ok = parse_int(v, 1, 86400, &o->id_timeout_s);
    else if (a == "--nccl-lib")
      o->nccl_lib = v;
    else {
      fprintf(stderr, "nccl-fabric-gpucheck: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
    if (!ok) {
      fprintf(stderr, "nccl-fabric-gpucheck: bad value '%s' for %s\n", v, a.c_str());
      return 2;
    }
  }
  if (o->rank < 0 || o->id_file.empty()) {
    fprintf(stderr, "nccl-fabric-gpucheck: --rank and --id-file are required (see --help)\n");
    return 2;
  }
  if (o->rank >= o->nranks) {
    fprintf(stderr, "nccl-fabric-gpucheck: --rank %d is not below --nranks %d\n", o->rank,
            o->nranks);
    return 2;
  }
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
    fprintf(stderr, "nccl-fabric-gpucheck: need 0 < --min-bytes <= --max-bytes\n");
    return 2;
  }
  if (o->nccl_lib.empty()) {
    const char* env = getenv("NF_NCCL_LIB");
    o->nccl_lib = (env != nullptr && env[0] != '\0') ? env : "libnccl.so.2";
  }
  return -1;
}

// Bounds the whole run: when it is not stopped in time it prints the phase the rank was in and
// ends the process (NCCL's threads included) with 124, like timeout(1).
class Watchdog {
 public:
  Watchdog(int rank, int timeout_s) : rank_(rank), timeout_s_(timeout_s) {
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `what` must be a string literal (only its pointer is kept).
  void phase(const char* what, size_t bytes = 0) {
    bytes_.store(bytes, std::memory_order_relaxed);
    what_.store(what, std::memory_order_release);
  }

 private:
  void run() {
    std::unique_lock<std::mutex> g(mu_);
    if (cv_.wait_for(g, std::chrono::seconds(timeout_s_), [this] { return stopped_; })) return;
    fprintf(stderr,
            "nccl-fabric-gpucheck rank %d: TIMEOUT: not done after %d s (--timeout-s); it was in "
            "'%s' (size %zu B). The peer may be dead or the network stuck: see NCCL's log.\n",
            rank_, timeout_s_, what_.load(std::memory_order_acquire),
            bytes_.load(std::memory_order_relaxed));
    fflush(stdout);
    fflush(stderr);
    _exit(kExitTimeout);
  }

  const int rank_;
  const int timeout_s_;
  std::atomic<const char*> what_{"start"};
  std::atomic<size_t> bytes_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

// An error that ends the run: what failed and why (CUDA or NCCL's words).
struct Failure {
  std::string text;
};

class DeviceBuffer {
 public:
  DeviceBuffer(const Cuda& cuda, size_t bytes) : cuda_(cuda) {
    cu::Result r = cuda_.mem_alloc(&ptr_, bytes);
    if (r != cu::kSuccess) {
      ptr_ = 0;
      throw Failure{"cuMemAlloc(" + std::to_string(bytes) + ") failed: " + cuda_.error_text(r)};
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != 0) cuda_.mem_free(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  cu::DevicePtr dptr() const { return ptr_; }

 private:
  const Cuda& cuda_;
  cu::DevicePtr ptr_ = 0;
};

class Stream {
 public:
  explicit Stream(const Cuda& cuda) : cuda_(cuda) {
    cu::Result r = cuda_.stream_create(&s_, kCuStreamNonBlocking);
    if (r != cu::kSuccess) throw Failure{"cuStreamCreate failed: " + cuda_.error_text(r)};
  }
  ~Stream() {
    if (s_ != nullptr) cuda_.stream_destroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CuStream get() const { return s_; }

 private:
  const Cuda& cuda_;
  CuStream s_ = nullptr;
};

// The primary context of device 0, current on this thread: NCCL's CUDA runtime finds and uses
// the same context, so its kernels and our copies see the same memory.
class PrimaryContext {
 public:
  PrimaryContext(const Cuda& cuda, cu::Device dev) : cuda_(cuda), dev_(dev) {
    cu::Context ctx = nullptr;
    cu::Result r = cuda_.primary_ctx_retain(&ctx, dev_);
    if (r != cu::kSuccess) throw Failure{"cuDevicePrimaryCtxRetain: " + cuda_.error_text(r)};
    retained_ = true;
    r = cuda_.ctx_set_current(ctx);
    if (r != cu::kSuccess) throw Failure{"cuCtxSetCurrent: " + cuda_.error_text(r)};
  }
  ~PrimaryContext() {
    if (retained_) cuda_.primary_ctx_release(dev_);
  }
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;

 private:
  const Cuda& cuda_;
  cu::Device dev_;
  bool retained_ = false;
};

void cu_check(const Cuda& cuda, cu::Result r, const char* what) {
  if (r != cu::kSuccess) throw Failure{std::string(what) + " failed: " + cuda.error_text(r)};
}

// Rank 0: a new id, published atomically (temporary file in the same folder, then rename).
void publish_id(const std::string& path, const NcclUniqueId& id) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw Failure{"cannot create " + tmp + ": " + strerror(errno)};
  bool ok = fwrite(&id, sizeof id, 1, f) == 1;
  ok = (fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    throw Failure{"cannot write the id file " + path + ": " + strerror(errno)};
  }
}

// Other ranks: wait (bounded) for rank 0's file.
NcclUniqueId wait_for_id(const std::string& path, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && static_cast<size_t>(st.st_size) == sizeof(NcclUniqueId)) {
      NcclUniqueId id;
      FILE* f = fopen(path.c_str(), "rb");
      if (f != nullptr) {
        const bool ok = fread(&id, sizeof id, 1, f) == 1;
        fclose(f);
        if (ok) return id;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw Failure{"rank 0's id file " + path + " did not appear within " +
                    std::to_string(timeout_s) + " s (--id-timeout-s); did rank 0 start?"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Byte patterns: values mod 251 never equal the 0xFF poison the receive buffers are filled with
// before each operation, so a byte NCCL did not write is always caught.
inline uint8_t pattern_byte(size_t i, int rank, unsigned salt) {
  return static_cast<uint8_t>((i * 7 + static_cast<size_t>(rank) * 31 + salt) % 251);
}
// All-reduce input: small integers, so any summation order gives the exact same float.
inline float reduce_value(size_t i, int rank) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 253 + 1));
}

class Checker {
 public:
  Checker(const Options& o, const Cuda& cuda, const Nccl& nccl, Watchdog* dog)
      : o_(o), cuda_(cuda), nccl_(nccl), dog_(dog) {}

  int run();

 private:
  void nccl_check(NcclResult r, const char* what) const {
    if (r != kNcclSuccess && r != kNcclInProgress)
      throw Failure{std::string(what) + " failed: " + nccl_.error_text(r, comm_)};
  }
  // Waits for the stream as nccl-tests does: polls it and NCCL's asynchronous error, so that a
  // failed network operation is reported rather than waited on forever.
  void wait(CuStream s, const char* what) const {
    for (;;) {
      cu::Result r = cuda_.stream_query(s);
      if (r == cu::kSuccess) return;
      if (r != kCuErrorNotReady)
        throw Failure{std::string(what) + ": the stream failed: " + cuda_.error_text(r)};
      NcclResult async = kNcclSuccess;
      nccl_check(nccl_.comm_get_async_error(comm_, &async), "ncclCommGetAsyncError");
      if (async != kNcclSuccess && async != kNcclInProgress)
        throw Failure{std::string(what) + ": NCCL reported " + nccl_.error_text(async, comm_)};
      std::this_thread::yield();
    }
  }
  void to_device(const DeviceBuffer& d, const std::vector<uint8_t>& h, size_t bytes) const {
    cu_check(cuda_, cuda_.memcpy_htod(d.dptr(), h.data(), bytes), "cuMemcpyHtoD");
  }
  void from_device(std::vector<uint8_t>* h, const DeviceBuffer& d, size_t bytes) const {
    cu_check(cuda_, cuda_.memcpy_dtoh(h->data(), d.dptr(), bytes), "cuMemcpyDtoH");
  }
  void poison(const DeviceBuffer& d, size_t bytes) const {
    cu_check(cuda_, cuda_.memset_d8(d.dptr(), 0xFF, bytes), "cuMemsetD8");
  }
  // Compares what came back with what should have; prints the first difference.
  bool same(const char* op, size_t bytes, size_t n) const {
    if (memcmp(host_got_.data(), host_want_.data(), n) == 0) return true;
    size_t i = 0;
    while (host_got_[i] == host_want_[i]) ++i;
    fprintf(stderr,
            "nccl-fabric-gpucheck rank %d: WRONG RESULT: %s at %zu B: byte %zu is 0x%02x, "
            "expected 0x%02x\n",
            o_.rank, op, bytes, i, host_got_[i], host_want_[i]);
    return false;
  }

  bool check_all_reduce(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                        CuStream s, bool run_op);
  bool check_all_gather(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                        CuStream s);
  bool check_send_recv(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                       CuStream s);
  double time_all_reduce(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                         CuStream s);

  const Options& o_;
  const Cuda& cuda_;
  const Nccl& nccl_;
  Watchdog* dog_;
  NcclComm comm_ = nullptr;
  std::vector<uint8_t> host_send_, host_want_, host_got_;
};

bool Checker::check_all_reduce(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                               CuStream s, bool run_op) {
  const size_t count = bytes / sizeof(float);
  if (run_op) {
    dog_->phase("all-reduce check", bytes);
    float* in = reinterpret_cast<float*>(host_send_.data());
    for (size_t i = 0; i < count; ++i) in[i] = reduce_value(i, o_.rank);
    to_device(send, host_send_, bytes);
    poison(recv, bytes);
    nccl_check(nccl_.all_reduce(send.get(), recv.get(), count, kNcclFloat32, kNcclSum, comm_, s),
               "ncclAllReduce");
    wait(s, "ncclAllReduce");
  }
  float* want = reinterpret_cast<float*>(host_want_.data());
  for (size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int r = 0; r < o_.nranks; ++r) sum += reduce_value(i, r);
    want[i] = sum;
  }
  from_device(&host_got_, recv, bytes);
  return same(run_op ? "all-reduce" : "all-reduce (after the timed runs)", bytes, bytes);
}

bool Checker::check_all_gather(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                               CuStream s) {
  dog_->phase("all-gather check", bytes);
  const size_t per_rank = bytes / static_cast<size_t>(o_.nranks);
  for (size_t i = 0; i < per_rank; ++i) host_send_[i] = pattern_byte(i, o_.rank, 1);
  to_device(send, host_send_, per_rank);
  poison(recv, bytes);
  nccl_check(nccl_.all_gather(send.get(), recv.get(), per_rank, kNcclInt8, comm_, s),
             "ncclAllGather");
  wait(s, "ncclAllGather");
  for (int r = 0; r < o_.nranks; ++r)
    for (size_t i = 0; i < per_rank; ++i)
      host_want_[static_cast<size_t>(r) * per_rank + i] = pattern_byte(i, r, 1);
  from_device(&host_got_, recv, bytes);
  return same("all-gather", bytes, per_rank * static_cast<size_t>(o_.nranks));
}

// Every rank sends `bytes` to the next rank and receives as much from the previous one, in one
// group: with two ranks, 0 -> 1 and 1 -> 0 at once.
bool Checker::check_send_recv(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                              CuStream s) {
  dog_->phase("send/recv check", bytes);
  const int next = (o_.rank + 1) % o_.nranks;
  const int prev = (o_.rank + o_.nranks - 1) % o_.nranks;
  for (size_t i = 0; i < bytes; ++i) host_send_[i] = pattern_byte(i, o_.rank, 2);
  to_device(send, host_send_, bytes);
  poison(recv, bytes);
  nccl_check(nccl_.group_start(), "ncclGroupStart");
  nccl_check(nccl_.send(send.get(), bytes, kNcclUint8, next, comm_, s), "ncclSend");
  nccl_check(nccl_.recv(recv.get(), bytes, kNcclUint8, prev, comm_, s), "ncclRecv");
  nccl_check(nccl_.group_end(), "ncclGroupEnd");
  wait(s, "ncclSend/ncclRecv");
  for (size_t i = 0; i < bytes; ++i) host_want_[i] = pattern_byte(i, prev, 2);
  from_device(&host_got_, recv, bytes);
  return same("send/recv", bytes, bytes);
}

// Seconds per all-reduce, averaged over --iters after --warmup, the stream drained around them.
double Checker::time_all_reduce(size_t bytes, const DeviceBuffer& send, const DeviceBuffer& recv,
                                CuStream s) {
  const size_t count = bytes / sizeof(float);
  dog_->phase("all-reduce warmup", bytes);
  for (int i = 0; i < o_.warmup; ++i)
    nccl_check(nccl_.all_reduce(send.get(), recv.get(), count, kNcclFloat32, kNcclSum, comm_, s),
               "ncclAllReduce");
  wait(s, "ncclAllReduce (warmup)");
  dog_->phase("all-reduce timing", bytes);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o_.iters; ++i)
    nccl_check(nccl_.all_reduce(send.get(), recv.get(), count, kNcclFloat32, kNcclSum, comm_, s),
               "ncclAllReduce");
  wait(s, "ncclAllReduce (timed)");
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / o_.iters;
}

int Checker::run() {
  // Sizes that every operation can use whole: floats for all-reduce, equal parts for all-gather.
  const size_t align = sizeof(float) * static_cast<size_t>(o_.nranks);
  std::vector<size_t> sizes;
  for (size_t b = o_.min_bytes; b <= o_.max_bytes;) {
    const size_t a = b < align ? align : b / align * align;
    if (sizes.empty() || sizes.back() != a) sizes.push_back(a);
    if (b > o_.max_bytes / o_.step_factor) break;
    b *= o_.step_factor;
  }
  const size_t last = o_.max_bytes < align ? align : o_.max_bytes / align * align;
  if (sizes.back() != last) sizes.push_back(last);
  const size_t biggest = sizes.back();
  host_send_.resize(biggest);
  host_want_.resize(biggest);
  host_got_.resize(biggest);

  Stream stream(cuda_);
  DeviceBuffer send(cuda_, biggest);
  DeviceBuffer recv(cuda_, biggest);

  NcclUniqueId id;
  if (o_.rank == 0) {
    dog_->phase("ncclGetUniqueId");
    nccl_check(nccl_.get_unique_id(&id), "ncclGetUniqueId");
    publish_id(o_.id_file, id);
  } else {
    dog_->phase("waiting for the id file");
    id = wait_for_id(o_.id_file, o_.id_timeout_s);
  }
  dog_->phase("ncclCommInitRank");
  nccl_check(nccl_.comm_init_rank(&comm_, o_.nranks, id, o_.rank), "ncclCommInitRank");
  printf("# rank %d/%d: communicator ready\n", o_.rank, o_.nranks);
  printf("# %12s %12s %6s %6s %11s %11s %11s  %-10s %-10s %-10s %s\n", "size(B)", "count", "type",
         "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "allreduce", "allgather", "sendrecv",
         "result");
  fflush(stdout);

  bool all_ok = true;
  try {
    for (size_t bytes : sizes) {
      const bool ar = check_all_reduce(bytes, send, recv, stream.get(), true);
      // The timed runs reduce the same input: their last result is checked too.
      const double sec = time_all_reduce(bytes, send, recv, stream.get());
      dog_->phase("all-reduce check after timing", bytes);
      const bool timed_ok = check_all_reduce(bytes, send, recv, stream.get(), false);
      const bool ag = check_all_gather(bytes, send, recv, stream.get());
      const bool sr = check_send_recv(bytes, send, recv, stream.get());
      const double algbw = static_cast<double>(bytes) / sec / 1e9;
      const double busbw = algbw * 2.0 * (o_.nranks - 1) / o_.nranks;
      const bool ok = ar && ag && sr && timed_ok;
      all_ok = all_ok && ok;
      printf("  %12zu %12zu %6s %6s %11.2f %11.3f %11.3f  %-10s %-10s %-10s %s\n", bytes,
             bytes / sizeof(float), "float", "sum", sec * 1e6, algbw, busbw,
             (ar && timed_ok) ? "ok" : "WRONG", ag ? "ok" : "WRONG", sr ? "ok" : "WRONG",
             ok ? "OK" : "FAIL");
      fflush(stdout);
    }
  } catch (const Failure&) {
    nccl_.comm_abort(comm_);  // a communicator in error may not finish a destroy
    comm_ = nullptr;
    throw;
  }
  dog_->phase("ncclCommDestroy");
  NcclResult r = nccl_.comm_destroy(comm_);
  comm_ = nullptr;
  if (r != kNcclSuccess) {
    fprintf(stderr, "nccl-fabric-gpucheck rank %d: ncclCommDestroy: %s\n", o_.rank,
            nccl_.error_text(r, nullptr).c_str());
    all_ok = false;
  }
  if (o_.rank == 0) unlink(o_.id_file.c_str());
  printf("# rank %d: %s\n", o_.rank, all_ok ? "all results correct" : "WRONG RESULTS");
  return all_ok ? kExitOk : kExitFail;
}

int skip(const std::string& why) {
  printf("SKIP: nccl-fabric-gpucheck: %s\n", why.c_str());
  fflush(stdout);
  return kExitSkip;
}

int main_checked(int argc, char** argv) {
  Options o;
  const int rc = parse_options(argc, argv, &o);
  if (rc >= 0) return rc;
  Watchdog dog(o.rank, o.timeout_s);

  // No driver or no device: skipped, saying why. Anything wrong after that is a failure.
  dog.phase("loading the CUDA driver");
  Cuda cuda;
  std::string why;
  if (!cuda.load(&why)) return skip(why + " (no GPU here?)");
  cu::Result r = cuda.init(0);
  if (r != cu::kSuccess) return skip("cuInit failed: " + cuda.error_text(r) + " (no usable GPU)");
  int ndev = 0;
  r = cuda.device_get_count(&ndev);
  if (r != cu::kSuccess || ndev == 0) return skip("the CUDA driver sees no GPU");
  cu::Device dev = 0;
  cu_check(cuda, cuda.device_get(&dev, 0), "cuDeviceGet(0)");
  char name[256] = {0};
  cuda.device_get_name(name, sizeof name - 1, dev);
  int driver = 0;
  cuda.driver_get_version(&driver);

  dog.phase("loading NCCL");
  Nccl nccl;
  if (!nccl.load(o.nccl_lib, &why)) return skip(why);
  int version = 0;
  if (nccl.get_version(&version) != kNcclSuccess) throw Failure{"ncclGetVersion failed"};
  printf("# NCCL version %s (%d) from %s\n", nccl_version_string(version).c_str(), version,
         o.nccl_lib.c_str());
  const char* net = getenv("NCCL_NET");
  const char* plugin = getenv("NCCL_NET_PLUGIN");
  printf("# rank %d/%d on GPU 0 of %d: %s, CUDA driver %d.%d; NCCL_NET=%s NCCL_NET_PLUGIN=%s\n",
         o.rank, o.nranks, ndev, name, driver / 1000, driver % 1000 / 10, net ? net : "(unset)",
         plugin ? plugin : "(unset)");
  fflush(stdout);

  PrimaryContext ctx(cuda, dev);
  Checker checker(o, cuda, nccl, &dog);
  return checker.run();
}

}  // namespace
}  // namespace gpucheck

int main(int argc, char** argv) {
  try {
    return gpucheck::main_checked(argc, argv);
  } catch (const gpucheck::Failure& f) {
    fflush(stdout);
    fprintf(stderr, "nccl-fabric-gpucheck: FAIL: %s\n", f.text.c_str());
    return gpucheck::kExitFail;
  }
}
