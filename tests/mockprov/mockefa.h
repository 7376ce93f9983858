/*
 * mockefa: a libfabric DL provider that behaves like the EFA `efa` RDM endpoint, for tests.
 *
 * This header declares the C API the provider exports for tests (counters, fault injection,
 * NIC facts). libfabric loads the provider with dlopen(RTLD_LOCAL), so a test cannot link
 * against these symbols: it must reach them through the already loaded library:
 *
 *     fi_getinfo(...);   // first: libfabric loads DL providers on its first call
 *     void *h = dlopen(getenv("NF_MOCKPROV_LIB"), RTLD_NOW | RTLD_NOLOAD);
 *     auto get = (mockefa_get_counters_fn)dlsym(h, "mockefa_get_counters");
 *
 * RTLD_NOLOAD returns the copy libfabric loaded (same path, so the same object) without loading a
 * second one; the handle only bumps a reference count and should be dlclose()d when done.
 * mockefa_load_api() below does exactly that for every function.
 *
 * All functions are thread-safe (one process-wide lock inside the provider).
 */
#ifndef MOCKEFA_H
#define MOCKEFA_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of application mistakes the checker refuses (and counts). Index into
 * mockefa_counters.violations. Keep in step with mockefa_violation_name(). */
enum mockefa_violation {
  MOCKEFA_V_NO_DESC = 0,    /* FI_MR_LOCAL in effect, len > 0, desc NULL: -FI_EINVAL */
  MOCKEFA_V_BAD_DESC,       /* desc is not a live MR of the endpoint's domain: -FI_EINVAL */
  MOCKEFA_V_DESC_RANGE,     /* the MR behind desc does not cover [buf, buf+len): -FI_EINVAL */
  MOCKEFA_V_RMA_KEY,        /* RMA key unknown at the target (or another domain's): error cqe */
  MOCKEFA_V_RMA_BOUNDS,     /* RMA range outside the target MR: error cqe */
  MOCKEFA_V_RMA_ACCESS,     /* target MR lacks FI_REMOTE_WRITE / FI_REMOTE_READ: error cqe */
  MOCKEFA_V_CQ_DATA,        /* remote CQ data does not fit in 4 bytes: -FI_EINVAL */
  MOCKEFA_V_MSG_SIZE,       /* len > max_msg_size (or FI_OPT_MAX_*_SIZE): -FI_EINVAL */
  MOCKEFA_V_INJECT_SIZE,    /* inject len > inject_size: -FI_EINVAL */
  MOCKEFA_V_IOV_LIMIT,      /* iov_count > 4, rma_iov_count != 1: -FI_EINVAL */
  MOCKEFA_V_CTX_REUSE,      /* context pointer of an op still in flight: -FI_EINVAL */
  MOCKEFA_V_BAD_ADDR,       /* fi_addr_t not in the endpoint's AV: -FI_EINVAL */
  MOCKEFA_V_NOT_ENABLED,    /* data op on an endpoint not enabled: -FI_EOPBADSTATE */
  MOCKEFA_V_MISSING_CAP,    /* op class (MSG/TAGGED/RMA) not in the endpoint caps: -FI_EOPNOTSUPP */
  MOCKEFA_V_MR_IN_USE,      /* fi_close(mr) while an op in flight uses it: the op fails */
  MOCKEFA_V_WRITEDATA_SIZE, /* fi_writedata larger than one device write (1 GiB): -FI_EINVAL */
  MOCKEFA_V_UNSUPPORTED, /* flag/feature the mock refuses (MULTI_RECV, PEEK, ...): -FI_EOPNOTSUPP */
  MOCKEFA_V_OPT_STATE,   /* option EFA only takes before fi_enable, set after: -FI_EINVAL;
                            or an EQ bound after fi_enable: -FI_EOPBADSTATE */
  MOCKEFA_V_BUSY_CLOSE,  /* fi_close of an object still in use (bound EP, open MRs): -FI_EBUSY */
  MOCKEFA_V_DMABUF_FD,   /* FI_MR_DMABUF with an fd that is not open: -FI_EINVAL */
  MOCKEFA_V_DMABUF_RANGE,    /* FI_MR_DMABUF region not the memory a fakecuda dma-buf stands for:
                                -FI_EINVAL */
  MOCKEFA_V_NO_EQ,           /* an error that belongs to no operation, on an endpoint without an EQ
                                (EFA prints and abort()s; the mock counts, prints, goes on) */
  MOCKEFA_V_API_VERSION,     /* a feature used on a fabric opened at an API version that lacks it
                                (FI_MR_DMABUF below 1.20): EFA's answer (-FI_EBADFLAGS) */
  MOCKEFA_V_DEVICE_RDMA_ENV, /* FI_EFA_USE_DEVICE_RDMA=1 on a NIC without RDMA read, or not a
                                boolean (EFA abort()s at fi_endpoint; the mock counts and uses 0 /
                                the default) */
  /* efa-direct endpoints only (built against libfabric >= 2 headers): */
  MOCKEFA_V_NO_CONTEXT,      /* NULL context on an efa-direct op (FI_CONTEXT2 mode): -FI_EINVAL */
  MOCKEFA_V_CTX_CLOBBERED,   /* the app overwrote the provider's words in an efa-direct op's live
                                fi_context2 before its completion was read (counted at the read) */
  MOCKEFA_V_UNKNOWN_PEER,    /* efa-direct RMA whose target has not the initiator in its AV: error
                                cqe at the initiator (prov_errno 14) */
  MOCKEFA_V_WRITE_RECV,      /* efa-direct write-with-immediate to a target without unsolicited
                                write recv and no posted receive: error cqe (prov_errno 10) */
  MOCKEFA_V_FABRIC_MISMATCH, /* an op between an `efa` and an `efa-direct` endpoint: error cqe */
  MOCKEFA_V_COUNT
};

