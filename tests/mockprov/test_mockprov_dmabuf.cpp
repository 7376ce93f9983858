// Tests of the mock EFA provider: FI_MR_DMABUF registrations, and fi_read from an endpoint to
// itself on CUDA memory (the GPUDirect "flush" a plugin issues after a receive).
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "../fakecuda/fakecuda.h"
#include "mem/cuda_api.h"
#include "mock_dmabuf.h"
#include "test_mockprov_util.h"

using namespace mt;

namespace {

size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Page-aligned memory standing in for a GPU allocation.
struct Pages {
  size_t len;
  uint8_t* p;
  explicit Pages(size_t n) : len(n * page()) {
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<uint8_t*>(m);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  ~Pages() { munmap(p, len); }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p + off); }
};

// A dma-buf fd as tests/fakecuda makes one: a memfd named after the range it exports.
int fake_dmabuf(const void* start, size_t size) {
  char name[64];
  std::snprintf(name, sizeof name, "fakecuda-dmabuf:%llx:%llx",
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(start)),
                static_cast<unsigned long long>(size));
  int fd = memfd_create(name, MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

int reg_dmabuf(fid_domain* d, const fi_mr_dmabuf& db, fid_mr** mr, int iface = FI_HMEM_CUDA,
               uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                 FI_REMOTE_WRITE,
               size_t iov_count = 1) {
  fi_mr_attr attr{};
  attr.mr_iov = reinterpret_cast<const iovec*>(&db);  // the 1.20+ union member `dmabuf`
  attr.iov_count = iov_count;
  attr.access = access;
  attr.iface = static_cast<fi_hmem_iface>(iface);
  return fi_mr_regattr(d, &attr, FI_MR_DMABUF, mr);
}

// FI_HMEM info at API version `api` (stamped into fabric_attr where fi_getinfo cannot be asked
// for it: see getinfo_at).
InfoPtr hmem_info(uint32_t api = kApi) {
  InfoPtr hints = make_hints(kCaps | FI_HMEM, kMrAll | FI_MR_HMEM);
  InfoPtr info = getinfo_at(hints.get(), api);
  REQUIRE(info);
  return info;
}

// EFA (and the mock) take FI_MR_DMABUF only on a fabric opened at API 1.20 or later.
constexpr uint32_t kDmabufApi = kApi > FI_VERSION(1, 20) ? kApi : FI_VERSION(1, 20);

}  // namespace

TEST_CASE("mr: FI_MR_DMABUF registers [base_addr + offset, +len) and does not keep the fd",
          "[mockprov][mr][dmabuf]") {
  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "none");
  InfoPtr info = hmem_info(kDmabufApi);
  Pair p(info.get());
  Pages gpu(4);
  int fd = fake_dmabuf(gpu.p, gpu.len);
  fi_mr_dmabuf db{fd, page(), 2 * page(), gpu.p};
  fid_mr* mr = nullptr;
  REQUIRE(reg_dmabuf(p.b.domain, db, &mr) == 0);
  REQUIRE(close(fd) == 0);  // as NCCL does right after registering
  CHECK(fi_mr_key(mr) <= UINT32_MAX);
  CHECK(counters().violations_total == 0);

  std::vector<uint8_t> src = pattern(2 * page(), 3);
  Mr smr(p.a.domain, src.data(), src.size());
  SECTION("a peer writes into the registered pages") {
    REQUIRE(fi_write(p.a.ep, src.data(), src.size(), smr.desc(), p.a2b, gpu.addr(page()),
                     fi_mr_key(mr), nullptr) == 0);
    Completion c;
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    REQUIRE_FALSE(c.error);
    CHECK(std::equal(src.begin(), src.end(), gpu.p + page()));
    CHECK(gpu.p[page() - 1] == 0);
    CHECK(gpu.p[3 * page()] == 0);
  }
  SECTION("the first page is not part of the registration") {
    REQUIRE(fi_write(p.a.ep, src.data(), 64, smr.desc(), p.a2b, gpu.addr(0), fi_mr_key(mr),
                     nullptr) == 0);
    Completion c;
    REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
    CHECK(c.error);
    CHECK(violations(MOCKEFA_V_RMA_BOUNDS) == 1);
  }
  SECTION("the descriptor covers the region for local use") {
    REQUIRE(fi_tsend(p.b.ep, gpu.p + page(), 128, fi_mr_desc(mr), p.b2a, 1, nullptr) == 0);
    CHECK(fi_tsend(p.b.ep, gpu.p, 128, fi_mr_desc(mr), p.b2a, 1, nullptr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_DESC_RANGE) == 1);
  }
  CHECK(fi_close(&mr->fid) == 0);
}

