/* Written from the NCCL 2.28.9 plugin ABI spec (nccl-plugin-abi.md §1.1-1.4), not NCCL's headers.
 */
#ifndef NCCL_FABRIC_NCCL_COMMON_H
#define NCCL_FABRIC_NCCL_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Layout checks shared by every ABI header. The numbers they compare against
 * are the LP64 (x86_64) layouts NCCL was compiled with; a failure means this
 * build would hand NCCL structs it reads at different offsets. */
#ifdef __cplusplus
#define NF_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#define NF_ABI_ALIGNOF(T) alignof(T)
#else
#define NF_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#define NF_ABI_ALIGNOF(T) _Alignof(T)
#endif
#define NF_ABI_SIZE(T, n) NF_ABI_ASSERT(sizeof(T) == (n), "sizeof(" #T ") does not match NCCL")
#define NF_ABI_ALIGN(T, n) \
  NF_ABI_ASSERT(NF_ABI_ALIGNOF(T) == (n), "alignof(" #T ") does not match NCCL")
#define NF_ABI_OFFSET(T, m, n) \
  NF_ABI_ASSERT(offsetof(T, m) == (n), "offsetof(" #T ", " #m ") does not match NCCL")

/* §1.1. Plugins report "not done yet" through NULL out-pointers, never ncclInProgress. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

/* §1.2 */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Bit flags; NCCL passes them as the logger's unsigned long `flags`. */
typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

/* §1.3: the `type` argument of ncclProfilerCallback_t. NCCL leaves this enum untagged. */
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3
};

typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

/* §1.4. Send/Recv are not counted in NCCL_NUM_FUNCTIONS. */
#ifndef NCCL_NUM_FUNCTIONS
#define NCCL_NUM_FUNCTIONS 5
#endif

typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclFuncAlltoAll = 8,
  ncclFuncScatter = 9,
  ncclFuncGather = 10,
  ncclNumFuncs = 11
} ncclFunc_t;

/* Enums cross the ABI by value inside structs and call signatures, so they must be int-sized. */
NF_ABI_SIZE(ncclResult_t, 4);
NF_ABI_SIZE(ncclDebugLogLevel, 4);
NF_ABI_SIZE(ncclDebugLogSubSys, 4);
NF_ABI_SIZE(ncclFunc_t, 4);
NF_ABI_ASSERT(sizeof(ncclProfilerNetEventStart) == 4, "profiler net event enum is not int-sized");

#endif /* NCCL_FABRIC_NCCL_COMMON_H */
