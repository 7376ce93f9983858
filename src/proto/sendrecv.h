// The SENDRECV protocol: one NCCL message = one tagged message (fi_tsend / fi_trecv).
// Each comm owns one RDM endpoint with its own completion queue, so a comm is driven by one thread
// at a time and its data path needs no lock. docs/architecture.md says why and what it costs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "proto/wire.h"
#include "util/params.h"
#include "util/pool.h"
#include "util/status.h"

namespace nf {

constexpr int kMaxGroup = 8;          // largest grouped receive
constexpr int kMaxRequests = 32;      // NCCL_NET_MAX_REQUESTS
constexpr uint32_t kReqMagic = 0x52514e46u;
constexpr uint32_t kCommMagic = 0x434d4e46u;
constexpr uint32_t kMrMagic = 0x524d4e46u;

struct Request;
struct Comm;
struct MemHandle;

// What the provider gets as the context of each operation: the fi_context2 it may use comes first,
// then where the completion belongs.
struct OpCtx {
  fi_context2 fi;
  Request* req;
  uint32_t index;
};

enum class ReqType : uint8_t { kSend, kRecv, kCtrlSend, kCtrlRecv };
enum class ReqState : uint8_t { kFree, kPending, kDone, kError };

struct Request {
  uint32_t magic;           // kReqMagic while it belongs to the caller
  ReqType type;
  ReqState state;
  bool abandoned;           // failed and reported; returns to the pool once nothing is in flight
  uint8_t n;                // operations in this request (grouped receive: up to kMaxGroup)
  uint8_t posted;           // operations handed to the provider so far
  uint8_t in_flight;        // posted and not completed
  Status error;
  Comm* comm;
  Request* next_deferred;   // grouped receives whose operations are not all posted yet
  size_t sizes[kMaxGroup];  // bytes received per buffer (or sent)
  void* bufs[kMaxGroup];
  size_t caps[kMaxGroup];
  void* descs[kMaxGroup];
  MemHandle* mhs[kMaxGroup];  // counted while an operation on them is in flight
  uint64_t tags[kMaxGroup];
  OpCtx ops[kMaxGroup];
};

enum class CommRole : uint8_t { kListen, kSend, kRecv };

// A registration handed to NCCL as mhandle.
struct MemHandle {
  uint32_t magic;
  Comm* comm;
  MemReg reg;
  // Operations posted on it and not completed. deregMr runs on NCCL's service thread while the
  // progress thread posts and completes, so this is the one thing they share.
  std::atomic<int> uses{0};
};

struct Comm {
  uint32_t magic = kCommMagic;
  CommRole role;
  std::unique_ptr<Endpoint> ep;
  Pool<Request> pool;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::string peer_name;        // printable peer address, for messages
  Params params;                // the creating context's snapshot: accept has no context
  int max_recvs;
  int cq_batch;
  bool use_inject;
  size_t inject_size;
  uint64_t max_msg_size;
  Request* deferred_head = nullptr;
  Request* deferred_tail = nullptr;
  Status failed = Status::kOk;  // sticky: the endpoint itself failed
  int errors_logged = 0;        // the first failure of a comm is a WARN, later ones INFO
  // Registrations NCCL released while operations still used them (teardown after an abort):
  // closed only after the endpoint, which drops those operations first. Service thread only.
  std::vector<MemReg> retired_mrs;

  // Handshake state (connect and accept), and the registered buffer its messages live in.
  struct Ctrl {
    ConnectMsg connect;
    uint8_t connect_slack[64];  // a longer message lands here and is refused, not truncated
    AckMsg ack;
    uint8_t ack_slack[64];
  };
  std::unique_ptr<Ctrl> ctrl;
  MemReg ctrl_reg;
  WireHandle handle{};          // connect: the decoded handle; listen: what we published
  uint64_t nonce = 0;
  uint64_t started_ns = 0;
  int stage = 0;
  Request* ctrl_send = nullptr;
  Request* ctrl_recv = nullptr;
  bool accepted = false;        // listen: it has produced its one recv comm

  Comm(CommRole r, std::unique_ptr<Endpoint> e, size_t pool_size, const Params& p);
  ~Comm();
};

// Makes a comm for `role` on a new endpoint of `dom`, with its handshake buffer registered.
Status comm_create(CommRole role, std::shared_ptr<Domain> dom, const Params& params,
                   std::unique_ptr<Comm>* out);

// Reads completions and dispatches them; posts what grouped receives still owe.
Status comm_progress(Comm& c);

Status sr_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out);
Status sr_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                MemHandle* const* mhs, Request** out);
Status sr_test(Request* r, int* done, int* sizes);

Status sr_reg_mr(Comm& c, void* data, size_t size, MemHandle** out);
Status sr_dereg_mr(Comm& c, MemHandle* mh);

// Posts one control message (handshake) and reports the request to poll.
Status ctrl_post(Comm& c, bool send, void* buf, size_t len, uint64_t tag, Request** out);
void request_release(Request* r);


}  // namespace nf