TEST_CASE("mr: FI_MR_DMABUF refusals", "[mockprov][mr][dmabuf][checker]") {
  Fresh fresh;
  InfoPtr info = hmem_info(kDmabufApi);
  Pages gpu(4);
  int fd = fake_dmabuf(gpu.p + page(), 2 * page());  // exports pages 1 and 2 only
  fid_mr* mr = nullptr;
  SECTION("fd not open") {
    Node n(info.get());
    int closed = fake_dmabuf(gpu.p, gpu.len);
    REQUIRE(close(closed) == 0);
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{closed, 0, page(), gpu.p}, &mr) == -FI_EINVAL);
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{-1, 0, page(), gpu.p}, &mr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_DMABUF_FD) == 2);
  }
  SECTION("base_addr must be the address of the dma-buf's first byte") {
    Node n(info.get());
    // The region would be the right VA, but dma-buf bytes [0, page) are page 1, not page 2.
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, 0, page(), gpu.p + 2 * page()}, &mr) == -FI_EINVAL);
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, page(), page(), gpu.p}, &mr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_DMABUF_RANGE) == 2);
    REQUIRE(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, page(), page(), gpu.p + page()}, &mr) == 0);
    CHECK(fi_close(&mr->fid) == 0);
  }
  SECTION("offset + len inside the dma-buf") {
    Node n(info.get());
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, page(), 2 * page(), gpu.p + page()}, &mr) ==
          -FI_EINVAL);
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, 3 * page(), 0, gpu.p + page()}, &mr) == -FI_EINVAL);
    CHECK(violations(MOCKEFA_V_DMABUF_RANGE) == 2);
    std::string text(256, '\0');
    text.resize(api().last_violation(&text[0], text.size()));
    CHECK(text.find("dmabuf_range") == 0);
  }
  SECTION("MOCKEFA_DMABUF=0: the kernel has no dma-buf MRs, EFA answers -FI_EOPNOTSUPP") {
    Env env;
    env.set("MOCKEFA_DMABUF", "0");
    Node n(info.get());
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, 0, page(), gpu.p + page()}, &mr) == -FI_EOPNOTSUPP);
    CHECK(counters().violations_total == 0);
  }
  SECTION("only through fi_mr_regattr, with one iov at most, for CUDA or system memory") {
    Node n(info.get());
    fi_mr_dmabuf db{fd, 0, page(), gpu.p + page()};
    CHECK(fi_mr_reg(n.domain, gpu.p, page(), FI_SEND, 0, 0, FI_MR_DMABUF, &mr, nullptr) ==
          -FI_EBADFLAGS);
    CHECK(reg_dmabuf(n.domain, db, &mr, FI_HMEM_CUDA, FI_SEND, 2) == -FI_EINVAL);
    CHECK(reg_dmabuf(n.domain, db, &mr, FI_HMEM_ZE) == -FI_ENOSYS);
    REQUIRE(reg_dmabuf(n.domain, db, &mr, FI_HMEM_SYSTEM, FI_SEND, 0) == 0);
    CHECK(fi_close(&mr->fid) == 0);
  }
  SECTION("MOCKEFA_GDR=nocuda: no CUDA, dma-buf or not") {
    Env env;
    env.set("MOCKEFA_GDR", "nocuda");
    Node n(info.get());
    CHECK(reg_dmabuf(n.domain, fi_mr_dmabuf{fd, 0, page(), gpu.p + page()}, &mr) == -FI_ENOSYS);
  }
  SECTION("an fd that is not a fakecuda dma-buf is taken on trust") {
    Node n(info.get());
    int other = memfd_create("something-else", MFD_CLOEXEC);
    REQUIRE(other >= 0);
    REQUIRE(reg_dmabuf(n.domain, fi_mr_dmabuf{other, 0, page(), gpu.p}, &mr) == 0);
    CHECK(fi_close(&mr->fid) == 0);
    close(other);
  }
  close(fd);
}

TEST_CASE("rma: fi_read from an endpoint to itself on CUDA memory (GPUDirect flush)",
          "[mockprov][rma][flush]") {
  Fresh fresh;
  Env env;
  SECTION("emulated RMA, EFA 1.17 handshake") {}
  SECTION("device RMA") { env.set("MOCKEFA_RMA", "device"); }
  SECTION("queued handshake") { env.set("MOCKEFA_HANDSHAKE", "queue"); }
  SECTION("without P2P (software CUDA keys)") { env.set("MOCKEFA_GDR", "nop2p"); }
  InfoPtr info = hmem_info();
  Node n(info.get());
  const fi_addr_t self = n.insert(n);
  Pages gpu(1);
  std::fill(gpu.p, gpu.p + gpu.len, 0x77);
  fi_mr_attr attr{};
  iovec iov{gpu.p, gpu.len};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
  attr.iface = FI_HMEM_CUDA;
  fid_mr* gmr = nullptr;
  REQUIRE(fi_mr_regattr(n.domain, &attr, 0, &gmr) == 0);
  uint32_t flush = 0;  // host memory the flush reads into
  Mr fmr(n.domain, &flush, sizeof flush, FI_READ);
  int ctx = 0;
  // No handshake with itself (EFA's is_self peer), so no -FI_EAGAIN even in the 1.17 mode.
  REQUIRE(fi_read(n.ep, &flush, sizeof flush, fmr.desc(), self, gpu.addr(), fi_mr_key(gmr), &ctx) ==
          0);
  Completion c;
  REQUIRE(wait_cq(n.tx, &c));
  REQUIRE_FALSE(c.error);
  CHECK(c.e.op_context == &ctx);
  CHECK(c.e.flags == (FI_RMA | FI_READ));
  CHECK(flush == 0x77777777u);
  CHECK(stays_quiet(n.rx, 5));  // a read gives the target no event
  CHECK(counters().violations_total == 0);
  CHECK(fi_close(&gmr->fid) == 0);
}

