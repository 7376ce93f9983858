// A protocol, as core (comms, progress, test, registration, close) sees it: one table per
// protocol (kSendRecvProtocol in proto/sendrecv.cpp, kRdmaProtocol in proto/rdma.cpp), chosen in
// the handshake and hung off the comm (Comm::protocol), so core never asks which protocol it runs
// and includes nothing of proto/. A protocol's own state hangs off the comm (Comm::pstate) and
// the endpoint (SharedEp::writer_state). Everything here runs under SharedEp::mu. Adding a
// protocol: a table like these, a bit in the handshake's offer (wire/wire.h) and a case in
// protocol_for().
#pragma once
#include <cstddef>
#include <cstdint>

#include "fabric/fabric.h"
#include "util/status.h"

namespace nf {

struct Comm;
struct Request;
struct MemHandle;
struct SharedEp;
struct CtrlRx;
struct CtrlHdr;

struct Protocol {
  const char* name;  // for the log: "SENDRECV", "RDMA"
  // After the handshake chose it: the comm's own buffers and persistent receives.
  Status (*setup)(Comm& c);
  // NCCL's isend and irecv (core/api.cpp checked the comm and the arguments). A NULL *out with
  // kOk: the provider pushed back, NCCL calls again.
  Status (*isend)(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out);
  Status (*irecv)(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle* const* mhs, Request** out);
  // A receive request's own provider operation completed, or failed with `s`: true when the
  // protocol dealt with it (RDMA: that operation is the receive's clear-to-send, the data comes
  // by writes), false for the generic handling (SENDRECV: it is the data).
  bool (*recv_op_done)(Request* r);
  bool (*recv_op_failed)(Request* r, Status s);
  // A pending receive fails (its comm failed while NCCL tested it).
  void (*fail_recv)(Request* r, Status s);
  // Posts what a deferred send or receive still owes (after -FI_EAGAIN part way).
  Status (*post_send)(Comm& c, Request* r);
  Status (*post_recv)(Comm& c, Request* r);
  // A control message for the established comm (core/ctrl.h: a clear-to-send, eager message or
  // notice): true when the protocol keeps the buffer (it gives it back with ctrl_release).
  // nullptr: the protocol takes none (they are dropped).
  bool (*on_ctrl)(Comm& c, const CtrlHdr& h, CtrlRx* rx);
  // Whether an isend NCCL keeps retrying is waiting for the peer (close counts it as pending).
  bool (*send_waiting)(const Comm& c);
  // What a pending send or receive waits for, in words (the stall report, the statistics file).
  const char* (*waiting_for)(const Request& r);
  // A peer's write landed on the endpoint (remote CQ data), or failed to (false: it names
  // nothing of ours). Called on SharedEp::writer, the protocol that set itself there.
  void (*on_write)(SharedEp& sep, const fi_cq_tagged_entry& e);
  bool (*on_write_error)(SharedEp& sep, const CqError& err);
  // After every progress of the comm: what the protocol left to retry.
  void (*tail)(Comm& c);
  // Close: posted receives stop taking data (their completion slots are freed).
  void (*close)(Comm& c);
  // Registrations are made on every rail of the connection, and on the receive side are open to
  // the peer's writes (FI_REMOTE_WRITE).
  bool writes;
  // Close cancels a pending receive's posted operations (false: a receive's one operation is a
  // send, its clear-to-send, which cannot be cancelled).
  bool cancel_recvs;
};

extern const Protocol kSendRecvProtocol;
extern const Protocol kRdmaProtocol;
// The table of a negotiated protocol (kProtoSendRecv or kProtoRdma, wire.h).
const Protocol& protocol_for(uint8_t proto);

}  // namespace nf
