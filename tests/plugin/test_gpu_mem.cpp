// GPU memory on the mock EFA provider with the fake CUDA driver (tests/fakecuda): GPUDirect
// detection, registration of "device" memory (host memory standing in), DMA-BUF, the flush and
// the registration cache. The real thing runs in tests/gpu where a GPU exists.
#include <dlfcn.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include <rdma/fabric.h>

#include "harness.h"
#include "mem/cuda_api.h"
#include "mockprov/mockefa.h"

using namespace nft;
namespace cu = nf::cu;

namespace {

// The fake driver as a test client sees it (the plugin dlopens the same library).
struct FakeCuda {
  void* lib = nullptr;
  cu::InitFn init = nullptr;
  cu::DevicePrimaryCtxRetainFn retain = nullptr;
  cu::CtxSetCurrentFn set_current = nullptr;
  cu::MemAllocFn alloc = nullptr;
  cu::MemFreeFn free = nullptr;
  cu::Result (*alloc_managed)(cu::DevicePtr*, size_t, unsigned) = nullptr;
  cu::MemGetHandleForAddressRangeFn dmabuf = nullptr;
};
FakeCuda g_cuda;

const char* fake_path() {
  const char* p = getenv("NF_FAKECUDA_LIB");
  return p != nullptr ? p : "";
}

// NCCL calls init with a CUDA context current: make the fake's primary context current.
int cuda_context(bool make_current) {
  g_cuda.lib = dlopen(fake_path(), RTLD_NOW);
  if (g_cuda.lib == nullptr) {
    fprintf(stderr, "dlopen(%s): %s\n", fake_path(), dlerror());
    return 1;
  }
  g_cuda.init = reinterpret_cast<cu::InitFn>(dlsym(g_cuda.lib, "cuInit"));
  g_cuda.retain =
      reinterpret_cast<cu::DevicePrimaryCtxRetainFn>(dlsym(g_cuda.lib, "cuDevicePrimaryCtxRetain"));
  g_cuda.set_current = reinterpret_cast<cu::CtxSetCurrentFn>(dlsym(g_cuda.lib, "cuCtxSetCurrent"));
  g_cuda.alloc = reinterpret_cast<cu::MemAllocFn>(dlsym(g_cuda.lib, "cuMemAlloc_v2"));
  g_cuda.free = reinterpret_cast<cu::MemFreeFn>(dlsym(g_cuda.lib, "cuMemFree_v2"));
  g_cuda.alloc_managed = reinterpret_cast<cu::Result (*)(cu::DevicePtr*, size_t, unsigned)>(
      dlsym(g_cuda.lib, "cuMemAllocManaged"));
  g_cuda.dmabuf = reinterpret_cast<cu::MemGetHandleForAddressRangeFn>(
      dlsym(g_cuda.lib, "cuMemGetHandleForAddressRange"));
  if (!g_cuda.init || !g_cuda.retain || !g_cuda.set_current || !g_cuda.alloc || !g_cuda.free ||
      !g_cuda.alloc_managed || !g_cuda.dmabuf) {
    fprintf(stderr, "fake CUDA lacks a symbol\n");
    return 1;
  }
  if (g_cuda.init(0) != cu::kSuccess) return make_current ? 1 : 0;  // no device: nothing current
  if (!make_current) return 0;
  cu::Context ctx = nullptr;
  if (g_cuda.retain(&ctx, 0) != cu::kSuccess || g_cuda.set_current(ctx) != cu::kSuccess) return 1;
  return 0;
}

PairOptions gpu_mock(const char* protocol = "rdma") {
  PairOptions opt = mock_options();
  opt.env.push_back({"NCCL_FABRIC_CUDA_LIBRARY", fake_path()});
  opt.env.push_back({"NCCL_FABRIC_PROTOCOL", protocol});
  opt.before_init = [] { return cuda_context(true); };
  return opt;
}

int ptr_support(nfc::NetPlugin& p) {
  nfc::NetProps props;
  if (p.properties(0, &props) != ncclSuccess) return -1;
  return props.ptr_support;
}

void* cuda_alloc(size_t n) {
  cu::DevicePtr d = 0;
  if (g_cuda.alloc(&d, n) != cu::kSuccess) return nullptr;
  return reinterpret_cast<void*>(d);
}

uint64_t open_mrs(mockefa_api& api) {
  mockefa_counters c;
  api.get_counters(&c);
  return c.open_mrs;
}

}  // namespace

