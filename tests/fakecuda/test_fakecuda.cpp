// Tests of the fake CUDA driver, used the way the plugin uses the real one: dlopen by path,
// then every entry point through cuGetProcAddress_v2.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fakecuda.h"
#include "mem/cuda_api.h"

namespace {

namespace cu = nf::cu;

// The functions cuda_api.h has no type for.
using CtxReleaseFn = cu::Result (*)(cu::Device);
using DeviceGetPciBusIdFn = cu::Result (*)(char*, int, cu::Device);
using PointerGetAttributeFn = cu::Result (*)(void*, int, cu::DevicePtr);
using MemAllocManagedFn = cu::Result (*)(cu::DevicePtr*, size_t, unsigned);
using MemHostAllocFn = cu::Result (*)(void**, size_t, unsigned);
using MemFreeHostFn = cu::Result (*)(void*);
using MemGetAddressRangeFn = cu::Result (*)(cu::DevicePtr*, size_t*, cu::DevicePtr);

constexpr int kVersion = 12040;
constexpr int kSymbolNotFound = 1, kVersionNotSufficient = 2;

class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }
  Env& set(const char* key, const char* value) {
    const char* old = std::getenv(key);
    saved_.emplace_back(key, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      setenv(key, value, 1);
    else
      unsetenv(key);
    return *this;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

void* handle() {
  static void* h = [] {
    const char* path = std::getenv("NF_FAKECUDA_LIB");
    if (!path) FAIL("NF_FAKECUDA_LIB is not set (make check sets it)");
    void* l = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l) FAIL("dlopen(" << path << "): " << dlerror());
    return l;
  }();
  return h;
}

cu::GetProcAddressV2Fn get_proc() {
  auto f = reinterpret_cast<cu::GetProcAddressV2Fn>(dlsym(handle(), "cuGetProcAddress_v2"));
  REQUIRE(f);
  return f;
}

template <typename Fn>
Fn resolve(const char* name, int version = kVersion) {
  void* p = nullptr;
  int status = -1;
  REQUIRE(get_proc()(name, &p, version, cu::kGetProcAddressDefault, &status) == cu::kSuccess);
  REQUIRE(status == cu::kGetProcAddressSuccess);
  REQUIRE(p);
  return reinterpret_cast<Fn>(p);
}

const fakecuda_api& api() {
  static fakecuda_api a = [] {
    fakecuda_api loaded{};
    if (fakecuda_load_api(std::getenv("NF_FAKECUDA_LIB"), &loaded) != 0)
      FAIL("fakecuda test API not found");
    return loaded;
  }();
  return a;
}

fakecuda_counters counters() {
  fakecuda_counters c{};
  api().get_counters(&c);
  return c;
}

// The driver, resolved once, initialised with the environment of the moment.
struct Cuda {
  cu::InitFn init = resolve<cu::InitFn>("cuInit");
  cu::DeviceGetCountFn device_count = resolve<cu::DeviceGetCountFn>("cuDeviceGetCount");
  cu::DeviceGetFn device_get = resolve<cu::DeviceGetFn>("cuDeviceGet");
  cu::DeviceGetAttributeFn attr = resolve<cu::DeviceGetAttributeFn>("cuDeviceGetAttribute");
  DeviceGetPciBusIdFn bus_id = resolve<DeviceGetPciBusIdFn>("cuDeviceGetPCIBusId");
  cu::CtxGetCurrentFn ctx_get = resolve<cu::CtxGetCurrentFn>("cuCtxGetCurrent");
  cu::CtxSetCurrentFn ctx_set = resolve<cu::CtxSetCurrentFn>("cuCtxSetCurrent");
  cu::DevicePrimaryCtxRetainFn retain =
      resolve<cu::DevicePrimaryCtxRetainFn>("cuDevicePrimaryCtxRetain");
  CtxReleaseFn release = resolve<CtxReleaseFn>("cuDevicePrimaryCtxRelease");
  cu::PointerGetAttributesFn ptr_attrs =
      resolve<cu::PointerGetAttributesFn>("cuPointerGetAttributes");
  PointerGetAttributeFn ptr_attr = resolve<PointerGetAttributeFn>("cuPointerGetAttribute");
  cu::MemAllocFn alloc = resolve<cu::MemAllocFn>("cuMemAlloc");
  cu::MemFreeFn free = resolve<cu::MemFreeFn>("cuMemFree");
  MemAllocManagedFn alloc_managed = resolve<MemAllocManagedFn>("cuMemAllocManaged");
  MemHostAllocFn host_alloc = resolve<MemHostAllocFn>("cuMemHostAlloc");
  MemFreeHostFn free_host = resolve<MemFreeHostFn>("cuMemFreeHost");
  cu::MemcpyHtoDFn htod = resolve<cu::MemcpyHtoDFn>("cuMemcpyHtoD");
  cu::MemcpyDtoHFn dtoh = resolve<cu::MemcpyDtoHFn>("cuMemcpyDtoH");
  MemGetAddressRangeFn range = resolve<MemGetAddressRangeFn>("cuMemGetAddressRange");
  cu::MemGetHandleForAddressRangeFn dmabuf =
      resolve<cu::MemGetHandleForAddressRangeFn>("cuMemGetHandleForAddressRange");
  cu::GetErrorStringFn error_string = resolve<cu::GetErrorStringFn>("cuGetErrorString");
};

const Cuda& cuda() {
  static Cuda c;
  return c;
}

// cuInit with the current environment, and device 0's primary context current on this thread.
struct WithContext {
  cu::Context ctx = nullptr;
  WithContext() {
    REQUIRE(cuda().init(0) == cu::kSuccess);
    REQUIRE(cuda().retain(&ctx, 0) == cu::kSuccess);
    REQUIRE(cuda().ctx_set(ctx) == cu::kSuccess);
  }
  WithContext(const WithContext&) = delete;
  WithContext& operator=(const WithContext&) = delete;
  ~WithContext() {
    CHECK(cuda().ctx_set(nullptr) == cu::kSuccess);
    CHECK(cuda().release(0) == cu::kSuccess);
  }
};

struct Attrs {
  unsigned type = 0xdead;
  cu::Context ctx = reinterpret_cast<cu::Context>(1);
  unsigned long long id = 0xdead;
  unsigned managed = 0xdead;  // zeroed below: the driver writes a bool into its first byte
  int ordinal = 0xdead;
  cu::DevicePtr start = 0xdead;
  size_t size = 0xdead;
};

cu::Result query(const void* p, Attrs* a) {
  a->managed = 0;
  int kinds[] = {cu::kPointerAttrMemoryType,    cu::kPointerAttrContext,
                 cu::kPointerAttrBufferId,      cu::kPointerAttrIsManaged,
                 cu::kPointerAttrDeviceOrdinal, cu::kPointerAttrRangeStartAddr,
                 cu::kPointerAttrRangeSize};
  void* data[] = {&a->type, &a->ctx, &a->id, &a->managed, &a->ordinal, &a->start, &a->size};
  return cuda().ptr_attrs(7, kinds, data, reinterpret_cast<uintptr_t>(p));
}

void* as_ptr(cu::DevicePtr d) { return reinterpret_cast<void*>(static_cast<uintptr_t>(d)); }

}  // namespace

