/*
 * fakecuda: a stand-in for the CUDA driver (libcuda.so.1) on machines without a GPU.
 *
 * libfakecuda.so exports the driver entry points the plugin uses (see README.md beside this
 * file), with the real ABI, plus the small test API below. "Device memory" is host memory, so a
 * test can read and write it directly. Load it the way the plugin does, by path:
 *
 *     void *h = dlopen(getenv("NF_FAKECUDA_LIB"), RTLD_NOW | RTLD_LOCAL);
 *
 * dlopen of the same path returns the same object, so a test and the plugin (pointed at it with
 * NCCL_FABRIC_CUDA_LIBRARY) share one fake driver; fakecuda_load_api() reaches the test API.
 * Every function is thread-safe.
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The exported driver functions, for the per-function call counters. */
enum fakecuda_fn {
  FAKECUDA_FN_INIT = 0,
  FAKECUDA_FN_DRIVER_GET_VERSION,
  FAKECUDA_FN_GET_ERROR_STRING,
  FAKECUDA_FN_GET_PROC_ADDRESS,    /* cuGetProcAddress (legacy, 11.3+) */
  FAKECUDA_FN_GET_PROC_ADDRESS_V2, /* cuGetProcAddress_v2 (12.0+) */
  FAKECUDA_FN_DEVICE_GET_COUNT,
  FAKECUDA_FN_DEVICE_GET,
  FAKECUDA_FN_DEVICE_GET_ATTRIBUTE,
  FAKECUDA_FN_DEVICE_GET_PCI_BUS_ID,
  FAKECUDA_FN_CTX_GET_CURRENT,
  FAKECUDA_FN_CTX_SET_CURRENT,
  FAKECUDA_FN_PRIMARY_CTX_RETAIN,
  FAKECUDA_FN_PRIMARY_CTX_RELEASE,
  FAKECUDA_FN_POINTER_GET_ATTRIBUTES,
  FAKECUDA_FN_POINTER_GET_ATTRIBUTE,
  FAKECUDA_FN_MEM_ALLOC,
  FAKECUDA_FN_MEM_FREE,
  FAKECUDA_FN_MEM_ALLOC_MANAGED,
  FAKECUDA_FN_MEM_HOST_ALLOC,
  FAKECUDA_FN_MEM_FREE_HOST,
  FAKECUDA_FN_MEMCPY_HTOD,
  FAKECUDA_FN_MEMCPY_DTOH,
  FAKECUDA_FN_MEM_GET_ADDRESS_RANGE,
  FAKECUDA_FN_MEM_GET_HANDLE_FOR_ADDRESS_RANGE,
  FAKECUDA_FN_COUNT
};

#define FAKECUDA_MAX_FNS 32

/* fakecuda_reset() zeroes everything but the live_* gauges. New fields go at the end. */
struct fakecuda_counters {
  uint64_t calls[FAKECUDA_MAX_FNS]; /* every call, by enum fakecuda_fn, whatever it returned */
  /* Calls made by a thread with no current context, by function. Counted for the memory and
   * pointer functions (POINTER_GET_ATTRIBUTE(S) .. MEM_GET_HANDLE_FOR_ADDRESS_RANGE), not for
   * init, version, proc-address, device and context functions, which need none. */
  uint64_t calls_without_context[FAKECUDA_MAX_FNS];
  uint64_t calls_without_context_total;
  uint64_t allocs;      /* successful cuMemAlloc_v2 + cuMemAllocManaged + cuMemHostAlloc */
  uint64_t frees;       /* successful cuMemFree_v2 + cuMemFreeHost */
  uint64_t reused;      /* allocations that got a freed address back */
  uint64_t dmabuf_fds;  /* fds handed out by cuMemGetHandleForAddressRange */
  uint64_t live_allocs; /* gauge: allocations not freed */
  uint64_t live_bytes;  /* gauge: their requested sizes */
};

void fakecuda_get_counters(struct fakecuda_counters* out);
void fakecuda_reset(void);
/* "cuMemAlloc", ... for enum fakecuda_fn; NULL when out of range. */
const char* fakecuda_fn_name(int fn);
/* How many fds of this process are fakecuda dma-bufs now (scans /proc/self/fd): a leak check
 * for code that must close the fd it got from cuMemGetHandleForAddressRange. */
int fakecuda_open_dmabuf_fds(void);

typedef void (*fakecuda_get_counters_fn)(struct fakecuda_counters*);
typedef void (*fakecuda_reset_fn)(void);
typedef const char* (*fakecuda_fn_name_fn)(int);
typedef int (*fakecuda_open_dmabuf_fds_fn)(void);

struct fakecuda_api {
  void* handle; /* dlclose() it when done */
  fakecuda_get_counters_fn get_counters;
  fakecuda_reset_fn reset;
  fakecuda_fn_name_fn fn_name;
  fakecuda_open_dmabuf_fds_fn open_dmabuf_fds;
};

/* dlopen(path) (the same object the plugin loads from that path) and fill `api`. 0, or -1. */
static inline int fakecuda_load_api(const char* path, struct fakecuda_api* api) {
  void* h;
  if (!path || !api) return -1;
  h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  api->handle = h;
  api->get_counters = (fakecuda_get_counters_fn)dlsym(h, "fakecuda_get_counters");
  api->reset = (fakecuda_reset_fn)dlsym(h, "fakecuda_reset");
  api->fn_name = (fakecuda_fn_name_fn)dlsym(h, "fakecuda_fn_name");
  api->open_dmabuf_fds = (fakecuda_open_dmabuf_fds_fn)dlsym(h, "fakecuda_open_dmabuf_fds");
  if (!api->get_counters || !api->reset || !api->fn_name || !api->open_dmabuf_fds) {
    dlclose(h);
    api->handle = NULL;
    return -1;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* FAKECUDA_H */
