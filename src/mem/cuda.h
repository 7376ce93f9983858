// The CUDA driver, loaded at run time: the plugin has no link-time dependency on CUDA and works
// on a host without it. Every entry point is resolved once, by explicit ABI version
// (cuGetProcAddress_v2, else cuGetProcAddress, else dlsym of the versioned symbol), so a newer
// driver never hands us a function with another signature.
//
// Only the service/init threads call in here (registration, detection): never the data path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "mem/cuda_api.h"
#include "util/mem_kind.h"
#include "util/status.h"

namespace nf {

struct PtrInfo {
  MemKind kind = MemKind::kHost;
  int device = -1;           // owning device ordinal for CUDA memory
  uint64_t buffer_id = 0;    // unique per CUDA allocation for the life of the process; 0 for host
  uintptr_t alloc_base = 0;  // the CUDA allocation holding the pointer (0 for host)
  size_t alloc_size = 0;
};

class Cuda {
 public:
  // Loads the driver from `library` (NCCL_FABRIC_CUDA_LIBRARY) the first time; later calls
  // return the first outcome whatever they pass. Thread-safe. Never fails the caller: the
  // outcome is available() and why().
  static Cuda& get(const std::string& library);
  // The instance if get() ran, else nullptr (for code that must not load CUDA itself).
  static Cuda* loaded();

  bool available() const { return ok_; }
  const std::string& why() const { return why_; }  // why not available, or a summary when it is
  int driver_version() const { return driver_version_; }
  int device_count() const { return device_count_; }

  // Classifies a pointer. Host memory that CUDA does not know is kHost, not an error.
  Status classify(const void* p, PtrInfo* out) const;

  int device_attribute(int device, int attr) const;  // -1 when it cannot be read
  // Whether a CUDA context is current on this thread.
  bool has_current_context() const;

  // A device allocation for probing (GPUDirect detection), in the current context. Fails
  // without one: the plugin never creates a CUDA context of its own.
  Status alloc(size_t bytes, uintptr_t* out, std::string* why) const;
  void free(uintptr_t p) const;
  Status copy_to_device(uintptr_t dst, const void* src, size_t n) const;
  Status copy_to_host(void* dst, uintptr_t src, size_t n) const;
  // A DMA-BUF file descriptor for [p, p+bytes) (page-aligned), or an error with the reason.
  Status dmabuf_fd(uintptr_t p, size_t bytes, int* fd, std::string* why) const;

  std::string error_text(cu::Result r) const;

 private:
  Cuda() = default;
  void load(const std::string& library);
  void* sym(const char* name, int version, const char* versioned);

  bool ok_ = false;
  std::string why_;
  void* lib_ = nullptr;
  int driver_version_ = 0;
  int device_count_ = 0;
  cu::GetProcAddressV2Fn get_proc_v2_ = nullptr;
  cu::GetProcAddressFn get_proc_ = nullptr;
  cu::InitFn init_ = nullptr;
  cu::DriverGetVersionFn driver_get_version_ = nullptr;
  cu::GetErrorStringFn get_error_string_ = nullptr;
  cu::DeviceGetCountFn device_get_count_ = nullptr;
  cu::DeviceGetFn device_get_ = nullptr;
  cu::DeviceGetAttributeFn device_get_attribute_ = nullptr;
  cu::CtxGetCurrentFn ctx_get_current_ = nullptr;
  cu::PointerGetAttributesFn pointer_get_attributes_ = nullptr;
  cu::MemAllocFn mem_alloc_ = nullptr;
  cu::MemFreeFn mem_free_ = nullptr;
  cu::MemcpyHtoDFn memcpy_htod_ = nullptr;
  cu::MemcpyDtoHFn memcpy_dtoh_ = nullptr;
  cu::MemGetHandleForAddressRangeFn get_handle_for_range_ = nullptr;
};

}  // namespace nf