TEST_CASE("fakecuda: cuGetProcAddress_v2 resolves base names to versioned entry points",
          "[fakecuda]") {
  void* p = nullptr;
  int status = -1;
  SECTION("cuMemAlloc at 3.2+ is cuMemAlloc_v2; before, the fake has no variant") {
    REQUIRE(get_proc()("cuMemAlloc", &p, 12000, 0, &status) == cu::kSuccess);
    CHECK(p == dlsym(handle(), "cuMemAlloc_v2"));
    CHECK(status == cu::kGetProcAddressSuccess);
    CHECK(get_proc()("cuMemAlloc", &p, 3000, 0, &status) == cu::kErrorNotFound);
    CHECK(p == nullptr);
    CHECK(status == kVersionNotSufficient);
  }
  SECTION("cuDevicePrimaryCtxRelease: _v2 from 11.0, the original before") {
    REQUIRE(get_proc()("cuDevicePrimaryCtxRelease", &p, 11000, 0, &status) == cu::kSuccess);
    CHECK(p == dlsym(handle(), "cuDevicePrimaryCtxRelease_v2"));
    REQUIRE(get_proc()("cuDevicePrimaryCtxRelease", &p, 10020, 0, &status) == cu::kSuccess);
    CHECK(p == dlsym(handle(), "cuDevicePrimaryCtxRelease"));
  }
  SECTION("unknown names and versions newer than the driver") {
    p = &status;
    CHECK(get_proc()("cuNoSuchThing", &p, kVersion, 0, &status) == cu::kErrorNotFound);
    CHECK(p == nullptr);
    CHECK(status == kSymbolNotFound);
    CHECK(get_proc()("cuInit", &p, 13000, 0, &status) == cu::kErrorNotFound);
    CHECK(status == kVersionNotSufficient);
    CHECK(get_proc()(nullptr, &p, kVersion, 0, &status) == cu::kErrorInvalidValue);
  }
  SECTION("a symbol newer than the driver does not exist there") {
    Env env;
    env.set("FAKECUDA_DRIVER_VERSION", "11040");
    CHECK(get_proc()("cuMemGetHandleForAddressRange", &p, 11040, 0, &status) == cu::kErrorNotFound);
    CHECK(status == kSymbolNotFound);
    CHECK(get_proc()("cuMemGetHandleForAddressRange", &p, 11070, 0, &status) == cu::kErrorNotFound);
    CHECK(status == kSymbolNotFound);
    int v = 0;
    CHECK(resolve<cu::DriverGetVersionFn>("cuDriverGetVersion", 11040)(&v) == cu::kSuccess);
    CHECK(v == 11040);
  }
  SECTION("FAKECUDA_PROC_ADDRESS=v1: only the legacy cuGetProcAddress answers") {
    Env env;
    env.set("FAKECUDA_PROC_ADDRESS", "v1");
    CHECK(get_proc()("cuInit", &p, kVersion, 0, &status) == cu::kErrorNotFound);
    CHECK(p == nullptr);
    auto v1 = reinterpret_cast<cu::GetProcAddressFn>(dlsym(handle(), "cuGetProcAddress"));
    REQUIRE(v1);
    REQUIRE(v1("cuMemFree", &p, kVersion, 0) == cu::kSuccess);
    CHECK(p == dlsym(handle(), "cuMemFree_v2"));
    CHECK(v1("cuNoSuchThing", &p, kVersion, 0) == cu::kErrorNotFound);
  }
  SECTION("FAKECUDA_PROC_ADDRESS=none: both fail; the versioned names are still exported") {
    Env env;
    env.set("FAKECUDA_PROC_ADDRESS", "none");
    CHECK(get_proc()("cuInit", &p, kVersion, 0, &status) == cu::kErrorNotFound);
    auto v1 = reinterpret_cast<cu::GetProcAddressFn>(dlsym(handle(), "cuGetProcAddress"));
    CHECK(v1("cuInit", &p, kVersion, 0) == cu::kErrorNotFound);
    for (const char* name : {"cuInit",
                             "cuDriverGetVersion",
                             "cuGetErrorString",
                             "cuDeviceGetCount",
                             "cuDeviceGet",
                             "cuDeviceGetAttribute",
                             "cuDeviceGetPCIBusId",
                             "cuCtxGetCurrent",
                             "cuCtxSetCurrent",
                             "cuDevicePrimaryCtxRetain",
                             "cuDevicePrimaryCtxRelease_v2",
                             "cuPointerGetAttributes",
                             "cuPointerGetAttribute",
                             "cuMemAlloc_v2",
                             "cuMemFree_v2",
                             "cuMemAllocManaged",
                             "cuMemHostAlloc",
                             "cuMemFreeHost",
                             "cuMemcpyHtoD_v2",
                             "cuMemcpyDtoH_v2",
                             "cuMemGetAddressRange_v2",
                             "cuMemGetHandleForAddressRange"}) {
      INFO(name);
      CHECK(dlsym(handle(), name) != nullptr);
    }
  }
}