/* Faults the mock injected on request (index into mockefa_counters.faults). */
enum mockefa_fault {
  MOCKEFA_F_EAGAIN = 0,   /* a post answered -FI_EAGAIN because of eagain_every */
  MOCKEFA_F_ERROR,        /* an op completed in error because of error_every */
  MOCKEFA_F_UNREACHABLE,  /* an op failed with FI_EHOSTUNREACH because of unreachable_after */
  MOCKEFA_F_CQ_DELAY,     /* a completion was held back (cq_delay) */
  MOCKEFA_F_CQ_REORDER,   /* a CQ read returned completions out of order (cq_reorder) */
  MOCKEFA_F_WIRE_DELAY,   /* an op was held on the wire (wire_delay) */
  MOCKEFA_F_WIRE_REORDER, /* a progress pass handled wire ops / chunks out of post order */
  MOCKEFA_F_CHUNKED,      /* a transfer landed in several pieces (land_chunk) */
  MOCKEFA_F_EQ_ERROR,     /* an error that belongs to no operation was raised (eq_error_after) */
  MOCKEFA_F_COUNT
};

#define MOCKEFA_MAX_KINDS 32

/* Process-wide counters; mockefa_reset_counters() zeroes everything except the open_* gauges.
 * New fields go at the end, so a test built against an older header still reads the old ones. */
