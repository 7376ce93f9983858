// Events for NCCL's profiler (net ABI v10+ hands the plugin a callback at init and a handle per
// isend/irecv; docs/profiler.md has the layout a profiler plugin reads).
//
// Per request: an event from the request's post to the moment test() reports it; per provider
// operation of the request (a tagged send or receive, an RDMA write with its rail, an eager send,
// a clear-to-send): an event from its post to its completion; and marks (an event started and
// stopped at once) for what has no operation of ours: an eager message copied into a receive, a
// buffer whose writes all landed. A send that waited for the receiver's clear-to-send has an event
// for the wait.
//
// Cost when nobody profiles: NCCL hands us its callback whether or not a profiler plugin is
// loaded, and its handles are never NULL, so the plugin asks: the first request's start event
// comes back without a handle when no profiler collects our events. From then on, a request costs
// one decrement and one predictable branch (take_request), and the plugin asks again every
// kProfRecheck requests (a profiler may start collecting later).
#pragma once
#include <cstdint>

namespace nf {

struct Comm;
struct Request;

// pluginId: NCCL's convention, a type in the bits above 16 and the descriptor's version below.
constexpr int64_t kProfType = 0x4e46;  // "NF"
constexpr int64_t kProfVersion = 1;
constexpr int64_t kProfPluginId = (kProfType << 16) | kProfVersion;
constexpr uint32_t kProfRecheck = 4096;

// NCCL's event kinds (ncclProfilerNetEventStart ...).
constexpr int kProfStart = 0;
constexpr int kProfStop = 1;

// extData of every event: nfProfilerNetFabricDescr_v1 in docs/profiler.md (24 bytes).
struct ProfDescr {
  uint8_t type;   // kProfReq, kProfOp, kProfCtsWait, kProfEagerDelivered, kProfDataLanded
  uint8_t op;     // kProfOp: kOpTaggedSend ... ; kProfReq: 1 send, 2 recv
  uint8_t proto;  // 0 SENDRECV, 1 RDMA
  uint8_t rail;   // RDMA writes: the rail; else 0
  uint32_t comm;  // the comm's id (the peer's data carries it)
  uint64_t bytes;
  uint32_t index;  // kProfOp: the operation's index in its request; marks: the buffer's
  int32_t tag;     // NCCL's tag where known, else -1
};
static_assert(sizeof(ProfDescr) == 24, "docs/profiler.md: 24 bytes");

enum : uint8_t {
  kProfReq = 1,
  kProfOp = 2,
  kProfCtsWait = 3,
  kProfEagerDelivered = 4,
  kProfDataLanded = 5
};
enum : uint8_t { kOpTaggedSend = 1, kOpTaggedRecv = 2, kOpWrite = 3, kOpEagerSend = 4, kOpCts = 5 };

// NCCL's callback, opaque to core: api/ supplies the call that casts fn back to its type.
using ProfCall = int (*)(void* fn, void** ehandle, int type, void* phandle, int64_t plugin_id,
                         void* ext);
struct ProfHook {
  void* fn = nullptr;
  ProfCall call = nullptr;
};

// What a request being profiled keeps (one per request slot of the comm, made on first use).
struct ProfReq {
  void* phandle = nullptr;
  void* req_eh = nullptr;
  ProfDescr req{};
  void* op_eh[8] = {};  // kMaxGroup
  ProfDescr op[8]{};
};

// take_request, for a send or a receive: r->prof set (and the request's event started) when a
// profiler collects our events.
void prof_take(Comm& c, Request* r);
// Operation idx of r was posted / is over.
void prof_op_start(Request* r, int idx);
void prof_op_stop(Request* r, int idx);
// A mark on r (type kProfEagerDelivered or kProfDataLanded) for buffer idx of `bytes`.
void prof_mark(Request* r, uint8_t type, int idx, uint64_t bytes);
// r is reported to NCCL or dropped: its open events stop.
void prof_finish(Request* r);
// A send waits for the receiver's clear-to-send (start) / waits no longer (stop).
void prof_wait_start(Comm& c, uint64_t bytes, int tag);
void prof_wait_stop(Comm& c);

}  // namespace nf