TEST_CASE("fakecuda: nothing works before a successful cuInit; FAKECUDA_DEVICES=0 has no device",
          "[fakecuda]") {
  Env env;
  env.set("FAKECUDA_DEVICES", "0");
  REQUIRE(cuda().init(0) == cu::kErrorNoDevice);
  int n = -1;
  cu::DevicePtr d = 0;
  cu::Context ctx = nullptr;
  CHECK(cuda().device_count(&n) == cu::kErrorNotInitialized);
  CHECK(cuda().alloc(&d, 4096) == cu::kErrorNotInitialized);
  CHECK(cuda().ctx_get(&ctx) == cu::kErrorNotInitialized);
  Attrs a;
  CHECK(query(&n, &a) == cu::kErrorNotInitialized);
  int version = 0;  // these work without cuInit
  CHECK(resolve<cu::DriverGetVersionFn>("cuDriverGetVersion")(&version) == cu::kSuccess);
  CHECK(version == 12040);
  const char* text = nullptr;
  CHECK(cuda().error_string(cu::kErrorNotInitialized, &text) == cu::kSuccess);
  CHECK(std::string(text) == "initialization error");
  CHECK(cuda().error_string(12345, &text) == cu::kErrorInvalidValue);
  env.set("FAKECUDA_DEVICES", nullptr);
  REQUIRE(cuda().init(0) == cu::kSuccess);
  CHECK(cuda().device_count(&n) == cu::kSuccess);
  CHECK(n == 1);
}