struct mockefa_counters {
  uint64_t violations[MOCKEFA_MAX_KINDS]; /* by enum mockefa_violation */
  uint64_t violations_total;
  uint64_t faults[MOCKEFA_MAX_KINDS]; /* by enum mockefa_fault */
  uint64_t faults_total;
  uint64_t ops_posted;        /* accepted data posts (tx and rx, incl. inject) */
  uint64_t tx_posted;         /* accepted send/tsend/write/read posts */
  uint64_t rx_posted;         /* accepted recv/trecv posts */
  uint64_t completions;       /* successful completion entries written (incl. remote writedata) */
  uint64_t error_completions; /* error completion entries written */
  uint64_t eagain_returned;   /* every -FI_EAGAIN a post returned (injected or not) */
  uint64_t eagain_queue_full; /* ... of which: tx/rx queue depth reached */
  uint64_t eagain_handshake;  /* ... of which: RMA to a peer before its handshake */
  uint64_t unexpected_msgs;   /* messages that arrived before a matching receive */
  uint64_t truncations;       /* receives completed with FI_ETRUNC */
  uint64_t bytes_landed;      /* payload bytes copied into destination buffers */
  uint64_t cq_reads;          /* fi_cq_read/readfrom calls */
  /* Gauges: objects open right now (a plugin that leaks shows up here). */
  uint64_t open_fabrics, open_domains, open_avs, open_cqs, open_eps, open_mrs;
  /* Per NIC, by the domain index (0..31, as in mockefa_get_nic_info) of the endpoint that
   * posted the op: accepted transmit ops and their payload bytes. Transmit ops are send, senddata,
   * tsend, inject, write, writedata, inject_write (all variants) and read (counted at the
   * reader, whose NIC issues it). Counted when the post is accepted (returns 0), like
   * tx_posted, whether or not the op later completes in error; handshakes are not counted. */
  uint64_t nic_tx_bytes[32];
  uint64_t nic_tx_ops[32];
  uint64_t mr_registrations; /* successful fi_mr_reg/regv/regattr calls (a cache's misses) */
  uint64_t open_eqs;         /* gauge: event queues open right now (kept by reset, like open_*) */
  /* Gauge (kept by reset): CUDA registrations written by the NIC of their domain (an RMA write,
   * or a received message) with no RMA read of that registration through that NIC since. On a
   * real GPU, a read through a NIC is what orders that NIC's earlier PCIe writes before the GPU
   * reads the memory (the GPUDirect flush); a read through another NIC orders nothing of them. */
  uint64_t gpu_unflushed_mrs;
  /* Receiver not ready (RNR), EFA's cost of a message that finds nowhere to go: on efa-direct a
   * message with no receive posted at its target (the device NAKs and retries it), on efa one that
   * finds its target's unexpected queue full (MOCKEFA_UNEXPECTED_LIMIT messages). The message waits
   * on the wire for a back-off (MOCKEFA_RNR_DELAY_US, doubling per RNR of the same message, at most
   * 1 s) before it is tried again; on efa its sender's sends and RMA to that peer also return
   * -FI_EAGAIN until then. rnr_events counts every RNR, rnr_backoff_us the back-off imposed,
   * eagain_rnr the -FI_EAGAIN of a peer in back-off (also in eagain_returned). */
  uint64_t rnr_events;
  uint64_t rnr_backoff_us;
  uint64_t eagain_rnr;
};

/* Fault knobs, per endpoint. An endpoint takes its knobs when it is opened (fi_endpoint):
 * from mockefa_set_faults() if set, else from the MOCKEFA_* environment variables. */
