#include "mem/cuda.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

#include "util/log.h"

namespace nf {
namespace {

std::once_flag g_once;
Cuda* g_cuda = nullptr;

}  // namespace

Cuda& Cuda::get(const std::string& library) {
  std::call_once(g_once, [&] {
    Cuda* c = new Cuda();  // never destroyed: registrations may outlive any plugin context
    c->load(library);
    __atomic_store_n(&g_cuda, c, __ATOMIC_RELEASE);
  });
  return *__atomic_load_n(&g_cuda, __ATOMIC_ACQUIRE);
}

Cuda* Cuda::loaded() { return __atomic_load_n(&g_cuda, __ATOMIC_ACQUIRE); }

void* Cuda::sym(const char* name, int version, const char* versioned) {
  void* fn = nullptr;
  if (get_proc_v2_ != nullptr) {
    int status = -1;
    if (get_proc_v2_(name, &fn, version, cu::kGetProcAddressDefault, &status) == cu::kSuccess &&
        status == cu::kGetProcAddressSuccess && fn != nullptr)
      return fn;
    fn = nullptr;
  }
  if (get_proc_ != nullptr) {
    if (get_proc_(name, &fn, version, cu::kGetProcAddressDefault) == cu::kSuccess && fn != nullptr)
      return fn;
    fn = nullptr;
  }
  // Drivers before 11.3 have no cuGetProcAddress: the versioned export is the same ABI.
  return dlsym(lib_, versioned);
}

void Cuda::load(const std::string& library) {
  const char* path = library.empty() ? "libcuda.so.1" : library.c_str();
  lib_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    const char* e = dlerror();
    why_ = std::string("no CUDA driver: dlopen(") + path + ") failed: " + (e ? e : "?");
    return;
  }
  get_proc_v2_ = reinterpret_cast<cu::GetProcAddressV2Fn>(dlsym(lib_, "cuGetProcAddress_v2"));
  get_proc_ = reinterpret_cast<cu::GetProcAddressFn>(dlsym(lib_, "cuGetProcAddress"));
  // The versions are those of the ABI we declared in cuda_api.h.
  init_ = reinterpret_cast<cu::InitFn>(sym("cuInit", 2000, "cuInit"));
  driver_get_version_ = reinterpret_cast<cu::DriverGetVersionFn>(
      sym("cuDriverGetVersion", 2020, "cuDriverGetVersion"));
  get_error_string_ =
      reinterpret_cast<cu::GetErrorStringFn>(sym("cuGetErrorString", 6000, "cuGetErrorString"));
  device_get_count_ =
      reinterpret_cast<cu::DeviceGetCountFn>(sym("cuDeviceGetCount", 2000, "cuDeviceGetCount"));
  device_get_ = reinterpret_cast<cu::DeviceGetFn>(sym("cuDeviceGet", 2000, "cuDeviceGet"));
  device_get_attribute_ = reinterpret_cast<cu::DeviceGetAttributeFn>(
      sym("cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute"));
  ctx_get_current_ =
      reinterpret_cast<cu::CtxGetCurrentFn>(sym("cuCtxGetCurrent", 4000, "cuCtxGetCurrent"));
  pointer_get_attributes_ = reinterpret_cast<cu::PointerGetAttributesFn>(
      sym("cuPointerGetAttributes", 7000, "cuPointerGetAttributes"));
  mem_alloc_ = reinterpret_cast<cu::MemAllocFn>(sym("cuMemAlloc", 3020, "cuMemAlloc_v2"));
  mem_free_ = reinterpret_cast<cu::MemFreeFn>(sym("cuMemFree", 3020, "cuMemFree_v2"));
  memcpy_htod_ = reinterpret_cast<cu::MemcpyHtoDFn>(sym("cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2"));
  memcpy_dtoh_ = reinterpret_cast<cu::MemcpyDtoHFn>(sym("cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2"));
  // 11.7+; optional: without it there is no DMA-BUF.
  get_handle_for_range_ = reinterpret_cast<cu::MemGetHandleForAddressRangeFn>(
      sym("cuMemGetHandleForAddressRange", 11070, "cuMemGetHandleForAddressRange"));

  const char* missing = nullptr;
  if (init_ == nullptr)
    missing = "cuInit";
  else if (driver_get_version_ == nullptr)
    missing = "cuDriverGetVersion";
  else if (device_get_count_ == nullptr)
    missing = "cuDeviceGetCount";
  else if (device_get_ == nullptr)
    missing = "cuDeviceGet";
  else if (device_get_attribute_ == nullptr)
    missing = "cuDeviceGetAttribute";
  else if (ctx_get_current_ == nullptr)
    missing = "cuCtxGetCurrent";
  else if (pointer_get_attributes_ == nullptr)
    missing = "cuPointerGetAttributes";
  else if (mem_alloc_ == nullptr)
    missing = "cuMemAlloc";
  else if (mem_free_ == nullptr)
    missing = "cuMemFree";
  if (missing != nullptr) {
    why_ = std::string("CUDA driver ") + path + " lacks " + missing + " (driver too old?)";
    return;
  }
  cu::Result r = init_(0);
  if (r != cu::kSuccess) {
    why_ = "cuInit failed: " + error_text(r);
    return;
  }
  if (driver_get_version_(&driver_version_) != cu::kSuccess) driver_version_ = 0;
  r = device_get_count_(&device_count_);
  if (r != cu::kSuccess || device_count_ <= 0) {
    why_ = r != cu::kSuccess ? "cuDeviceGetCount failed: " + error_text(r) : "no CUDA device";
    device_count_ = 0;
    return;
  }
  ok_ = true;
  char buf[160];
  snprintf(buf, sizeof(buf), "CUDA driver %d.%d (%s), %d device(s), entry points via %s",
           driver_version_ / 1000, (driver_version_ % 1000) / 10, path, device_count_,
           get_proc_v2_ ? "cuGetProcAddress_v2"
           : get_proc_  ? "cuGetProcAddress"
                        : "dlsym");
  why_ = buf;
}