TEST_CASE("GPU memory: GPUDirect is offered only when every check passes", "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');  // make check exports NF_FAKECUDA_LIB
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> env;
    bool context;
    int want;
  };
  const int kHost = NCCL_PTR_HOST, kCuda = NCCL_PTR_CUDA, kDmabuf = NCCL_PTR_DMABUF;
  // The API version the plugin gets: DMA-BUF without the test knob only from 1.20 (a 2.x build).
  const uint32_t built = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  const uint32_t api = fi_version() < built ? fi_version() : built;
  const int api_dmabuf = api >= FI_VERSION(1, 20) ? kDmabuf : 0;
  const std::vector<Case> cases = {
      {"mock EFA with P2P, at the API the library and headers give",
       {},
       true,
       kHost | kCuda | api_dmabuf},
      {"... and FI_MR_DMABUF assumed",
       {{"NCCL_FABRIC_TEST_ASSUME_DMABUF", "1"}},
       true,
       kHost | kCuda | kDmabuf},
      {"... but the GPU exports no DMA-BUF",
       {{"NCCL_FABRIC_TEST_ASSUME_DMABUF", "1"}, {"FAKECUDA_DMABUF", "0"}},
       true,
       kHost | kCuda},
      {"NCCL_FABRIC_DMABUF=off",
       {{"NCCL_FABRIC_TEST_ASSUME_DMABUF", "1"}, {"NCCL_FABRIC_DMABUF", "off"}},
       true,
       kHost | kCuda},
      {"provider refuses CUDA_API_PERMITTED=false (g5-like)",
       {{"MOCKEFA_GDR", "nop2p"}},
       true,
       kHost},
      {"provider without FI_HMEM", {{"MOCKEFA_GDR", "nocuda"}}, true, kHost},
      {"NCCL_FABRIC_GDR=off", {{"NCCL_FABRIC_GDR", "off"}}, true, kHost},
      {"no CUDA device", {{"FAKECUDA_DEVICES", "0"}}, false, kHost},
      {"no CUDA context current at init", {}, false, kHost},
      {"no CUDA driver at all",
       {{"NCCL_FABRIC_CUDA_LIBRARY", "/nonexistent/libcuda.so.1"}},
       false,
       kHost},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      PairOptions opt = gpu_mock();
      for (const auto& kv : c.env) opt.env.push_back(kv);
      const bool ctx = c.context;
      opt.before_init = [ctx] { return cuda_context(ctx); };
      const int want = c.want;
      std::string log;
      CHECK(run_single(
          opt,
          [want](nfc::NetPlugin& p) {
            const int got = ptr_support(p);
            CHILD_CHECK(got == want, "ptrSupport 0x%x, expected 0x%x", got, want);
            if (!(want & NCCL_PTR_CUDA)) {
              // regMr of GPU memory is refused, clearly, where GPUDirect is off.
              void* sc = nullptr;
              void* rc = nullptr;
              std::string err;
              CHILD_CHECK(nfc::connect_pair(p, 0, &sc, &rc, kTimeoutMs, &err), "connect: %s",
                          err.c_str());
              std::vector<unsigned char> buf(4096);
              void* mh = nullptr;
              CHILD_CHECK(p.reg_mr(rc, buf.data(), buf.size(), NCCL_PTR_CUDA, &mh) != ncclSuccess,
                          "regMr(CUDA) accepted without GPUDirect");
              CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess,
                          "close");
            }
            return 0;
          },
          &log));
      INFO(log);
    }
  }
  SECTION("NCCL_FABRIC_GDR=require fails init where GPUDirect is missing") {
    PairOptions opt = gpu_mock();
    opt.env.push_back({"NCCL_FABRIC_GDR", "require"});
    opt.env.push_back({"MOCKEFA_GDR", "nop2p"});
    std::string log;
    CHECK_FALSE(run_single(
        opt, [](nfc::NetPlugin&) { return 0; }, &log));
  }
}

