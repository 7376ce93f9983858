// The CUDA driver and NCCL entry points nccl-fabric-gpucheck calls, loaded with dlopen so that the
// program builds on a machine with neither (CI) and says "skipped" where there is no GPU.
// Types and signatures are those of cuda.h (CUDA 12-13) and nccl.h (2.19-2.28); nothing here is
// checked against those headers at build time, because the build must not need them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "mem/cuda_api.h"

namespace gpucheck {

namespace cu = nf::cu;

// What cuda_api.h does not declare (the plugin itself needs none of it).
struct CuStreamOpaque;
using CuStream = CuStreamOpaque*;  // CUstream; NCCL's cudaStream_t is the same type
constexpr cu::Result kCuErrorNotReady = 600;
constexpr unsigned kCuStreamNonBlocking = 0x1;
using StreamCreateFn = cu::Result (*)(CuStream* stream, unsigned flags);  // cuStreamCreate
using StreamDestroyFn = cu::Result (*)(CuStream stream);                  // cuStreamDestroy_v2
using StreamQueryFn = cu::Result (*)(CuStream stream);                    // cuStreamQuery
using StreamSynchronizeFn = cu::Result (*)(CuStream stream);              // cuStreamSynchronize
using MemsetD8Fn = cu::Result (*)(cu::DevicePtr dst, unsigned char v, size_t n);  // cuMemsetD8_v2
using DeviceGetNameFn = cu::Result (*)(char* name, int len, cu::Device dev);      // cuDeviceGetName
using GetErrorNameFn = cu::Result (*)(cu::Result error, const char** str);        // cuGetErrorName

// libcuda.so.1, resolved by the versioned symbol names cuda.h's #defines map to.
struct Cuda {
  void* lib = nullptr;
  cu::InitFn init = nullptr;
  cu::DriverGetVersionFn driver_get_version = nullptr;
  cu::GetErrorStringFn get_error_string = nullptr;
  GetErrorNameFn get_error_name = nullptr;
  cu::DeviceGetCountFn device_get_count = nullptr;
  cu::DeviceGetFn device_get = nullptr;
  DeviceGetNameFn device_get_name = nullptr;
  cu::DevicePrimaryCtxRetainFn primary_ctx_retain = nullptr;
  cu::DevicePrimaryCtxReleaseFn primary_ctx_release = nullptr;
  cu::CtxSetCurrentFn ctx_set_current = nullptr;
  cu::MemAllocFn mem_alloc = nullptr;
  cu::MemFreeFn mem_free = nullptr;
  cu::MemcpyHtoDFn memcpy_htod = nullptr;
  cu::MemcpyDtoHFn memcpy_dtoh = nullptr;
  MemsetD8Fn memset_d8 = nullptr;
  StreamCreateFn stream_create = nullptr;
  StreamDestroyFn stream_destroy = nullptr;
  StreamQueryFn stream_query = nullptr;
  StreamSynchronizeFn stream_synchronize = nullptr;

  // Loads the library and every symbol; false with *why set when any is missing.
  bool load(std::string* why);
  // "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
  std::string error_text(cu::Result r) const;
};

// nccl.h, as the ABI sees it: enums are 4-byte ints, ncclUniqueId is 128 bytes passed by value.
using NcclResult = int;
constexpr NcclResult kNcclSuccess = 0;
constexpr NcclResult kNcclInProgress = 7;
constexpr int kNcclInt8 = 0;
constexpr int kNcclUint8 = 1;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;
struct NcclCommOpaque;
using NcclComm = NcclCommOpaque*;
struct NcclUniqueId {
  char internal[128];
};
static_assert(sizeof(NcclUniqueId) == 128, "ncclUniqueId is NCCL_UNIQUE_ID_BYTES = 128 bytes");

struct Nccl {
  void* lib = nullptr;
  std::string path;  // as opened
  NcclResult (*get_version)(int* version) = nullptr;
  NcclResult (*get_unique_id)(NcclUniqueId* id) = nullptr;
  NcclResult (*comm_init_rank)(NcclComm* comm, int nranks, NcclUniqueId id, int rank) = nullptr;
  NcclResult (*comm_destroy)(NcclComm comm) = nullptr;
  NcclResult (*comm_abort)(NcclComm comm) = nullptr;
  NcclResult (*comm_get_async_error)(NcclComm comm, NcclResult* async_error) = nullptr;
  const char* (*get_error_string)(NcclResult r) = nullptr;
  const char* (*get_last_error)(NcclComm comm) = nullptr;  // optional (2.13+)
  NcclResult (*all_reduce)(const void* send, void* recv, size_t count, int type, int op,
                           NcclComm comm, CuStream stream) = nullptr;
  NcclResult (*all_gather)(const void* send, void* recv, size_t send_count, int type, NcclComm comm,
                           CuStream stream) = nullptr;
  NcclResult (*send)(const void* buf, size_t count, int type, int peer, NcclComm comm,
                     CuStream stream) = nullptr;
  NcclResult (*recv)(void* buf, size_t count, int type, int peer, NcclComm comm,
                     CuStream stream) = nullptr;
  NcclResult (*group_start)() = nullptr;
  NcclResult (*group_end)() = nullptr;

  bool load(const std::string& lib_path, std::string* why);
  // "unhandled system error (run with NCCL_DEBUG=INFO for details): <last error>"
  std::string error_text(NcclResult r, NcclComm comm) const;
};

// NCCL_VERSION_CODE to "2.28.9" (codes below 10000 are the pre-2.9 X*1000+Y*100+Z form).
std::string nccl_version_string(int code);

}  // namespace gpucheck