TEST_CASE("fakecuda: devices, attributes and PCI ids follow the environment", "[fakecuda]") {
  Env env;
  env.set("FAKECUDA_DEVICES", "3")
      .set("FAKECUDA_GDR", "0")
      .set("FAKECUDA_DMABUF", "0")
      .set("FAKECUDA_CC_MAJOR", "8");
  REQUIRE(cuda().init(0) == cu::kSuccess);
  int n = 0;
  REQUIRE(cuda().device_count(&n) == cu::kSuccess);
  CHECK(n == 3);
  cu::Device dev = -1;
  CHECK(cuda().device_get(&dev, 2) == cu::kSuccess);
  CHECK(dev == 2);
  CHECK(cuda().device_get(&dev, 3) == 101);  // CUDA_ERROR_INVALID_DEVICE
  int v = -1;
  CHECK(cuda().attr(&v, cu::kDevAttrGpuDirectRdmaSupported, 0) == cu::kSuccess);
  CHECK(v == 0);
  CHECK(cuda().attr(&v, cu::kDevAttrDmaBufSupported, 0) == cu::kSuccess);
  CHECK(v == 0);
  CHECK(cuda().attr(&v, cu::kDevAttrComputeCapabilityMajor, 0) == cu::kSuccess);
  CHECK(v == 8);
  CHECK(cuda().attr(&v, 9999, 0) == cu::kErrorInvalidValue);
  CHECK(cuda().attr(&v, cu::kDevAttrPciBusId, 7) == 101);
  char id[32];
  for (int d = 0; d < 3; ++d) {
    int bus = 0, device = -1, domain = -1;
    REQUIRE(cuda().attr(&bus, cu::kDevAttrPciBusId, d) == cu::kSuccess);
    REQUIRE(cuda().attr(&device, cu::kDevAttrPciDeviceId, d) == cu::kSuccess);
    REQUIRE(cuda().attr(&domain, cu::kDevAttrPciDomainId, d) == cu::kSuccess);
    REQUIRE(cuda().bus_id(id, sizeof id, d) == cu::kSuccess);
    char expect[32];
    std::snprintf(expect, sizeof expect, "%04x:%02x:%02x.0", domain, bus, device);
    CHECK(std::string(id) == expect);
  }
  REQUIRE(cuda().bus_id(id, sizeof id, 0) == cu::kSuccess);
  CHECK(std::string(id) == "0000:53:00.0");
  REQUIRE(cuda().bus_id(id, sizeof id, 1) == cu::kSuccess);
  CHECK(std::string(id) == "0000:64:00.0");

  env.set("FAKECUDA_DEVICES", nullptr).set("FAKECUDA_GDR", nullptr).set("FAKECUDA_DMABUF", nullptr);
  env.set("FAKECUDA_CC_MAJOR", nullptr);
  REQUIRE(cuda().init(0) == cu::kSuccess);
  CHECK(cuda().attr(&v, cu::kDevAttrGpuDirectRdmaSupported, 0) == cu::kSuccess);
  CHECK(v == 1);
  CHECK(cuda().attr(&v, cu::kDevAttrDmaBufSupported, 0) == cu::kSuccess);
  CHECK(v == 1);
  CHECK(cuda().attr(&v, cu::kDevAttrComputeCapabilityMajor, 0) == cu::kSuccess);
  CHECK(v == 9);
}