TEST_CASE("GPU memory: transfers between CUDA buffers, with the flush, on both protocols",
          "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');  // make check exports NF_FAKECUDA_LIB
  for (const char* proto : {"rdma", "sendrecv"}) {
    SECTION(proto) {
      std::string log;
      PairOptions opt = gpu_mock(proto);
      opt.env.push_back({"MOCKEFA_WIRE_REORDER", "1"});
      CHECK(run_single(
          opt,
          [](nfc::NetPlugin& p) {
            CHILD_CHECK(ptr_support(p) & NCCL_PTR_CUDA, "no NCCL_PTR_CUDA");
            mockefa_api api;
            void* sc = nullptr;
            void* rc = nullptr;
            CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
            const size_t kBuf = 1 << 20;
            unsigned char* sbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
            unsigned char* rbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
            CHILD_CHECK(sbuf != nullptr && rbuf != nullptr, "cuMemAlloc");
            void* smh = nullptr;
            void* rmh = nullptr;
            CHILD_CHECK(p.reg_mr(sc, sbuf, kBuf, NCCL_PTR_CUDA, &smh) == ncclSuccess, "regMr send");
            CHILD_CHECK(p.reg_mr(rc, rbuf, kBuf, NCCL_PTR_CUDA, &rmh) == ncclSuccess, "regMr recv");
            api.reset_counters();
            // Small ones included: with GPUDirect nothing may take the eager (CPU copy) path.
            const size_t sizes[] = {0, 8, 100, 4096, 8192, 70000, kBuf};
            int msg = 0;
            for (size_t size : sizes) {
              fill(sbuf, size, 1, msg);
              memset(rbuf, 0xee, kBuf);
              void* data[1] = {rbuf};
              size_t cap[1] = {kBuf};
              int tag[1] = {3};
              void* mhs[1] = {rmh};
              void* rr = nullptr;
              void* sr = nullptr;
              CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &rr) == 0, "irecv");
              CHILD_CHECK(post_send(p, sc, sbuf, size, 3, smh, &sr) == 0, "isend %zu", size);
              std::vector<void*> reqs = {rr, sr};
              std::vector<int> got;
              CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer of %zu bytes", size);
              CHILD_CHECK(static_cast<size_t>(got[0]) == size, "received %d of %zu", got[0], size);
              CHILD_CHECK(verify(rbuf, size, 1, msg) == SIZE_MAX, "content of %zu bytes", size);
              // The flush NCCL asks for after a GPUDirect receive: a read through our endpoint.
              mockefa_counters before;
              api.get_counters(&before);
              int fsizes[1] = {static_cast<int>(size)};
              void* fr = nullptr;
              CHILD_CHECK(p.iflush(rc, 1, data, fsizes, mhs, &fr) == ncclSuccess, "iflush");
              if (size == 0) {
                CHILD_CHECK(fr == nullptr, "a flush of nothing must not wait");
              } else {
                CHILD_CHECK(fr != nullptr, "no flush request for %zu bytes of GPU memory", size);
                int sz[1] = {0};
                CHILD_CHECK(wait_request(p, fr, nullptr) == 0, "flush completes");
                (void)sz;
                mockefa_counters after;
                api.get_counters(&after);
                CHILD_CHECK(after.tx_posted == before.tx_posted + 1, "the flush posted %llu ops",
                            (unsigned long long)(after.tx_posted - before.tx_posted));
                CHILD_CHECK(after.gpu_unflushed_mrs == 0,
                            "%llu GPU registrations written and not flushed",
                            (unsigned long long)after.gpu_unflushed_mrs);
              }
              ++msg;
            }
            mockefa_counters c;
            api.get_counters(&c);
            CHILD_CHECK(c.violations_total == 0, "%llu violations",
                        (unsigned long long)c.violations_total);
            // What NCCL must not get: GPU registration of memory that is not GPU memory, or of
            // managed memory.
            std::vector<unsigned char> host(4096);
            void* bad = nullptr;
            CHILD_CHECK(p.reg_mr(rc, host.data(), host.size(), NCCL_PTR_CUDA, &bad) != ncclSuccess,
                        "regMr(CUDA) of host memory accepted");
            cu::DevicePtr managed = 0;
            CHILD_CHECK(g_cuda.alloc_managed(&managed, 1 << 16, 1) == cu::kSuccess,
                        "managed alloc");
            CHILD_CHECK(p.reg_mr(rc, reinterpret_cast<void*>(managed), 1 << 16, NCCL_PTR_CUDA,
                                 &bad) != ncclSuccess,
                        "regMr(CUDA) of managed memory accepted");
            CHILD_CHECK(p.reg_mr(rc, rbuf + kBuf - 16, 4096, NCCL_PTR_CUDA, &bad) != ncclSuccess,
                        "regMr past the end of the allocation accepted");
            // A host buffer needs no flush; NCCL_FABRIC_FLUSH=0 is tested below.
            void* hmh = nullptr;
            CHILD_CHECK(p.reg_mr(rc, host.data(), host.size(), NCCL_PTR_HOST, &hmh) == ncclSuccess,
                        "regMr host");
            void* hdata[1] = {host.data()};
            int hs[1] = {100};
            void* hmhs[1] = {hmh};
            void* fr = reinterpret_cast<void*>(0x1);
            CHILD_CHECK(p.iflush(rc, 1, hdata, hs, hmhs, &fr) == ncclSuccess && fr == nullptr,
                        "host flush");
            CHILD_CHECK(p.dereg_mr(rc, hmh) == ncclSuccess, "deregMr host");
            CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                        "deregMr");
            CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess,
                        "close");
            dlclose(api.handle);
            return 0;
          },
          &log));
      INFO(log);
    }
  }
}

