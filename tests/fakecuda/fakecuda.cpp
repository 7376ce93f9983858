// A fake CUDA driver for tests on machines without a GPU (README.md beside this file).
//
// One process-wide mutex guards everything; each exported function holds it for its whole run
// and never calls another exported function, so the fake is thread-safe without finer thought.
// "Device memory" is anonymous host memory, so tests and the mock provider can touch it.
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "fakecuda.h"
#include "mem/cuda_api.h"

#define FAKECUDA_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

namespace cu = nf::cu;
using cu::DevicePtr;
using cu::Result;

// What cuda_api.h leaves out because the plugin does not need it.
constexpr Result kErrorInvalidDevice = 101;
constexpr int kProcSymbolNotFound = 1;        // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
constexpr int kProcVersionNotSufficient = 2;  // CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
constexpr int kDevAttrUnifiedAddressing = 41;
constexpr int kDevAttrComputeCapabilityMinor = 76;
constexpr int kDeviceInvalid = -2;  // CU_DEVICE_INVALID: the ordinal of memory CUDA does not know
constexpr unsigned kMemAttachGlobal = 1, kMemAttachHost = 2;
constexpr int kMaxDevices = 16;

enum class Kind { kDevice, kManaged, kHostPinned };

struct Ctx {
  int device = 0;
  int refs = 0;  // primary-context retain count
};

struct Alloc {
  size_t size = 0;    // as requested (what RANGE_SIZE and cuMemGetAddressRange report)
  size_t mapped = 0;  // length of the mapping behind it (a reused mapping may be longer)
  Kind kind = Kind::kDevice;
  Ctx* ctx = nullptr;
  unsigned long long id = 0;
};

struct State {
  std::mutex mu;
  bool initialized = false;
  int devices = 1;
  bool gdr = true, dmabuf = true;
  int cc_major = 9;
  Ctx ctxs[kMaxDevices];
  std::map<uintptr_t, Alloc> allocs;                    // by base address
  std::vector<std::pair<uintptr_t, size_t>> free_list;  // freed device mappings, PROT_NONE
  unsigned long long next_id = 1;                       // buffer ids are never reused
  fakecuda_counters counters{};
};

State& st() {
  static State s;
  return s;
}

thread_local Ctx* t_current = nullptr;

long env_int(const char* name, long dflt, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 0);
  if (errno || *end || x < lo || x > hi) {
    std::fprintf(stderr, "fakecuda: ignoring %s=%s (not an integer in [%ld, %ld])\n", name, v, lo,
                 hi);
    return dflt;
  }
  return x;
}

// Read at every call (cuDriverGetVersion and cuGetProcAddress work before cuInit).
int driver_version() {
  return static_cast<int>(env_int("FAKECUDA_DRIVER_VERSION", 12040, 1000, 99999));
}

enum class ProcMode { kV2, kV1, kNone };
ProcMode proc_mode() {
  const char* v = std::getenv("FAKECUDA_PROC_ADDRESS");
  if (!v || !*v || std::strcmp(v, "v2") == 0) return ProcMode::kV2;
  if (std::strcmp(v, "v1") == 0) return ProcMode::kV1;
  if (std::strcmp(v, "none") == 0) return ProcMode::kNone;
  std::fprintf(stderr, "fakecuda: ignoring FAKECUDA_PROC_ADDRESS=%s (v2, v1 or none)\n", v);
  return ProcMode::kV2;
}

// Every exported function starts with one: takes the lock and counts the call.
class Entry {
 public:
  explicit Entry(int fn) : lk_(st().mu) {
    fakecuda_counters& c = st().counters;
    c.calls[fn]++;
    if (fn >= FAKECUDA_FN_POINTER_GET_ATTRIBUTES && !t_current) {
      c.calls_without_context[fn]++;
      c.calls_without_context_total++;
    }
  }

 private:
  std::lock_guard<std::mutex> lk_;
};

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t page_round(size_t n) { return (n + page_size() - 1) & ~(page_size() - 1); }

template <typename T>
void put(void* dst, T value) {
  std::memcpy(dst, &value, sizeof value);
}