TEST_CASE("fakecuda: contexts are per thread; allocating needs one", "[fakecuda]") {
  REQUIRE(cuda().init(0) == cu::kSuccess);
  api().reset();
  cu::Context ctx = reinterpret_cast<cu::Context>(1);
  REQUIRE(cuda().ctx_get(&ctx) == cu::kSuccess);
  CHECK(ctx == nullptr);
  cu::DevicePtr d = 0;
  void* h = nullptr;
  CHECK(cuda().alloc(&d, 4096) == cu::kErrorInvalidContext);
  CHECK(cuda().alloc_managed(&d, 4096, 1) == cu::kErrorInvalidContext);
  CHECK(cuda().host_alloc(&h, 4096, 0) == cu::kErrorInvalidContext);
  fakecuda_counters c = counters();
  CHECK(c.calls_without_context[FAKECUDA_FN_MEM_ALLOC] == 1);
  CHECK(c.calls_without_context_total == 3);
  CHECK(c.calls_without_context[FAKECUDA_FN_CTX_GET_CURRENT] == 0);  // needs none

  cu::Context a = nullptr, b = nullptr;
  REQUIRE(cuda().retain(&a, 0) == cu::kSuccess);
  REQUIRE(cuda().retain(&b, 0) == cu::kSuccess);
  CHECK(a != nullptr);
  CHECK(a == b);
  CHECK(cuda().ctx_set(reinterpret_cast<cu::Context>(&d)) == cu::kErrorInvalidContext);
  REQUIRE(cuda().ctx_set(a) == cu::kSuccess);
  REQUIRE(cuda().ctx_get(&ctx) == cu::kSuccess);
  CHECK(ctx == a);
  cu::Context other = reinterpret_cast<cu::Context>(1);
  std::thread([&] { cuda().ctx_get(&other); }).join();
  CHECK(other == nullptr);
  REQUIRE(cuda().alloc(&d, 4096) == cu::kSuccess);
  CHECK(cuda().free(d) == cu::kSuccess);
  CHECK(cuda().release(0) == cu::kSuccess);
  CHECK(cuda().release(0) == cu::kSuccess);
  // Released to zero: the context is current but no longer usable.
  CHECK(cuda().alloc(&d, 4096) == cu::kErrorInvalidContext);
  CHECK(cuda().release(0) == cu::kErrorInvalidContext);
  CHECK(cuda().ctx_set(nullptr) == cu::kSuccess);
}