// 0-byte messages to a GPUDirect receiver (no eager messages: every message is a write). On the
// mock's efa-direct fabric (libfabric 2.x headers) a 0-byte write needs a descriptor, as on
// efa-direct before libfabric 2.6; NCCL's isend may come without a registration for it.
TEST_CASE("GPU memory: 0-byte sends to a GPUDirect receiver, on each EFA fabric (issue 35)",
          "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');
  std::vector<const char*> fabrics = {"efa"};
#if FI_MAJOR_VERSION >= 2
  fabrics.push_back("efa-direct");
#endif
  for (const char* fabric : fabrics) {
    INFO("NCCL_FABRIC_EFA_FABRIC=" << fabric);
    std::string log;
    PairOptions opt = gpu_mock("rdma");
    opt.env.push_back({"NCCL_FABRIC_EFA_FABRIC", fabric});
    opt.env.push_back({"MOCKEFA_RMA", "device"});
    CHECK(run_single(
        opt,
        [](nfc::NetPlugin& p) {
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          const size_t kBuf = 1 << 16;
          unsigned char* sbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
          unsigned char* rbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
          void* smh = nullptr;
          void* rmh = nullptr;
          CHILD_CHECK(p.reg_mr(sc, sbuf, kBuf, NCCL_PTR_CUDA, &smh) == ncclSuccess, "regMr");
          CHILD_CHECK(p.reg_mr(rc, rbuf, kBuf, NCCL_PTR_CUDA, &rmh) == ncclSuccess, "regMr");
          // With NCCL's registration, without one, and without a buffer; then a message with data
          // (the receive after the 0-byte ones gets its own message).
          struct Send {
            void* buf;
            size_t size;
            void* mh;
          } sends[] = {{sbuf, 0, smh}, {sbuf, 0, nullptr}, {nullptr, 0, nullptr}, {sbuf, 777, smh}};
          int msg = 0;
          for (const Send& x : sends) {
            memset(rbuf, 0xee, kBuf);
            if (x.size > 0) fill(sbuf, x.size, 1, msg);
            int got = -1;
            const int rc1 = transfer1(p, sc, x.buf, x.size, x.mh, rc, rbuf, kBuf, rmh, 3, &got);
            CHILD_CHECK(rc1 == 0, "message %d (%zu bytes): %s", msg, x.size,
                        rc1 == 1   ? "irecv"
                        : rc1 == 2 ? "isend refused"
                                   : "transfer");
            CHILD_CHECK(static_cast<size_t>(got) == x.size, "received %d of %zu", got, x.size);
            if (x.size > 0) CHILD_CHECK(verify(rbuf, x.size, 1, msg) == SIZE_MAX, "content");
            CHILD_CHECK(rbuf[x.size] == 0xee, "a write past the message");
            ++msg;
          }
          mockefa_counters c;
          api.get_counters(&c);
          CHILD_CHECK(c.violations_total == 0, "%llu violations (no_desc: %llu)",
                      (unsigned long long)c.violations_total,
                      (unsigned long long)c.violations[MOCKEFA_V_NO_DESC]);
          CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                      "deregMr");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &log));
    INFO(log);
  }
}

TEST_CASE("GPU memory: the flush reads through every rail that carried writes (issue 35)",
          "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');  // make check exports NF_FAKECUDA_LIB
  std::string log;
  PairOptions opt = gpu_mock("rdma");
  opt.env.push_back({"MOCKEFA_NDOMAINS", "2"});
  opt.env.push_back({"NCCL_FABRIC_RAILS", "2"});
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kBuf = 8 << 20;
        unsigned char* sbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
        unsigned char* rbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf, kBuf, NCCL_PTR_CUDA, &smh) == ncclSuccess, "regMr send");
        CHILD_CHECK(p.reg_mr(rc, rbuf, kBuf, NCCL_PTR_CUDA, &rmh) == ncclSuccess, "regMr recv");
        for (int msg = 0; msg < 3; ++msg) {
          mockefa_counters c0;
          api.get_counters(&c0);
          fill(sbuf, kBuf, 1, msg);
          int got = -1;
          CHILD_CHECK(transfer1(p, sc, sbuf, kBuf, smh, rc, rbuf, kBuf, rmh, 3, &got) == 0,
                      "transfer");
          CHILD_CHECK(static_cast<size_t>(got) == kBuf, "received %d of %zu", got, kBuf);
          CHILD_CHECK(verify(rbuf, kBuf, 1, msg) == SIZE_MAX, "content");
          mockefa_counters c1;
          api.get_counters(&c1);
          // Striped: both NICs carried writes of the message.
          for (int nic = 0; nic < 2; ++nic)
            CHILD_CHECK(c1.nic_tx_bytes[nic] - c0.nic_tx_bytes[nic] >= kBuf / 4,
                        "NIC %d carried %llu bytes of %zu", nic,
                        (unsigned long long)(c1.nic_tx_bytes[nic] - c0.nic_tx_bytes[nic]), kBuf);
          CHILD_CHECK(c1.gpu_unflushed_mrs > 0, "the mock saw no GPU write to flush");
          void* data[1] = {rbuf};
          int fsizes[1] = {static_cast<int>(kBuf)};
          void* mhs[1] = {rmh};
          void* fr = nullptr;
          CHILD_CHECK(p.iflush(rc, 1, data, fsizes, mhs, &fr) == ncclSuccess && fr != nullptr,
                      "iflush");
          CHILD_CHECK(wait_request(p, fr, nullptr) == 0, "flush completes");
          mockefa_counters c2;
          api.get_counters(&c2);
          CHILD_CHECK(c2.gpu_unflushed_mrs == 0,
                      "%llu GPU registration(s) written through a rail the flush did not read "
                      "through",
                      (unsigned long long)c2.gpu_unflushed_mrs);
          CHILD_CHECK(c2.tx_posted - c1.tx_posted == 2, "the flush posted %llu reads for 2 rails",
                      (unsigned long long)(c2.tx_posted - c1.tx_posted));
        }
        mockefa_counters c;
        api.get_counters(&c);
        CHILD_CHECK(c.violations_total == 0, "%llu violations",
                    (unsigned long long)c.violations_total);
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
}