// The allocation containing p, or end().
std::map<uintptr_t, Alloc>::iterator find_alloc(State& s, uintptr_t p) {
  auto it = s.allocs.upper_bound(p);
  if (it == s.allocs.begin()) return s.allocs.end();
  --it;
  return p - it->first < it->second.size ? it : s.allocs.end();
}

// Current-context check of the allocation and copy functions: a primary context that was
// released down to zero is no longer usable, as on the real driver.
Result check_context() {
  return t_current && t_current->refs > 0 ? cu::kSuccess : cu::kErrorInvalidContext;
}

Result do_alloc(uintptr_t* out, size_t bytes, Kind kind) {
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (!out || bytes == 0) return cu::kErrorInvalidValue;
  if (Result r = check_context()) return r;
  const size_t len = page_round(bytes);
  void* p = MAP_FAILED;
  size_t mapped = len;
  if (kind != Kind::kHostPinned) {
    // Most recently freed first: "free, then allocate the same size" gets the same address.
    for (auto it = s.free_list.rbegin(); it != s.free_list.rend(); ++it) {
      if (it->second < len) continue;
      p = mmap(reinterpret_cast<void*>(it->first), it->second, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED) return cu::kErrorOutOfMemory;
      mapped = it->second;
      s.free_list.erase(std::next(it).base());
      s.counters.reused++;
      break;
    }
  }
  if (p == MAP_FAILED) {
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return cu::kErrorOutOfMemory;
  }
  Alloc a;
  a.size = bytes;
  a.mapped = mapped;
  a.kind = kind;
  a.ctx = t_current;
  a.id = s.next_id++;
  s.allocs[reinterpret_cast<uintptr_t>(p)] = a;
  s.counters.allocs++;
  s.counters.live_allocs++;
  s.counters.live_bytes += bytes;
  *out = reinterpret_cast<uintptr_t>(p);
  return cu::kSuccess;
}