TEST_CASE("fakecuda: pointer attributes of device, managed, pinned and unknown memory",
          "[fakecuda]") {
  WithContext wc;
  api().reset();
  cu::DevicePtr dev = 0, managed = 0;
  void* pinned = nullptr;
  REQUIRE(cuda().alloc(&dev, 100000) == cu::kSuccess);
  REQUIRE(cuda().alloc_managed(&managed, 5000, 1) == cu::kSuccess);
  REQUIRE(cuda().host_alloc(&pinned, 3000, 0) == cu::kSuccess);
  CHECK(cuda().alloc_managed(&managed, 5000, 0) ==
        cu::kErrorInvalidValue);  // flags must be GLOBAL or HOST
  CHECK(cuda().alloc(&dev, 0) == cu::kErrorInvalidValue);
  CHECK(dev % sysconf(_SC_PAGESIZE) == 0);
  std::memset(as_ptr(dev), 0x5a, 100000);  // "device memory" is host memory

  Attrs a;
  REQUIRE(query(static_cast<char*>(as_ptr(dev)) + 1234, &a) == cu::kSuccess);
  CHECK(a.type == cu::kMemoryTypeDevice);
  CHECK(a.ctx == wc.ctx);
  CHECK(a.id != 0);
  CHECK(a.managed == 0);
  CHECK(a.ordinal == 0);
  CHECK(a.start == dev);
  CHECK(a.size == 100000);
  const unsigned long long dev_id = a.id;

  REQUIRE(query(as_ptr(managed), &a) == cu::kSuccess);
  CHECK(a.type == cu::kMemoryTypeDevice);
  CHECK(a.managed == 1);  // one byte written into a zeroed unsigned
  CHECK(a.id != dev_id);
  CHECK(a.size == 5000);

  REQUIRE(query(static_cast<char*>(pinned) + 2999, &a) == cu::kSuccess);
  CHECK(a.type == cu::kMemoryTypeHost);
  CHECK(a.managed == 0);
  CHECK(a.start == reinterpret_cast<uintptr_t>(pinned));

  // Memory CUDA does not know: success, zeros (device ordinal CU_DEVICE_INVALID, -2).
  std::vector<char> plain(64);
  REQUIRE(query(plain.data(), &a) == cu::kSuccess);
  CHECK(a.type == 0);
  CHECK(a.ctx == nullptr);
  CHECK(a.id == 0);
  CHECK(a.managed == 0);
  CHECK(a.ordinal == -2);
  CHECK(a.start == 0);
  CHECK(a.size == 0);
  REQUIRE(query(static_cast<char*>(as_ptr(dev)) + 100000, &a) == cu::kSuccess);  // one past the end
  CHECK(a.type == 0);

  unsigned long long id = 0;
  CHECK(cuda().ptr_attr(&id, cu::kPointerAttrBufferId, dev + 10) == cu::kSuccess);
  CHECK(id == dev_id);
  CHECK(cuda().ptr_attr(&id, cu::kPointerAttrBufferId, reinterpret_cast<uintptr_t>(plain.data())) ==
        cu::kErrorInvalidValue);
  int bad[] = {cu::kPointerAttrBufferId, 3};  // 3 (DEVICE_POINTER) is not faked
  void* data[] = {&id, &id};
  CHECK(cuda().ptr_attrs(2, bad, data, dev) == cu::kErrorInvalidValue);
  CHECK(cuda().ptr_attr(&id, 99, dev) == cu::kErrorInvalidValue);

  cu::DevicePtr base = 0;
  size_t size = 0;
  CHECK(cuda().range(&base, &size, dev + 777) == cu::kSuccess);
  CHECK(base == dev);
  CHECK(size == 100000);
  CHECK(cuda().range(&base, &size, reinterpret_cast<uintptr_t>(plain.data())) ==
        cu::kErrorNotFound);

  CHECK(counters().calls[FAKECUDA_FN_POINTER_GET_ATTRIBUTES] == 6);
  CHECK(counters().live_allocs >= 3);
  CHECK(cuda().free(dev) == cu::kSuccess);
  CHECK(cuda().free(managed) == cu::kSuccess);
  CHECK(cuda().free(reinterpret_cast<uintptr_t>(pinned)) == cu::kErrorInvalidValue);  // wrong free
  CHECK(cuda().free_host(pinned) == cu::kSuccess);
  CHECK(std::string(api().fn_name(FAKECUDA_FN_POINTER_GET_ATTRIBUTES)) == "cuPointerGetAttributes");
  CHECK(api().fn_name(FAKECUDA_FN_COUNT) == nullptr);
}