// EFA reports a send done once the peer acknowledged it, which can come after the peer wrote the
// data the send asked for: a GPUDirect receive is then complete (and reported to NCCL) while its
// clear-to-send's completion is still out, and its request stays taken. 32 of them used to fill
// the recv comm's requests, and the next iflush, which cannot answer "later", failed the
// communicator (issue 34). The mock holds every send completion back here: receives may meet
// backpressure (irecv answers NULL), but every flush must be taken and complete; once the
// completions come, receives go on.
TEST_CASE("GPU memory: receives whose clear-to-send has not completed leave room for flushes",
          "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');
  std::string log;
  PairOptions opt = gpu_mock("rdma");
  // efa-direct's inject limit (32 bytes): the clear-to-send is a send with a completion, not an
  // inject (whose completion the provider never reports).
  opt.env.push_back({"MOCKEFA_INJECT_SIZE", "32"});
  const bool ok = run_single(
      opt,
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kBuf = 1 << 16;
        unsigned char* sbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
        unsigned char* rbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
        CHILD_CHECK(sbuf != nullptr && rbuf != nullptr, "cuMemAlloc");
        void* smh = nullptr;
        void* rmh = nullptr;
        CHILD_CHECK(p.reg_mr(sc, sbuf, kBuf, NCCL_PTR_CUDA, &smh) == ncclSuccess, "regMr send");
        CHILD_CHECK(p.reg_mr(rc, rbuf, kBuf, NCCL_PTR_CUDA, &rmh) == ncclSuccess, "regMr recv");
        mockefa_faults normal, hold;
        api.get_faults(&normal);
        hold = normal;
        hold.hold_send_completions = 1;
        api.set_faults_all(&hold);
        // One transfer and its flush; *blocked when irecv kept answering NULL (backpressure).
        auto one = [&](int msg, bool* blocked) -> int {
          *blocked = false;
          const size_t size = 100 + static_cast<size_t>(msg);
          fill(sbuf, size, 2, msg);
          void* data[1] = {rbuf};
          size_t cap[1] = {kBuf};
          int tag[1] = {4};
          void* mhs[1] = {rmh};
          void* rr = nullptr;
          for (int t = 0; t < 200 && rr == nullptr; ++t) {
            CHILD_CHECK(p.irecv(rc, 1, data, cap, tag, mhs, &rr) == ncclSuccess, "irecv %d", msg);
            if (rr == nullptr) usleep(1000);
          }
          if (rr == nullptr) {
            *blocked = true;
            return 0;
          }
          void* sr = nullptr;
          CHILD_CHECK(post_send(p, sc, sbuf, size, 4, smh, &sr) == 0, "isend %d", msg);
          std::vector<void*> reqs = {rr, sr};
          std::vector<int> got;
          CHILD_CHECK(wait_all(p, reqs, &got, 10000) == 0, "transfer %d", msg);
          CHILD_CHECK(static_cast<size_t>(got[0]) == size, "size %d", got[0]);
          CHILD_CHECK(verify(rbuf, size, 2, msg) == SIZE_MAX, "content of %d", msg);
          int fsizes[1] = {static_cast<int>(size)};
          void* fr = nullptr;
          CHILD_CHECK(p.iflush(rc, 1, data, fsizes, mhs, &fr) == ncclSuccess && fr != nullptr,
                      "iflush after receive %d", msg);
          CHILD_CHECK(wait_request(p, fr, nullptr, 10000) == 0, "flush %d", msg);
          return 0;
        };
        int msg = 0;
        bool blocked = false;
        for (; msg < 80 && !blocked; ++msg) CHILD_CHECK(one(msg, &blocked) == 0, "step %d", msg);
        CHILD_CHECK(msg > 32, "irecv refused after only %d receives", msg - 1);
        // The completions come: receives go on.
        api.set_faults_all(&normal);
        for (int k = 0; k < 40; ++k, ++msg) {
          CHILD_CHECK(one(msg, &blocked) == 0 && !blocked, "receive %d after the completions came",
                      msg);
        }
        mockefa_counters c;
        api.get_counters(&c);
        CHILD_CHECK(c.violations_total == 0, "%llu violations",
                    (unsigned long long)c.violations_total);
        CHILD_CHECK(p.dereg_mr(sc, smh) == ncclSuccess && p.dereg_mr(rc, rmh) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log);
  INFO(log);
  CHECK(ok);
}

TEST_CASE("GPU memory: NCCL_FABRIC_FLUSH=0 answers iflush at once", "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');  // make check exports NF_FAKECUDA_LIB
  PairOptions opt = gpu_mock();
  opt.env.push_back({"NCCL_FABRIC_FLUSH", "0"});
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        void* sc = nullptr;
        void* rc = nullptr;
        std::string err;
        CHILD_CHECK(nfc::connect_pair(p, 0, &sc, &rc, kTimeoutMs, &err), "connect: %s",
                    err.c_str());
        void* buf = cuda_alloc(1 << 16);
        void* mh = nullptr;
        CHILD_CHECK(p.reg_mr(rc, buf, 1 << 16, NCCL_PTR_CUDA, &mh) == ncclSuccess, "regMr");
        void* data[1] = {buf};
        int sizes[1] = {1000};
        void* mhs[1] = {mh};
        void* fr = reinterpret_cast<void*>(0x1);
        CHILD_CHECK(p.iflush(rc, 1, data, sizes, mhs, &fr) == ncclSuccess && fr == nullptr,
                    "flush");
        CHILD_CHECK(p.dereg_mr(rc, mh) == ncclSuccess, "deregMr");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        return 0;
      },
      &log));
  INFO(log);
}