TEST_CASE(
    "fakecuda + mockefa: a dma-buf from cuMemGetHandleForAddressRange, written by a peer, flushed",
    "[mockprov][dmabuf][fakecuda]") {
  const char* lib = std::getenv("NF_FAKECUDA_LIB");
  if (!lib) {
    WARN("NF_FAKECUDA_LIB not set: skipped (make check sets it)");
    return;
  }
  namespace cu = nf::cu;
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h);
  auto get_proc = reinterpret_cast<cu::GetProcAddressV2Fn>(dlsym(h, "cuGetProcAddress_v2"));
  REQUIRE(get_proc);
  auto sym = [&](const char* name) {
    void* p = nullptr;
    REQUIRE(get_proc(name, &p, 12000, 0, nullptr) == cu::kSuccess);
    return p;
  };
  auto init = reinterpret_cast<cu::InitFn>(sym("cuInit"));
  auto retain = reinterpret_cast<cu::DevicePrimaryCtxRetainFn>(sym("cuDevicePrimaryCtxRetain"));
  auto release = reinterpret_cast<cu::Result (*)(cu::Device)>(sym("cuDevicePrimaryCtxRelease"));
  auto set_ctx = reinterpret_cast<cu::CtxSetCurrentFn>(sym("cuCtxSetCurrent"));
  auto alloc = reinterpret_cast<cu::MemAllocFn>(sym("cuMemAlloc"));
  auto mem_free = reinterpret_cast<cu::MemFreeFn>(sym("cuMemFree"));
  auto get_fd =
      reinterpret_cast<cu::MemGetHandleForAddressRangeFn>(sym("cuMemGetHandleForAddressRange"));
  fakecuda_api fc{};
  REQUIRE(fakecuda_load_api(lib, &fc) == 0);

  REQUIRE(init(0) == cu::kSuccess);
  cu::Context ctx = nullptr;
  REQUIRE(retain(&ctx, 0) == cu::kSuccess);
  REQUIRE(set_ctx(ctx) == cu::kSuccess);
  const size_t size = 4 * page();
  cu::DevicePtr d = 0;
  REQUIRE(alloc(&d, size) == cu::kSuccess);
  uint8_t* dev = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(d));
  const int fds_before = fc.open_dmabuf_fds();

  Fresh fresh;
  Env env;
  env.set("MOCKEFA_HANDSHAKE", "none");
  InfoPtr info = hmem_info(kDmabufApi);
  Pair p(info.get());
  const fi_addr_t self = p.b.insert(p.b);
  int fd = -1;
  REQUIRE(get_fd(&fd, d, size, cu::kMemRangeHandleTypeDmaBufFd, 0) == cu::kSuccess);
  fid_mr* mr = nullptr;
  // A buffer one page into the allocation, as NCCL registers it: offset = buffer - dma-buf start.
  REQUIRE(reg_dmabuf(p.b.domain, fi_mr_dmabuf{fd, page(), 2 * page(), dev}, &mr) == 0);
  REQUIRE(close(fd) == 0);
  // The MR holds the dma-buf (as the kernel's reference does) until it is closed.
  CHECK(fc.open_dmabuf_fds() == fds_before + 1);

  std::vector<uint8_t> src = pattern(2 * page(), 9);
  Mr smr(p.a.domain, src.data(), src.size());
  REQUIRE(fi_write(p.a.ep, src.data(), src.size(), smr.desc(), p.a2b, d + page(), fi_mr_key(mr),
                   nullptr) == 0);
  Completion c;
  REQUIRE(wait_cq(p.a.tx, &c, {&p.b}));
  REQUIRE_FALSE(c.error);
  CHECK(std::equal(src.begin(), src.end(), dev + page()));

  uint32_t flush = 0;
  Mr fmr(p.b.domain, &flush, sizeof flush, FI_READ);
  REQUIRE(fi_read(p.b.ep, &flush, sizeof flush, fmr.desc(), self, d + page(), fi_mr_key(mr),
                  nullptr) == 0);
  REQUIRE(wait_cq(p.b.tx, &c));
  REQUIRE_FALSE(c.error);
  uint32_t expect = 0;
  std::memcpy(&expect, src.data(), sizeof expect);
  CHECK(flush == expect);
  CHECK(counters().violations_total == 0);

  CHECK(fi_close(&mr->fid) == 0);
  CHECK(fc.open_dmabuf_fds() == fds_before);  // released with the MR
  CHECK(mem_free(d) == cu::kSuccess);
  CHECK(set_ctx(nullptr) == cu::kSuccess);
  CHECK(release(0) == cu::kSuccess);
  dlclose(fc.handle);
  dlclose(h);
}