TEST_CASE("fakecuda: a freed address comes back with a new buffer id and fresh memory",
          "[fakecuda]") {
  WithContext wc;
  api().reset();
  const fakecuda_counters before = counters();
  cu::DevicePtr d = 0;
  REQUIRE(cuda().alloc(&d, 1 << 20) == cu::kSuccess);
  std::memset(as_ptr(d), 0xab, 1 << 20);
  unsigned long long id1 = 0, id2 = 0;
  REQUIRE(cuda().ptr_attr(&id1, cu::kPointerAttrBufferId, d) == cu::kSuccess);
  REQUIRE(cuda().free(d) == cu::kSuccess);
  CHECK(cuda().free(d) == cu::kErrorInvalidValue);  // double free
  CHECK(cuda().ptr_attr(&id2, cu::kPointerAttrBufferId, d) == cu::kErrorInvalidValue);
  Attrs a;
  REQUIRE(query(as_ptr(d), &a) == cu::kSuccess);
  CHECK(a.id == 0);

  cu::DevicePtr again = 0;
  REQUIRE(cuda().alloc(&again, 4096) == cu::kSuccess);  // smaller fits the freed range
  CHECK(again == d);
  REQUIRE(cuda().ptr_attr(&id2, cu::kPointerAttrBufferId, again) == cu::kSuccess);
  CHECK(id2 != id1);
  CHECK(id2 > id1);
  CHECK(static_cast<unsigned char*>(as_ptr(again))[0] == 0);
  CHECK(static_cast<unsigned char*>(as_ptr(again))[4095] == 0);
  size_t size = 0;
  CHECK(cuda().range(nullptr, &size, again) == cu::kSuccess);
  CHECK(size == 4096);

  cu::DevicePtr bigger = 0;  // larger than anything freed: a new address
  REQUIRE(cuda().alloc(&bigger, 2 << 20) == cu::kSuccess);
  CHECK(bigger != d);
  CHECK(cuda().free(bigger + 8) == cu::kErrorInvalidValue);  // not the base
  const fakecuda_counters c = counters();
  CHECK(c.allocs == 3);
  CHECK(c.frees == 1);
  CHECK(c.reused == 1);
  CHECK(c.live_allocs == before.live_allocs + 2);
  REQUIRE(cuda().free(again) == cu::kSuccess);
  REQUIRE(cuda().free(bigger) == cu::kSuccess);
  CHECK(counters().live_allocs == before.live_allocs);
  CHECK(counters().live_bytes == before.live_bytes);
}

TEST_CASE("fakecuda: cuMemcpyHtoD/DtoH stay inside allocations", "[fakecuda]") {
  WithContext wc;
  cu::DevicePtr d = 0;
  REQUIRE(cuda().alloc(&d, 1000) == cu::kSuccess);
  std::vector<unsigned char> in(1000), out(1000, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 13);
  REQUIRE(cuda().htod(d, in.data(), in.size()) == cu::kSuccess);
  CHECK(std::memcmp(as_ptr(d), in.data(), in.size()) == 0);
  REQUIRE(cuda().dtoh(out.data(), d, out.size()) == cu::kSuccess);
  CHECK(in == out);
  CHECK(cuda().htod(d + 1, in.data(), in.size()) == cu::kErrorInvalidValue);
  CHECK(cuda().dtoh(out.data(), reinterpret_cast<uintptr_t>(out.data()), 10) ==
        cu::kErrorInvalidValue);
  REQUIRE(cuda().ctx_set(nullptr) == cu::kSuccess);
  CHECK(cuda().htod(d, in.data(), 1) == cu::kErrorInvalidContext);
  REQUIRE(cuda().ctx_set(wc.ctx) == cu::kSuccess);
  CHECK(cuda().free(d) == cu::kSuccess);
}