TEST_CASE("GPU memory: DMA-BUF registration (the fd closed right after, as NCCL does)",
          "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');  // make check exports NF_FAKECUDA_LIB
  PairOptions opt = gpu_mock();
  opt.env.push_back({"NCCL_FABRIC_TEST_ASSUME_DMABUF", "1"});
  std::string log;
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        CHILD_CHECK(ptr_support(p) & NCCL_PTR_DMABUF, "no NCCL_PTR_DMABUF");
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kBuf = 1 << 20;
        unsigned char* sbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
        unsigned char* rbuf = static_cast<unsigned char*>(cuda_alloc(kBuf));
        // The dma-bufs alive: the caller's fds and those the mock's MRs hold, as the kernel holds
        // a reference while a DMA-BUF MR lives (GPU memory pinned).
        auto open_fds = reinterpret_cast<int (*)()>(dlsym(g_cuda.lib, "fakecuda_open_dmabuf_fds"));
        CHILD_CHECK(open_fds != nullptr, "fakecuda_open_dmabuf_fds");
        const int fds0 = open_fds();
        void* mh[2] = {nullptr, nullptr};
        unsigned char* bufs[2] = {sbuf, rbuf};
        void* comms[2] = {sc, rc};
        for (int i = 0; i < 2; ++i) {
          int fd = -1;
          CHILD_CHECK(g_cuda.dmabuf(&fd, reinterpret_cast<cu::DevicePtr>(bufs[i]), kBuf,
                                    cu::kMemRangeHandleTypeDmaBufFd, 0) == cu::kSuccess,
                      "dmabuf fd");
          CHILD_CHECK(
              p.reg_mr_dmabuf(comms[i], bufs[i], kBuf, NCCL_PTR_CUDA, 0, fd, &mh[i]) == ncclSuccess,
              "regMrDmaBuf");
          close(fd);
        }
        void* bad = nullptr;
        CHILD_CHECK(p.reg_mr_dmabuf(rc, rbuf, kBuf, NCCL_PTR_CUDA, 0, -1, &bad) != ncclSuccess,
                    "a negative fd accepted");
        fill(sbuf, kBuf, 2, 7);
        void* data[1] = {rbuf};
        size_t cap[1] = {kBuf};
        int tag[1] = {1};
        void* mhs[1] = {mh[1]};
        void* rr = nullptr;
        void* sr = nullptr;
        CHILD_CHECK(post_recv(p, rc, 1, data, cap, tag, mhs, &rr) == 0, "irecv");
        CHILD_CHECK(post_send(p, sc, sbuf, kBuf, 1, mh[0], &sr) == 0, "isend");
        std::vector<void*> reqs = {rr, sr};
        std::vector<int> got;
        CHILD_CHECK(wait_all(p, reqs, &got) == 0, "transfer");
        CHILD_CHECK(verify(rbuf, kBuf, 2, 7) == SIZE_MAX, "content");
        mockefa_counters c;
        api.get_counters(&c);
        CHILD_CHECK(c.violations_total == 0, "%llu violations",
                    (unsigned long long)c.violations_total);
        CHILD_CHECK(open_fds() == fds0 + 2, "%d dma-bufs held by 2 registrations",
                    open_fds() - fds0);
        CHILD_CHECK(p.dereg_mr(sc, mh[0]) == ncclSuccess && p.dereg_mr(rc, mh[1]) == ncclSuccess,
                    "deregMr");
        // Released at the last deregMr (issue 35): an idle registration kept for reuse pinned the
        // GPU memory NCCL freed, and its remote key stayed valid.
        CHILD_CHECK(open_fds() == fds0, "%d dma-buf(s) still pinned after the last deregMr",
                    open_fds() - fds0);
        // Two registrations of one range (two fds, as two comms get them) share one MR, which
        // holds one dma-buf until the second deregMr.
        void* m1 = nullptr;
        void* m2 = nullptr;
        for (int i = 0; i < 2; ++i) {
          int fd = -1;
          CHILD_CHECK(g_cuda.dmabuf(&fd, reinterpret_cast<cu::DevicePtr>(rbuf), kBuf,
                                    cu::kMemRangeHandleTypeDmaBufFd, 0) == cu::kSuccess,
                      "dmabuf fd");
          CHILD_CHECK(p.reg_mr_dmabuf(i == 0 ? rc : sc, rbuf, kBuf, NCCL_PTR_CUDA, 0, fd,
                                      i == 0 ? &m1 : &m2) == ncclSuccess,
                      "regMrDmaBuf %d", i);
          close(fd);
        }
        CHILD_CHECK(open_fds() == fds0 + 1, "%d dma-bufs for one shared registration",
                    open_fds() - fds0);
        CHILD_CHECK(p.dereg_mr(rc, m1) == ncclSuccess, "deregMr");
        CHILD_CHECK(open_fds() == fds0 + 1, "released while still held");
        CHILD_CHECK(p.dereg_mr(sc, m2) == ncclSuccess, "deregMr 2");
        CHILD_CHECK(open_fds() == fds0, "%d dma-buf(s) still pinned after the last deregMr",
                    open_fds() - fds0);
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
}