#define MOCKEFA_NEVER UINT64_MAX
struct mockefa_faults {
  uint64_t eagain_every; /* MOCKEFA_EAGAIN_EVERY: every k-th post returns -FI_EAGAIN (0 = off) */
  uint64_t
      error_every; /* MOCKEFA_ERROR_EVERY: every k-th accepted op completes in error (0 = off) */
  int32_t error_prov_errno; /* MOCKEFA_ERROR_PROV_ERRNO: EFA code for those errors (default 12) */
  uint32_t cq_delay;        /* MOCKEFA_CQ_DELAY: each completion stays hidden for n CQ reads */
  uint32_t cq_reorder;      /* MOCKEFA_CQ_REORDER: 1 = CQ reads return ready entries shuffled */
  uint32_t wire_delay; /* MOCKEFA_WIRE_DELAY: an op waits n progress passes of the side that handles
                          it */
  uint32_t wire_reorder; /* MOCKEFA_WIRE_REORDER: 1 = wire ops and landing chunks in random order */
  uint32_t eagain_needs_poll; /* MOCKEFA_EAGAIN_NEEDS_POLL: 1 (default) = after an injected EAGAIN,
                                 posts keep failing until a CQ of the endpoint is read */
  uint64_t unreachable_after; /* MOCKEFA_UNREACHABLE_AFTER: after n tx ops every peer is unreachable
                                 (MOCKEFA_NEVER = off; 0 = from the first op) */
  uint64_t land_chunk; /* MOCKEFA_LAND_CHUNK: bytes landed per progress pass (0 = all at once) */
  uint64_t seed;       /* MOCKEFA_SEED: PRNG seed for reorder decisions */
  uint64_t
      eq_error_after; /* MOCKEFA_EQ_ERROR_AFTER: once the endpoint has accepted n tx ops, the
                         (n+1)-th raises an error that belongs to no operation, as EFA reports a
                         failed handshake: an error entry on the endpoint's EQ (none bound:
                         violation no_eq), and every op of the endpoint to that op's destination
                         fails with FI_EHOSTUNREACH, that op included (MOCKEFA_NEVER = off;
                         0 = on the first op). Once per endpoint (set_faults_all re-arms it) */
  uint32_t hold_send_completions; /* MOCKEFA_HOLD_SEND_COMPLETIONS: 1 = the completions of message
                         sends (not RMA) stay hidden while it is set: EFA reports a send only once
                         the peer acknowledged it, which may come after the peer acted on the
                         message. Clearing it (set_faults_all) releases them in order */
};

/* Facts about mock NIC i (0-based), the same the fi_info->nic of domain i carries. */
struct mockefa_nic_info {
  char domain_name[32]; /* "rdmap16s27-rdm" */
  char device_name[32]; /* "rdmap16s27" (nic->device_attr->name) */
  char pci_bus_id[16];  /* "0000:10:1b.0" (nic->bus_attr->attr.pci) */
  char pci_path[128];   /* "/sys/devices/pci0000:10/0000:10:1b.0"; prefix from MOCKEFA_SYSFS_ROOT */
  uint64_t link_speed;  /* bits per second (nic->link_attr->speed) */
};

/* nic->prov_attr of every fi_info from mockefa points to this (copied by fi_dupinfo). */
#define MOCKEFA_NIC_ATTR_MAGIC 0x6d6f636b65666131ull /* "mockefa1" */
struct mockefa_nic_attr {
  uint64_t magic;
  struct mockefa_nic_info info;
};

void mockefa_get_counters(struct mockefa_counters* out);
void mockefa_reset_counters(void);
const char* mockefa_violation_name(int kind); /* "no_desc", ...; NULL when out of range */
const char* mockefa_fault_name(int kind);
/* Text of the most recent violation ("" when none); returns the full length. */
size_t mockefa_last_violation(char* buf, size_t len);

/* Knobs for endpoints opened from now on; NULL goes back to the environment variables. */
void mockefa_set_faults(const struct mockefa_faults* faults);
/* As mockefa_set_faults, and also give every endpoint open now these knobs (their post and op
 * counters restart). NULL: endpoints open now get the environment's knobs. Returns how many. */
int mockefa_set_faults_all(const struct mockefa_faults* faults);
/* The knobs an endpoint opened now would get. */
void mockefa_get_faults(struct mockefa_faults* out);

/* Number of mock NICs (MOCKEFA_NDOMAINS, clamped to 1..32) and their facts. */
int mockefa_num_nics(void);
int mockefa_get_nic_info(int index, struct mockefa_nic_info* out); /* 0, or -1 if out of range */
/* The API version the most recently opened fabric was opened with: fi_fabric's attr->api_version,
 * which libfabric's core fills with the version the application gave fi_getinfo (the core copies it
 * into every returned fi_info's fabric_attr). 0 before any fabric was opened. EFA keys behaviour on
 * it (device RDMA defaults, FI_MR_DMABUF); so does the mock, per fabric. */