TEST_CASE("fakecuda: cuMemGetHandleForAddressRange gives a memfd named after the range",
          "[fakecuda]") {
  WithContext wc;
  api().reset();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  cu::DevicePtr d = 0, m = 0;
  REQUIRE(cuda().alloc(&d, 3 * page + 100) == cu::kSuccess);  // its 4th page counts whole
  REQUIRE(cuda().alloc_managed(&m, page, 1) == cu::kSuccess);
  const int open_before = api().open_dmabuf_fds();
  int fd = -1;
  REQUIRE(cuda().dmabuf(&fd, d + page, 3 * page, cu::kMemRangeHandleTypeDmaBufFd, 0) ==
          cu::kSuccess);
  REQUIRE(fd >= 0);
  char link[64], target[128] = {};
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  REQUIRE(readlink(link, target, sizeof target - 1) > 0);
  char expect[128];
  std::snprintf(expect, sizeof expect, "/memfd:fakecuda-dmabuf:%llx:%llx (deleted)",
                static_cast<unsigned long long>(d + page),
                static_cast<unsigned long long>(3 * page));
  CHECK(std::string(target) == expect);
  CHECK(lseek(fd, 0, SEEK_END) == static_cast<off_t>(3 * page));
  CHECK(api().open_dmabuf_fds() == open_before + 1);
  CHECK(counters().dmabuf_fds == 1);
  close(fd);
  CHECK(api().open_dmabuf_fds() == open_before);

  CHECK(cuda().dmabuf(&fd, d + 1, page, 1, 0) == cu::kErrorInvalidValue);  // unaligned start
  CHECK(cuda().dmabuf(&fd, d, page + 1, 1, 0) == cu::kErrorInvalidValue);  // unaligned size
  CHECK(cuda().dmabuf(&fd, d, 5 * page, 1, 0) == cu::kErrorInvalidValue);  // past the end
  CHECK(cuda().dmabuf(&fd, d, page, 2, 0) == cu::kErrorInvalidValue);      // not DMA_BUF_FD
  CHECK(cuda().dmabuf(&fd, d, page, 1, 1) == cu::kErrorInvalidValue);      // flags
  CHECK(cuda().dmabuf(&fd, m, page, 1, 0) == cu::kErrorInvalidValue);      // managed memory
  std::vector<char> plain(2 * page);
  uintptr_t host = (reinterpret_cast<uintptr_t>(plain.data()) + page - 1) & ~(page - 1);
  CHECK(cuda().dmabuf(&fd, host, page, 1, 0) == cu::kErrorInvalidValue);  // not CUDA memory
  CHECK(api().open_dmabuf_fds() == open_before);

  Env env;
  env.set("FAKECUDA_DMABUF", "0");
  REQUIRE(cuda().init(0) == cu::kSuccess);
  CHECK(cuda().dmabuf(&fd, d, page, 1, 0) == cu::kErrorNotSupported);
  env.set("FAKECUDA_DMABUF", nullptr);
  REQUIRE(cuda().init(0) == cu::kSuccess);
  CHECK(cuda().free(d) == cu::kSuccess);
  CHECK(cuda().free(m) == cu::kSuccess);
}

TEST_CASE("fakecuda: counters count calls; reset keeps the live gauges", "[fakecuda]") {
  WithContext wc;
  cu::DevicePtr d = 0;
  REQUIRE(cuda().alloc(&d, 64) == cu::kSuccess);
  api().reset();
  fakecuda_counters c = counters();
  CHECK(c.allocs == 0);
  CHECK(c.calls[FAKECUDA_FN_MEM_ALLOC] == 0);
  CHECK(c.live_allocs >= 1);
  Attrs a;
  for (int i = 0; i < 5; ++i) REQUIRE(query(as_ptr(d), &a) == cu::kSuccess);
  REQUIRE(cuda().ctx_set(nullptr) == cu::kSuccess);
  REQUIRE(query(as_ptr(d), &a) == cu::kSuccess);  // works without a context, but is counted
  REQUIRE(cuda().ctx_set(wc.ctx) == cu::kSuccess);
  c = counters();
  CHECK(c.calls[FAKECUDA_FN_POINTER_GET_ATTRIBUTES] == 6);
  CHECK(c.calls_without_context[FAKECUDA_FN_POINTER_GET_ATTRIBUTES] == 1);
  CHECK(c.calls_without_context_total == 1);
  CHECK(c.calls[FAKECUDA_FN_CTX_SET_CURRENT] == 2);
  CHECK(cuda().free(d) == cu::kSuccess);
  CHECK(counters().frees == 1);
}
