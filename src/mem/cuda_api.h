// The few CUDA driver API types and constants the plugin uses, declared here so that the plugin
// builds without CUDA headers and runs without CUDA. Values are those of cuda.h (CUDA 11.3-13);
// tests/unit/test_cuda_api.cpp compares them with cuda.h where it is installed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nf {
namespace cu {

using Result = int;          // CUresult
using Device = int;          // CUdevice
using Context = void*;       // CUcontext
using DevicePtr = uint64_t;  // CUdeviceptr (unsigned long long on 64-bit)

constexpr Result kSuccess = 0;
constexpr Result kErrorInvalidValue = 1;
constexpr Result kErrorOutOfMemory = 2;
constexpr Result kErrorNotInitialized = 3;
constexpr Result kErrorDeinitialized = 4;
constexpr Result kErrorNoDevice = 100;
constexpr Result kErrorInvalidContext = 201;
constexpr Result kErrorNotFound = 500;
constexpr Result kErrorNotSupported = 801;

// CUpointer_attribute
constexpr int kPointerAttrContext = 1;
constexpr int kPointerAttrMemoryType = 2;       // unsigned int: a CUmemorytype, 0 when unknown
constexpr int kPointerAttrBufferId = 7;         // unsigned long long, unique per allocation
constexpr int kPointerAttrIsManaged = 8;        // a boolean: read into a zeroed unsigned int
constexpr int kPointerAttrDeviceOrdinal = 9;    // int
constexpr int kPointerAttrRangeStartAddr = 11;  // CUdeviceptr
constexpr int kPointerAttrRangeSize = 12;       // size_t

// CUmemorytype
constexpr unsigned kMemoryTypeHost = 1;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kMemoryTypeArray = 3;
constexpr unsigned kMemoryTypeUnified = 4;

// CUdevice_attribute
constexpr int kDevAttrPciBusId = 33;
constexpr int kDevAttrPciDeviceId = 34;
constexpr int kDevAttrPciDomainId = 50;
constexpr int kDevAttrComputeCapabilityMajor = 75;
constexpr int kDevAttrGpuDirectRdmaSupported = 116;
constexpr int kDevAttrDmaBufSupported = 124;

// CUmemRangeHandleType
constexpr int kMemRangeHandleTypeDmaBufFd = 1;

// cuGetProcAddress flags / CUdriverProcAddressQueryResult
constexpr uint64_t kGetProcAddressDefault = 0;
constexpr int kGetProcAddressSuccess = 0;

// Function types, by the versioned symbol they are resolved as (see mem/cuda.cpp).
using GetProcAddressV2Fn = Result (*)(const char* symbol, void** pfn, int cuda_version,
                                      uint64_t flags, int* symbol_status);  // 12.0+
using GetProcAddressFn = Result (*)(const char* symbol, void** pfn, int cuda_version,
                                    uint64_t flags);                          // 11.3+
using InitFn = Result (*)(unsigned flags);                                    // cuInit 2000
using DriverGetVersionFn = Result (*)(int* version);                          // 2020
using GetErrorStringFn = Result (*)(Result error, const char** str);          // 6000
using DeviceGetCountFn = Result (*)(int* count);                              // 2000
using DeviceGetFn = Result (*)(Device* dev, int ordinal);                     // 2000
using DeviceGetAttributeFn = Result (*)(int* value, int attrib, Device dev);  // 2000
using CtxGetCurrentFn = Result (*)(Context* ctx);                             // 4000
using CtxSetCurrentFn = Result (*)(Context ctx);                              // 4000
using DevicePrimaryCtxRetainFn = Result (*)(Context* ctx, Device dev);        // 7000
using DevicePrimaryCtxReleaseFn = Result (*)(Device dev);                     // 11000 (_v2)
using PointerGetAttributesFn = Result (*)(unsigned num, int* attributes, void** data,
                                          DevicePtr ptr);                       // 7000
using MemAllocFn = Result (*)(DevicePtr* dptr, size_t bytes);                   // 3020 (_v2)
using MemFreeFn = Result (*)(DevicePtr dptr);                                   // 3020 (_v2)
using MemcpyHtoDFn = Result (*)(DevicePtr dst, const void* src, size_t bytes);  // 3020 (_v2)
using MemcpyDtoHFn = Result (*)(void* dst, DevicePtr src, size_t bytes);        // 3020 (_v2)
using MemGetHandleForAddressRangeFn = Result (*)(void* handle, DevicePtr dptr, size_t size,
                                                 int handle_type,
                                                 unsigned long long flags);  // 11070

}  // namespace cu
}  // namespace nf