uint32_t mockefa_last_api_version(void);
/* An error completion with op_context NULL (err and prov_errno = err, flags, data, tag) into the
 * receive CQ of every endpoint open now, as EFA reports failures that belong to no operation.
 * Returns how many were written. */
int mockefa_inject_stray_error(int err, uint64_t flags, uint64_t data, uint64_t tag);

typedef void (*mockefa_get_counters_fn)(struct mockefa_counters*);
typedef void (*mockefa_reset_counters_fn)(void);
typedef const char* (*mockefa_name_fn)(int);
typedef size_t (*mockefa_last_violation_fn)(char*, size_t);
typedef void (*mockefa_set_faults_fn)(const struct mockefa_faults*);
typedef int (*mockefa_set_faults_all_fn)(const struct mockefa_faults*);
typedef void (*mockefa_get_faults_fn)(struct mockefa_faults*);
typedef int (*mockefa_num_nics_fn)(void);
typedef int (*mockefa_get_nic_info_fn)(int, struct mockefa_nic_info*);
typedef int (*mockefa_inject_stray_error_fn)(int, uint64_t, uint64_t, uint64_t);
typedef uint32_t (*mockefa_last_api_version_fn)(void);

struct mockefa_api {
  void* handle; /* dlclose() it when done */
  mockefa_get_counters_fn get_counters;
  mockefa_reset_counters_fn reset_counters;
  mockefa_name_fn violation_name;
  mockefa_name_fn fault_name;
  mockefa_last_violation_fn last_violation;
  mockefa_set_faults_fn set_faults;
  mockefa_set_faults_all_fn set_faults_all;
  mockefa_get_faults_fn get_faults;
  mockefa_num_nics_fn num_nics;
  mockefa_get_nic_info_fn get_nic_info;
  mockefa_inject_stray_error_fn inject_stray_error;
  mockefa_last_api_version_fn last_api_version; /* NULL with a provider older than this header */
};

/* Find the provider libfabric already loaded from `path` (e.g. getenv("NF_MOCKPROV_LIB")) and
 * fill `api`. Returns 0, or -1 if it is not loaded (call fi_getinfo first) or lacks a symbol. */
static inline int mockefa_load_api(const char* path, struct mockefa_api* api) {
  void* h;
  if (!path || !api) return -1;
  h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
  api->handle = h;
  api->get_counters = (mockefa_get_counters_fn)dlsym(h, "mockefa_get_counters");
  api->reset_counters = (mockefa_reset_counters_fn)dlsym(h, "mockefa_reset_counters");
  api->violation_name = (mockefa_name_fn)dlsym(h, "mockefa_violation_name");
  api->fault_name = (mockefa_name_fn)dlsym(h, "mockefa_fault_name");
  api->last_violation = (mockefa_last_violation_fn)dlsym(h, "mockefa_last_violation");
  api->set_faults = (mockefa_set_faults_fn)dlsym(h, "mockefa_set_faults");
  api->set_faults_all = (mockefa_set_faults_all_fn)dlsym(h, "mockefa_set_faults_all");
  api->get_faults = (mockefa_get_faults_fn)dlsym(h, "mockefa_get_faults");
  api->num_nics = (mockefa_num_nics_fn)dlsym(h, "mockefa_num_nics");
  api->get_nic_info = (mockefa_get_nic_info_fn)dlsym(h, "mockefa_get_nic_info");
  api->inject_stray_error = (mockefa_inject_stray_error_fn)dlsym(h, "mockefa_inject_stray_error");
  api->last_api_version = (mockefa_last_api_version_fn)dlsym(h, "mockefa_last_api_version");
  if (!api->get_counters || !api->reset_counters || !api->violation_name || !api->fault_name ||
      !api->last_violation || !api->set_faults || !api->set_faults_all || !api->get_faults ||
      !api->num_nics || !api->get_nic_info) {
    dlclose(h);
    api->handle = NULL;
    return -1;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* MOCKEFA_H */