Result do_free(uintptr_t p, bool host) {
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  auto it = s.allocs.find(p);
  if (it == s.allocs.end() || (it->second.kind == Kind::kHostPinned) != host)
    return cu::kErrorInvalidValue;
  const Alloc a = it->second;
  if (host) {
    munmap(reinterpret_cast<void*>(p), a.mapped);
  } else {
    // Keep the address range reserved, but inaccessible: a stale user faults instead of
    // silently reading the next owner's data, and the next allocation can get the address back.
    if (mmap(reinterpret_cast<void*>(p), a.mapped, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
      munmap(reinterpret_cast<void*>(p), a.mapped);
    else
      s.free_list.emplace_back(p, a.mapped);
  }
  s.allocs.erase(it);
  s.counters.frees++;
  s.counters.live_allocs--;
  s.counters.live_bytes -= a.size;
  return cu::kSuccess;
}

bool known_pointer_attr(int attr) {
  switch (attr) {
    case cu::kPointerAttrContext:
    case cu::kPointerAttrMemoryType:
    case cu::kPointerAttrBufferId:
    case cu::kPointerAttrIsManaged:
    case cu::kPointerAttrDeviceOrdinal:
    case cu::kPointerAttrRangeStartAddr:
    case cu::kPointerAttrRangeSize: return true;
    default: return false;
  }
}

// a == nullptr: memory CUDA does not know (the values cuPointerGetAttributes gives it).
void write_pointer_attr(int attr, void* data, const Alloc* a, uintptr_t base) {
  switch (attr) {
    case cu::kPointerAttrContext: put<void*>(data, a ? a->ctx : nullptr); break;
    case cu::kPointerAttrMemoryType:
      put<unsigned>(data, !a                             ? 0
                          : a->kind == Kind::kHostPinned ? cu::kMemoryTypeHost
                                                         : cu::kMemoryTypeDevice);
      break;
    case cu::kPointerAttrBufferId: put<unsigned long long>(data, a ? a->id : 0); break;
    case cu::kPointerAttrIsManaged:
      put<bool>(data, a && a->kind == Kind::kManaged);  // one byte, as the real driver writes
      break;
    case cu::kPointerAttrDeviceOrdinal: put<int>(data, a ? a->ctx->device : kDeviceInvalid); break;
    case cu::kPointerAttrRangeStartAddr: put<DevicePtr>(data, a ? base : 0); break;
    case cu::kPointerAttrRangeSize: put<size_t>(data, a ? a->size : 0); break;
    default: break;
  }
}

int pci_bus(int dev) { return dev < 8 ? 0x53 + 0x11 * dev : 0xd0 + dev; }  // p5's GPU buses

const char* error_string(Result r) {
  switch (r) {
    case cu::kSuccess: return "no error";
    case cu::kErrorInvalidValue: return "invalid argument";
    case cu::kErrorOutOfMemory: return "out of memory";
    case cu::kErrorNotInitialized: return "initialization error";
    case cu::kErrorDeinitialized: return "driver shutting down";
    case cu::kErrorNoDevice: return "no CUDA-capable device is detected";
    case kErrorInvalidDevice: return "invalid device ordinal";
    case cu::kErrorInvalidContext: return "invalid device context";
    case cu::kErrorNotFound: return "named symbol not found";
    case cu::kErrorNotSupported: return "operation not supported";
    default: return nullptr;
  }
}

Result proc_address(const char* sym, void** pfn, int version, uint64_t flags, int* status);

}  // namespace

// ---- initialisation, version, errors ----

FAKECUDA_EXPORT Result cuInit(unsigned flags) {
  Entry e(FAKECUDA_FN_INIT);
  State& s = st();
  if (flags != 0) return cu::kErrorInvalidValue;
  // The environment is read at every cuInit (the real driver ignores later calls), so a test
  // can change the profile and call cuInit again; allocations and contexts stay.
  s.devices = static_cast<int>(env_int("FAKECUDA_DEVICES", 1, 0, kMaxDevices));
  s.gdr = env_int("FAKECUDA_GDR", 1, 0, 1) != 0;
  s.dmabuf = env_int("FAKECUDA_DMABUF", 1, 0, 1) != 0;
  s.cc_major = static_cast<int>(env_int("FAKECUDA_CC_MAJOR", 9, 1, 99));
  for (int i = 0; i < kMaxDevices; ++i) s.ctxs[i].device = i;
  s.initialized = s.devices > 0;
  return s.initialized ? cu::kSuccess : cu::kErrorNoDevice;
}

FAKECUDA_EXPORT Result cuDriverGetVersion(int* version) {
  Entry e(FAKECUDA_FN_DRIVER_GET_VERSION);
  if (!version) return cu::kErrorInvalidValue;
  *version = driver_version();
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuGetErrorString(Result error, const char** str) {
  Entry e(FAKECUDA_FN_GET_ERROR_STRING);
  if (!str) return cu::kErrorInvalidValue;
  *str = error_string(error);
  return *str ? cu::kSuccess : cu::kErrorInvalidValue;
}

FAKECUDA_EXPORT Result cuGetProcAddress_v2(const char* sym, void** pfn, int version, uint64_t flags,
                                           int* status) {
  Entry e(FAKECUDA_FN_GET_PROC_ADDRESS_V2);
  if (proc_mode() != ProcMode::kV2) {  // as if this driver predated cuGetProcAddress_v2
    if (pfn) *pfn = nullptr;
    if (status) *status = kProcSymbolNotFound;
    return cu::kErrorNotFound;
  }
  return proc_address(sym, pfn, version, flags, status);
}

FAKECUDA_EXPORT Result cuGetProcAddress(const char* sym, void** pfn, int version, uint64_t flags) {
  Entry e(FAKECUDA_FN_GET_PROC_ADDRESS);
  if (proc_mode() == ProcMode::kNone) {
    if (pfn) *pfn = nullptr;
    return cu::kErrorNotFound;
  }
  return proc_address(sym, pfn, version, flags, nullptr);
}

// ---- devices ----

FAKECUDA_EXPORT Result cuDeviceGetCount(int* count) {
  Entry e(FAKECUDA_FN_DEVICE_GET_COUNT);
  if (!st().initialized) return cu::kErrorNotInitialized;
  if (!count) return cu::kErrorInvalidValue;
  *count = st().devices;
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuDeviceGet(cu::Device* dev, int ordinal) {
  Entry e(FAKECUDA_FN_DEVICE_GET);
  if (!st().initialized) return cu::kErrorNotInitialized;
  if (!dev) return cu::kErrorInvalidValue;
  if (ordinal < 0 || ordinal >= st().devices) return kErrorInvalidDevice;
  *dev = ordinal;
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuDeviceGetAttribute(int* value, int attr, cu::Device dev) {
  Entry e(FAKECUDA_FN_DEVICE_GET_ATTRIBUTE);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (!value) return cu::kErrorInvalidValue;
  if (dev < 0 || dev >= s.devices) return kErrorInvalidDevice;
  switch (attr) {
    case cu::kDevAttrPciBusId: *value = pci_bus(dev); break;
    case cu::kDevAttrPciDeviceId: *value = 0; break;
    case cu::kDevAttrPciDomainId: *value = 0; break;
    case kDevAttrUnifiedAddressing: *value = 1; break;
    case cu::kDevAttrComputeCapabilityMajor: *value = s.cc_major; break;
    case kDevAttrComputeCapabilityMinor: *value = 0; break;
    case cu::kDevAttrGpuDirectRdmaSupported: *value = s.gdr ? 1 : 0; break;
    case cu::kDevAttrDmaBufSupported: *value = s.dmabuf ? 1 : 0; break;
    default: return cu::kErrorInvalidValue;
  }
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuDeviceGetPCIBusId(char* id, int len, cu::Device dev) {
  Entry e(FAKECUDA_FN_DEVICE_GET_PCI_BUS_ID);
  if (!st().initialized) return cu::kErrorNotInitialized;
  if (!id || len <= 0) return cu::kErrorInvalidValue;
  if (dev < 0 || dev >= st().devices) return kErrorInvalidDevice;
  std::snprintf(id, static_cast<size_t>(len), "0000:%02x:00.0", pci_bus(dev));
  return cu::kSuccess;
}

// ---- contexts ----

FAKECUDA_EXPORT Result cuCtxGetCurrent(cu::Context* ctx) {
  Entry e(FAKECUDA_FN_CTX_GET_CURRENT);
  if (!st().initialized) return cu::kErrorNotInitialized;
  if (!ctx) return cu::kErrorInvalidValue;
  *ctx = t_current;
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuCtxSetCurrent(cu::Context ctx) {
  Entry e(FAKECUDA_FN_CTX_SET_CURRENT);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  Ctx* c = static_cast<Ctx*>(ctx);
  if (c && (c < s.ctxs || c >= s.ctxs + s.devices)) return cu::kErrorInvalidContext;
  t_current = c;
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuDevicePrimaryCtxRetain(cu::Context* ctx, cu::Device dev) {
  Entry e(FAKECUDA_FN_PRIMARY_CTX_RETAIN);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (!ctx) return cu::kErrorInvalidValue;
  if (dev < 0 || dev >= s.devices) return kErrorInvalidDevice;
  s.ctxs[dev].refs++;
  *ctx = &s.ctxs[dev];
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuDevicePrimaryCtxRelease_v2(cu::Device dev) {
  Entry e(FAKECUDA_FN_PRIMARY_CTX_RELEASE);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (dev < 0 || dev >= s.devices) return kErrorInvalidDevice;
  if (s.ctxs[dev].refs == 0) return cu::kErrorInvalidContext;
  s.ctxs[dev].refs--;
  return cu::kSuccess;
}

// The pre-11.0 name; the same behaviour here.
FAKECUDA_EXPORT Result cuDevicePrimaryCtxRelease(cu::Device dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}

// ---- pointers ----

FAKECUDA_EXPORT Result cuPointerGetAttributes(unsigned num, int* attrs, void** data,
                                              DevicePtr ptr) {
  Entry e(FAKECUDA_FN_POINTER_GET_ATTRIBUTES);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (num == 0 || !attrs || !data) return cu::kErrorInvalidValue;
  for (unsigned i = 0; i < num; ++i)
    if (!known_pointer_attr(attrs[i]) || !data[i]) return cu::kErrorInvalidValue;
  auto it = find_alloc(s, static_cast<uintptr_t>(ptr));
  const Alloc* a = it == s.allocs.end() ? nullptr : &it->second;
  for (unsigned i = 0; i < num; ++i) write_pointer_attr(attrs[i], data[i], a, a ? it->first : 0);
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuPointerGetAttribute(void* data, int attr, DevicePtr ptr) {
  Entry e(FAKECUDA_FN_POINTER_GET_ATTRIBUTE);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (!data || !known_pointer_attr(attr)) return cu::kErrorInvalidValue;
  auto it = find_alloc(s, static_cast<uintptr_t>(ptr));
  if (it == s.allocs.end()) return cu::kErrorInvalidValue;
  write_pointer_attr(attr, data, &it->second, it->first);
  return cu::kSuccess;
}

// ---- memory ----

FAKECUDA_EXPORT Result cuMemAlloc_v2(DevicePtr* dptr, size_t bytes) {
  Entry e(FAKECUDA_FN_MEM_ALLOC);
  uintptr_t p = 0;
  Result r = do_alloc(dptr ? &p : nullptr, bytes, Kind::kDevice);
  if (r == cu::kSuccess) *dptr = p;
  return r;
}

FAKECUDA_EXPORT Result cuMemAllocManaged(DevicePtr* dptr, size_t bytes, unsigned flags) {
  Entry e(FAKECUDA_FN_MEM_ALLOC_MANAGED);
  if (st().initialized && flags != kMemAttachGlobal && flags != kMemAttachHost)
    return cu::kErrorInvalidValue;
  uintptr_t p = 0;
  Result r = do_alloc(dptr ? &p : nullptr, bytes, Kind::kManaged);
  if (r == cu::kSuccess) *dptr = p;
  return r;
}

FAKECUDA_EXPORT Result cuMemHostAlloc(void** pp, size_t bytes, unsigned /*flags*/) {
  Entry e(FAKECUDA_FN_MEM_HOST_ALLOC);
  uintptr_t p = 0;
  Result r = do_alloc(pp ? &p : nullptr, bytes, Kind::kHostPinned);
  if (r == cu::kSuccess) *pp = reinterpret_cast<void*>(p);
  return r;
}

FAKECUDA_EXPORT Result cuMemFree_v2(DevicePtr dptr) {
  Entry e(FAKECUDA_FN_MEM_FREE);
  return do_free(static_cast<uintptr_t>(dptr), false);
}

FAKECUDA_EXPORT Result cuMemFreeHost(void* p) {
  Entry e(FAKECUDA_FN_MEM_FREE_HOST);
  return do_free(reinterpret_cast<uintptr_t>(p), true);
}

namespace {
// [p, p+n) inside one allocation (of any kind).
bool inside_alloc(State& s, uintptr_t p, size_t n) {
  auto it = find_alloc(s, p);
  return it != s.allocs.end() && n <= it->second.size - (p - it->first);
}
}  // namespace

FAKECUDA_EXPORT Result cuMemcpyHtoD_v2(DevicePtr dst, const void* src, size_t bytes) {
  Entry e(FAKECUDA_FN_MEMCPY_HTOD);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (Result r = check_context()) return r;
  if (bytes == 0) return cu::kSuccess;
  if (!src || !inside_alloc(s, static_cast<uintptr_t>(dst), bytes)) return cu::kErrorInvalidValue;
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), src, bytes);
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuMemcpyDtoH_v2(void* dst, DevicePtr src, size_t bytes) {
  Entry e(FAKECUDA_FN_MEMCPY_DTOH);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (Result r = check_context()) return r;
  if (bytes == 0) return cu::kSuccess;
  if (!dst || !inside_alloc(s, static_cast<uintptr_t>(src), bytes)) return cu::kErrorInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), bytes);
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuMemGetAddressRange_v2(DevicePtr* base, size_t* size, DevicePtr dptr) {
  Entry e(FAKECUDA_FN_MEM_GET_ADDRESS_RANGE);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  auto it = find_alloc(s, static_cast<uintptr_t>(dptr));
  if (it == s.allocs.end()) return cu::kErrorNotFound;
  if (base) *base = it->first;
  if (size) *size = it->second.size;
  return cu::kSuccess;
}

FAKECUDA_EXPORT Result cuMemGetHandleForAddressRange(void* handle, DevicePtr dptr, size_t size,
                                                     int type, unsigned long long flags) {
  Entry e(FAKECUDA_FN_MEM_GET_HANDLE_FOR_ADDRESS_RANGE);
  State& s = st();
  if (!s.initialized) return cu::kErrorNotInitialized;
  if (!s.dmabuf) return cu::kErrorNotSupported;
  if (!handle || type != cu::kMemRangeHandleTypeDmaBufFd || flags != 0 || size == 0)
    return cu::kErrorInvalidValue;
  const uintptr_t p = static_cast<uintptr_t>(dptr);
  if ((p | size) & (page_size() - 1)) return cu::kErrorInvalidValue;
  // Device memory only, within the allocation's pages (its last page counts whole, as the
  // range a caller rounds up to pages must be accepted).
  auto it = find_alloc(s, p);
  if (it == s.allocs.end() || it->second.kind != Kind::kDevice) return cu::kErrorInvalidValue;
  if (size > page_round(it->second.size) - (p - it->first)) return cu::kErrorInvalidValue;
  char name[64];
  std::snprintf(name, sizeof name, "fakecuda-dmabuf:%llx:%llx", static_cast<unsigned long long>(p),
                static_cast<unsigned long long>(size));
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return cu::kErrorOutOfMemory;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {  // a dma-buf's size is that of its range
    close(fd);
    return cu::kErrorOutOfMemory;
  }
  put<int>(handle, fd);
  s.counters.dmabuf_fds++;
  return cu::kSuccess;
}

// ---- cuGetProcAddress ----

namespace {

struct Proc {
  const char* name;  // base name, as a client asks for it
  int version;       // the CUDA version that introduced this variant
  void* fn;
};

template <typename F>
void* fn_ptr(F f) {
  return reinterpret_cast<void*>(f);
}

const Proc* proc_table(size_t* n) {
  static const Proc kTable[] = {
      {"cuInit", 2000, fn_ptr(&cuInit)},
      {"cuDriverGetVersion", 2020, fn_ptr(&cuDriverGetVersion)},
      {"cuGetErrorString", 6000, fn_ptr(&cuGetErrorString)},
      {"cuGetProcAddress", 11030, fn_ptr(&cuGetProcAddress)},
      {"cuGetProcAddress", 12000, fn_ptr(&cuGetProcAddress_v2)},
      {"cuDeviceGetCount", 2000, fn_ptr(&cuDeviceGetCount)},
      {"cuDeviceGet", 2000, fn_ptr(&cuDeviceGet)},
      {"cuDeviceGetAttribute", 2000, fn_ptr(&cuDeviceGetAttribute)},
      {"cuDeviceGetPCIBusId", 4010, fn_ptr(&cuDeviceGetPCIBusId)},
      {"cuCtxGetCurrent", 4000, fn_ptr(&cuCtxGetCurrent)},
      {"cuCtxSetCurrent", 4000, fn_ptr(&cuCtxSetCurrent)},
      {"cuDevicePrimaryCtxRetain", 7000, fn_ptr(&cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", 7000, fn_ptr(&cuDevicePrimaryCtxRelease)},
      {"cuDevicePrimaryCtxRelease", 11000, fn_ptr(&cuDevicePrimaryCtxRelease_v2)},
      {"cuPointerGetAttribute", 4000, fn_ptr(&cuPointerGetAttribute)},
      {"cuPointerGetAttributes", 7000, fn_ptr(&cuPointerGetAttributes)},
      // The 32-bit _v1 memory functions (before 3.2) are not faked: asking with an older
      // cudaVersion gets VERSION_NOT_SUFFICIENT.
      {"cuMemAlloc", 3020, fn_ptr(&cuMemAlloc_v2)},
      {"cuMemFree", 3020, fn_ptr(&cuMemFree_v2)},
      {"cuMemAllocManaged", 6000, fn_ptr(&cuMemAllocManaged)},
      {"cuMemHostAlloc", 2020, fn_ptr(&cuMemHostAlloc)},
      {"cuMemFreeHost", 2000, fn_ptr(&cuMemFreeHost)},
      {"cuMemcpyHtoD", 3020, fn_ptr(&cuMemcpyHtoD_v2)},
      {"cuMemcpyDtoH", 3020, fn_ptr(&cuMemcpyDtoH_v2)},
      {"cuMemGetAddressRange", 3020, fn_ptr(&cuMemGetAddressRange_v2)},
      {"cuMemGetHandleForAddressRange", 11070, fn_ptr(&cuMemGetHandleForAddressRange)},
  };
  *n = sizeof kTable / sizeof kTable[0];
  return kTable;
}

// The newest variant of `sym` that both this driver and the caller's `version` have.
Result proc_address(const char* sym, void** pfn, int version, uint64_t flags, int* status) {
  if (pfn) *pfn = nullptr;
  if (!sym || !pfn || flags > 2)
    return cu::kErrorInvalidValue;  // DEFAULT, LEGACY_STREAM, PER_THREAD
  const int driver = driver_version();
  size_t n = 0;
  const Proc* table = proc_table(&n);
  bool known = false;
  const Proc* best = nullptr;
  for (size_t i = 0; i < n; ++i) {
    if (std::strcmp(table[i].name, sym) != 0 || table[i].version > driver) continue;
    known = true;
    if (table[i].version <= version && (!best || table[i].version > best->version))
      best = &table[i];
  }
  if (!known || !best || version > driver) {
    if (status) *status = known ? kProcVersionNotSufficient : kProcSymbolNotFound;
    return cu::kErrorNotFound;
  }
  *pfn = best->fn;
  if (status) *status = cu::kGetProcAddressSuccess;
  return cu::kSuccess;
}

}  // namespace

// ---- the test API (fakecuda.h) ----

FAKECUDA_EXPORT void fakecuda_get_counters(fakecuda_counters* out) {
  if (!out) return;
  std::lock_guard<std::mutex> lk(st().mu);
  *out = st().counters;
}

FAKECUDA_EXPORT void fakecuda_reset(void) {
  std::lock_guard<std::mutex> lk(st().mu);
  fakecuda_counters& c = st().counters;
  const uint64_t live = c.live_allocs, bytes = c.live_bytes;
  c = fakecuda_counters{};
  c.live_allocs = live;
  c.live_bytes = bytes;
}

FAKECUDA_EXPORT const char* fakecuda_fn_name(int fn) {
  static const char* const kNames[FAKECUDA_FN_COUNT] = {
      "cuInit",
      "cuDriverGetVersion",
      "cuGetErrorString",
      "cuGetProcAddress",
      "cuGetProcAddress_v2",
      "cuDeviceGetCount",
      "cuDeviceGet",
      "cuDeviceGetAttribute",
      "cuDeviceGetPCIBusId",
      "cuCtxGetCurrent",
      "cuCtxSetCurrent",
      "cuDevicePrimaryCtxRetain",
      "cuDevicePrimaryCtxRelease",
      "cuPointerGetAttributes",
      "cuPointerGetAttribute",
      "cuMemAlloc",
      "cuMemFree",
      "cuMemAllocManaged",
      "cuMemHostAlloc",
      "cuMemFreeHost",
      "cuMemcpyHtoD",
      "cuMemcpyDtoH",
      "cuMemGetAddressRange",
      "cuMemGetHandleForAddressRange",
  };
  static_assert(FAKECUDA_FN_COUNT <= FAKECUDA_MAX_FNS, "counters have room for every function");
  return fn >= 0 && fn < FAKECUDA_FN_COUNT ? kNames[fn] : nullptr;
}

FAKECUDA_EXPORT int fakecuda_open_dmabuf_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  static const char kPrefix[] = "/memfd:fakecuda-dmabuf:";
  while (dirent* ent = readdir(d)) {
    char path[300], target[128];
    std::snprintf(path, sizeof path, "/proc/self/fd/%s", ent->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::strncmp(target, kPrefix, sizeof kPrefix - 1) == 0) n++;
  }
  closedir(d);
  return n;
}