TEST_CASE(
    "GPU memory: the registration cache shares while held, closes with the last user, notices "
    "freed memory",
    "[plugin][gpu][mock]") {
  REQUIRE(fake_path()[0] != '\0');  // make check exports NF_FAKECUDA_LIB
  std::string log;
  PairOptions opt = gpu_mock();
  opt.env.push_back({"NCCL_FABRIC_MR_CACHE_ENTRIES", "3"});
  CHECK(run_single(
      opt,
      [](nfc::NetPlugin& p) {
        mockefa_api api;
        void* sc = nullptr;
        void* rc = nullptr;
        CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
        const size_t kBuf = 1 << 20;
        void* a = cuda_alloc(kBuf);
        CHILD_CHECK(a != nullptr, "alloc");
        const uint64_t base = open_mrs(api);
        mockefa_counters c0;
        api.get_counters(&c0);
        // The same range twice, and a piece of it: one registration.
        void* m1 = nullptr;
        void* m2 = nullptr;
        void* m3 = nullptr;
        CHILD_CHECK(p.reg_mr(rc, a, kBuf, NCCL_PTR_CUDA, &m1) == ncclSuccess, "regMr 1");
        CHILD_CHECK(p.reg_mr(rc, a, kBuf, NCCL_PTR_CUDA, &m2) == ncclSuccess, "regMr 2");
        CHILD_CHECK(
            p.reg_mr(rc, static_cast<char*>(a) + 4096, 8192, NCCL_PTR_CUDA, &m3) == ncclSuccess,
            "regMr 3");
        CHILD_CHECK(open_mrs(api) == base + 1, "%llu registrations for one range",
                    (unsigned long long)(open_mrs(api) - base));
        CHILD_CHECK(m1 != m2, "handles are distinct");
        CHILD_CHECK(p.dereg_mr(rc, m1) == ncclSuccess && p.dereg_mr(rc, m2) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(open_mrs(api) == base + 1, "closed while still held");
        CHILD_CHECK(p.dereg_mr(rc, m3) == ncclSuccess, "deregMr");
        // Closed with its last user (issue 35): an idle GPU entry kept for reuse pinned memory
        // NCCL may have freed.
        CHILD_CHECK(open_mrs(api) == base, "idle GPU entry kept");
        // Memory freed while a registration of it is held, and the address handed out again as
        // another allocation: the entry is stale and not shared with the new allocation.
        CHILD_CHECK(p.reg_mr(rc, a, kBuf, NCCL_PTR_CUDA, &m1) == ncclSuccess, "regMr again");
        CHILD_CHECK(g_cuda.free(reinterpret_cast<cu::DevicePtr>(a)) == cu::kSuccess, "free");
        void* b = cuda_alloc(kBuf);
        CHILD_CHECK(b == a, "the fake driver gave another address (%p, %p)", a, b);
        mockefa_counters c1;
        api.get_counters(&c1);
        CHILD_CHECK(p.reg_mr(rc, b, kBuf, NCCL_PTR_CUDA, &m2) == ncclSuccess,
                    "regMr new allocation");
        mockefa_counters c2;
        api.get_counters(&c2);
        CHILD_CHECK(c2.mr_registrations == c1.mr_registrations + 1,
                    "the stale registration was shared with a new allocation");
        CHILD_CHECK(p.dereg_mr(rc, m1) == ncclSuccess && p.dereg_mr(rc, m2) == ncclSuccess,
                    "deregMr");
        CHILD_CHECK(open_mrs(api) == base, "%llu registrations left",
                    (unsigned long long)(open_mrs(api) - base));
        // The limit (3) bounds what is listed for sharing: 5 held ranges are 5 registrations,
        // the first 3 shared by a second regMr, the last 2 not (a registration each).
        std::vector<void*> bufs, more;
        for (int i = 0; i < 5; ++i) {
          bufs.push_back(cuda_alloc(1 << 16));
          void* mh = nullptr;
          CHILD_CHECK(p.reg_mr(rc, bufs.back(), 1 << 16, NCCL_PTR_CUDA, &mh) == ncclSuccess,
                      "regMr %d", i);
          more.push_back(mh);
        }
        CHILD_CHECK(open_mrs(api) == base + 5, "%llu registrations for 5 ranges",
                    (unsigned long long)(open_mrs(api) - base));
        for (int i = 0; i < 5; ++i) {
          void* mh = nullptr;
          CHILD_CHECK(p.reg_mr(rc, bufs[i], 1 << 16, NCCL_PTR_CUDA, &mh) == ncclSuccess,
                      "regMr %d again", i);
          more.push_back(mh);
        }
        CHILD_CHECK(open_mrs(api) == base + 7, "%llu registrations, 7 expected",
                    (unsigned long long)(open_mrs(api) - base));
        for (void* mh : more) CHILD_CHECK(p.dereg_mr(rc, mh) == ncclSuccess, "deregMr");
        CHILD_CHECK(open_mrs(api) == base, "%llu registrations left after the last deregMr",
                    (unsigned long long)(open_mrs(api) - base));
        // Host memory is shared while held, and closed with its last user (idle GPU entries may
        // make room for it).
        std::vector<unsigned char> host(1 << 16);
        mockefa_counters h0;
        api.get_counters(&h0);
        CHILD_CHECK(p.reg_mr(rc, host.data(), host.size(), NCCL_PTR_HOST, &m1) == ncclSuccess,
                    "host 1");
        CHILD_CHECK(p.reg_mr(rc, host.data(), host.size(), NCCL_PTR_HOST, &m2) == ncclSuccess,
                    "host 2");
        mockefa_counters h1;
        api.get_counters(&h1);
        CHILD_CHECK(h1.mr_registrations == h0.mr_registrations + 1,
                    "host range: %llu registrations",
                    (unsigned long long)(h1.mr_registrations - h0.mr_registrations));
        CHILD_CHECK(p.dereg_mr(rc, m1) == ncclSuccess, "deregMr");
        CHILD_CHECK(open_mrs(api) == h1.open_mrs, "host entry closed while still held");
        CHILD_CHECK(p.dereg_mr(rc, m2) == ncclSuccess, "deregMr");
        CHILD_CHECK(open_mrs(api) == h1.open_mrs - 1, "idle host entry kept");
        CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
        dlclose(api.handle);
        return 0;
      },
      &log));
  INFO(log);
  SECTION("NCCL_FABRIC_MR_CACHE_ENTRIES=0 registers every regMr on its own") {
    PairOptions o = gpu_mock();
    o.env.push_back({"NCCL_FABRIC_MR_CACHE_ENTRIES", "0"});
    std::string l;
    CHECK(run_single(
        o,
        [](nfc::NetPlugin& p) {
          mockefa_api api;
          void* sc = nullptr;
          void* rc = nullptr;
          CHILD_CHECK(mock_pair(p, &api, &sc, &rc) == 0, "mock pair");
          void* a = cuda_alloc(1 << 16);
          const uint64_t base = open_mrs(api);
          void* m1 = nullptr;
          void* m2 = nullptr;
          CHILD_CHECK(p.reg_mr(rc, a, 1 << 16, NCCL_PTR_CUDA, &m1) == ncclSuccess, "regMr 1");
          CHILD_CHECK(p.reg_mr(rc, a, 1 << 16, NCCL_PTR_CUDA, &m2) == ncclSuccess, "regMr 2");
          CHILD_CHECK(open_mrs(api) == base + 2, "shared although the cache is off");
          CHILD_CHECK(p.dereg_mr(rc, m1) == ncclSuccess && p.dereg_mr(rc, m2) == ncclSuccess,
                      "deregMr");
          CHILD_CHECK(open_mrs(api) == base, "kept although the cache is off");
          CHILD_CHECK(p.close_send(sc) == ncclSuccess && p.close_recv(rc) == ncclSuccess, "close");
          dlclose(api.handle);
          return 0;
        },
        &l));
    INFO(l);
  }
}
