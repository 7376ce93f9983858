// A protocol, as the generic code of comms, progress, test, registration and close sees it: one
// table per protocol (kSendRecvProtocol in sendrecv.cpp, kRdmaProtocol in rdma.cpp), chosen in the
// handshake and hung off the comm (Comm::protocol), so the generic code never asks which protocol
// it runs. A protocol's own state hangs off the comm (Comm::rdma) and the endpoint. Everything
// here runs under SharedEp::mu. Adding a protocol: a table like these, a bit in the handshake's
// offer (wire.h) and a case in protocol_for().
#pragma once
#include <cstddef>
#include <cstdint>

#include "util/status.h"

namespace nf {

struct Comm;
struct Request;
struct MemHandle;

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
  // Posts what a deferred send still owes (after -FI_EAGAIN).
  Status (*post_send)(Comm& c, Request* r);
  // After every progress of the comm: what the protocol left to retry.
  void (*tail)(Comm& c);
  // Close: posted receives stop taking data (their completion slots are freed).
  void (*close)(Comm& c);
  // Registrations are made on every rail of the connection, and on the receive side are open to
  // the peer's writes (FI_REMOTE_WRITE).
  bool writes;
};

extern const Protocol kSendRecvProtocol;
extern const Protocol kRdmaProtocol;
// The table of a negotiated protocol (kProtoSendRecv or kProtoRdma, wire.h).
const Protocol& protocol_for(uint8_t proto);

}  // namespace nf