std::string Cuda::error_text(cu::Result r) const {
  const char* s = nullptr;
  if (get_error_string_ == nullptr || get_error_string_(r, &s) != cu::kSuccess || s == nullptr)
    s = "unknown error";
  return std::string(s) + " (CUresult " + std::to_string(r) + ")";
}

Status Cuda::classify(const void* p, PtrInfo* out) const {
  *out = PtrInfo();
  if (!ok_) return Status::kOk;  // no CUDA: everything is host memory
  int attrs[] = {cu::kPointerAttrMemoryType,     cu::kPointerAttrIsManaged,
                 cu::kPointerAttrDeviceOrdinal,  cu::kPointerAttrBufferId,
                 cu::kPointerAttrRangeStartAddr, cu::kPointerAttrRangeSize};
  unsigned mem_type = 0;
  unsigned managed = 0;  // the driver writes a boolean: zeroed first, any non-zero byte counts
  int ordinal = -1;
  unsigned long long id = 0;
  cu::DevicePtr start = 0;
  size_t size = 0;
  void* data[] = {&mem_type, &managed, &ordinal, &id, &start, &size};
  cu::Result r = pointer_get_attributes_(6, attrs, data, reinterpret_cast<cu::DevicePtr>(p));
  if (r != cu::kSuccess) {
    // Older drivers answer INVALID_VALUE for memory they do not know: that is host memory.
    if (r == cu::kErrorInvalidValue) return Status::kOk;
    NF_WARN("cuPointerGetAttributes(%p) failed: %s", p, error_text(r).c_str());
    return Status::kUnhandledCudaError;
  }
  if (mem_type != cu::kMemoryTypeDevice && mem_type != cu::kMemoryTypeUnified) return Status::kOk;
  out->kind = managed != 0 ? MemKind::kCudaManaged : MemKind::kCudaDevice;
  out->device = ordinal;
  out->buffer_id = id;
  out->alloc_base = static_cast<uintptr_t>(start);
  out->alloc_size = size;
  return Status::kOk;
}

int Cuda::device_attribute(int device, int attr) const {
  if (!ok_) return -1;
  cu::Device dev = 0;
  int v = -1;
  if (device_get_(&dev, device) != cu::kSuccess) return -1;
  if (device_get_attribute_(&v, attr, dev) != cu::kSuccess) return -1;
  return v;
}

bool Cuda::has_current_context() const {
  if (!ok_) return false;
  cu::Context ctx = nullptr;
  return ctx_get_current_(&ctx) == cu::kSuccess && ctx != nullptr;
}

Status Cuda::alloc(size_t bytes, uintptr_t* out, std::string* why) const {
  *out = 0;
  if (!ok_) {
    *why = why_;
    return Status::kSystemError;
  }
  if (!has_current_context()) {
    *why = "no CUDA context is current on the calling thread";
    return Status::kSystemError;
  }
  cu::DevicePtr p = 0;
  cu::Result r = mem_alloc_(&p, bytes);
  if (r != cu::kSuccess) {
    *why = "cuMemAlloc(" + std::to_string(bytes) + ") failed: " + error_text(r);
    return Status::kUnhandledCudaError;
  }
  *out = static_cast<uintptr_t>(p);
  return Status::kOk;
}

void Cuda::free(uintptr_t p) const {
  if (ok_ && p != 0) mem_free_(static_cast<cu::DevicePtr>(p));
}

Status Cuda::copy_to_device(uintptr_t dst, const void* src, size_t n) const {
  if (!ok_ || memcpy_htod_ == nullptr) return Status::kSystemError;
  cu::Result r = memcpy_htod_(static_cast<cu::DevicePtr>(dst), src, n);
  return r == cu::kSuccess ? Status::kOk : Status::kUnhandledCudaError;
}

Status Cuda::copy_to_host(void* dst, uintptr_t src, size_t n) const {
  if (!ok_ || memcpy_dtoh_ == nullptr) return Status::kSystemError;
  cu::Result r = memcpy_dtoh_(dst, static_cast<cu::DevicePtr>(src), n);
  return r == cu::kSuccess ? Status::kOk : Status::kUnhandledCudaError;
}

Status Cuda::dmabuf_fd(uintptr_t p, size_t bytes, int* fd, std::string* why) const {
  *fd = -1;
  if (!ok_ || get_handle_for_range_ == nullptr) {
    *why = ok_ ? "the driver has no cuMemGetHandleForAddressRange (needs CUDA 11.7+)" : why_;
    return Status::kSystemError;
  }
  int f = -1;
  cu::Result r = get_handle_for_range_(&f, static_cast<cu::DevicePtr>(p), bytes,
                                       cu::kMemRangeHandleTypeDmaBufFd, 0);
  if (r != cu::kSuccess) {
    *why = "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: " + error_text(r);
    return Status::kUnhandledCudaError;
  }
  *fd = f;
  return Status::kOk;
}

}  // namespace nf
