#include "gpu_api.h"

#include <dlfcn.h>

namespace gpucheck {
namespace {

// Reads a symbol into a typed function pointer; false (and *why) when it is absent.
template <typename Fn>
bool resolve(void* lib, const char* name, Fn* out, std::string* why) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    if (why->empty()) *why = std::string("symbol ") + name + " not found";
    return false;
  }
  *out = reinterpret_cast<Fn>(p);
  return true;
}

}  // namespace

bool Cuda::load(std::string* why) {
  why->clear();
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *why = std::string("cannot load the CUDA driver libcuda.so.1: ") + (e ? e : "unknown");
    return false;
  }
  // The names are those cuda.h's #defines resolve to without CUDA_API_PER_THREAD_DEFAULT_STREAM.
  bool ok = true;
  ok &= resolve(lib, "cuInit", &init, why);
  ok &= resolve(lib, "cuDriverGetVersion", &driver_get_version, why);
  ok &= resolve(lib, "cuGetErrorString", &get_error_string, why);
  ok &= resolve(lib, "cuGetErrorName", &get_error_name, why);
  ok &= resolve(lib, "cuDeviceGetCount", &device_get_count, why);
  ok &= resolve(lib, "cuDeviceGet", &device_get, why);
  ok &= resolve(lib, "cuDeviceGetName", &device_get_name, why);
  ok &= resolve(lib, "cuDevicePrimaryCtxRetain", &primary_ctx_retain, why);
  ok &= resolve(lib, "cuDevicePrimaryCtxRelease_v2", &primary_ctx_release, why);
  ok &= resolve(lib, "cuCtxSetCurrent", &ctx_set_current, why);
  ok &= resolve(lib, "cuMemAlloc_v2", &mem_alloc, why);
  ok &= resolve(lib, "cuMemFree_v2", &mem_free, why);
  ok &= resolve(lib, "cuMemcpyHtoD_v2", &memcpy_htod, why);
  ok &= resolve(lib, "cuMemcpyDtoH_v2", &memcpy_dtoh, why);
  ok &= resolve(lib, "cuMemsetD8_v2", &memset_d8, why);
  ok &= resolve(lib, "cuStreamCreate", &stream_create, why);
  ok &= resolve(lib, "cuStreamDestroy_v2", &stream_destroy, why);
  ok &= resolve(lib, "cuStreamQuery", &stream_query, why);
  ok &= resolve(lib, "cuStreamSynchronize", &stream_synchronize, why);
  if (!ok) *why = "libcuda.so.1 is too old or incomplete: " + *why;
  return ok;
}

std::string Cuda::error_text(cu::Result r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (get_error_name == nullptr || get_error_name(r, &name) != cu::kSuccess) name = nullptr;
  if (get_error_string == nullptr || get_error_string(r, &text) != cu::kSuccess) text = nullptr;
  std::string s = name ? name : "CUresult " + std::to_string(r);
  if (text) s += std::string(" (") + text + ")";
  return s;
}

bool Nccl::load(const std::string& lib_path, std::string* why) {
  why->clear();
  path = lib_path;
  lib = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *why = "cannot load NCCL from " + lib_path + ": " + (e ? e : "unknown") +
           " (give its path with --nccl-lib or NF_NCCL_LIB)";
    return false;
  }
  bool ok = true;
  ok &= resolve(lib, "ncclGetVersion", &get_version, why);
  ok &= resolve(lib, "ncclGetUniqueId", &get_unique_id, why);
  ok &= resolve(lib, "ncclCommInitRank", &comm_init_rank, why);
  ok &= resolve(lib, "ncclCommDestroy", &comm_destroy, why);
  ok &= resolve(lib, "ncclCommAbort", &comm_abort, why);
  ok &= resolve(lib, "ncclCommGetAsyncError", &comm_get_async_error, why);
  ok &= resolve(lib, "ncclGetErrorString", &get_error_string, why);
  ok &= resolve(lib, "ncclAllReduce", &all_reduce, why);
  ok &= resolve(lib, "ncclAllGather", &all_gather, why);
  ok &= resolve(lib, "ncclSend", &send, why);
  ok &= resolve(lib, "ncclRecv", &recv, why);
  ok &= resolve(lib, "ncclGroupStart", &group_start, why);
  ok &= resolve(lib, "ncclGroupEnd", &group_end, why);
  std::string ignored;
  resolve(lib, "ncclGetLastError", &get_last_error, &ignored);
  if (!ok) *why = lib_path + " is not a usable NCCL (2.7 or newer): " + *why;
  return ok;
}

std::string Nccl::error_text(NcclResult r, NcclComm comm) const {
  std::string s = "ncclResult " + std::to_string(r);
  if (get_error_string != nullptr) s += std::string(" \"") + get_error_string(r) + "\"";
  if (get_last_error != nullptr) {
    const char* last = get_last_error(comm);
    if (last != nullptr && last[0] != '\0') s += std::string(": ") + last;
  }
  return s;
}

std::string nccl_version_string(int code) {
  int major, minor, patch;
  if (code >= 10000) {
    major = code / 10000;
    minor = (code % 10000) / 100;
    patch = code % 100;
  } else {
    major = code / 1000;
    minor = (code % 1000) / 100;
    patch = code % 100;
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace gpucheck
