// The RDMA protocol (docs/protocol.md, "RDMA protocol"): every irecv sends the sender a
// clear-to-send (CTS) naming its buffers, keys and a completion slot; the sender writes the payload
// straight into them with fi_writedata, striped over the rails, and the 4-byte immediate data of
// each write tells the receiver which buffer and how many pieces to count. Small messages the
// sender has no CTS for yet go at once into the receiver's bounce buffers (eager).
// Everything here runs under SharedEp::mu, like the rest of the data path.
#pragma once
#include "proto/sendrecv.h"

namespace nf {

// After the handshake chose RDMA: allocates and registers the comm's protocol buffers and posts
// its persistent receives (CTS buffers on a send comm, eager bounce buffers on a recv comm).
// Under sep->mu.
Status rdma_setup(Comm& c);

Status rdma_isend(Comm& c, void* data, size_t size, int tag, MemHandle* mh, Request** out);
Status rdma_irecv(Comm& c, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle* const* mhs, Request** out);

// Completion dispatch (comm_progress).
void rdma_on_persistent(Request* r, const fi_cq_tagged_entry& e);  // eager bounce or CTS buffer
void rdma_on_persistent_error(Request* r);
void rdma_on_cts_sent(Request* r);              // a receive's CTS send
void rdma_on_cts_failed(Request* r, Status s);  // ... failed
void rdma_fail_recv(Request* r, Status s);      // a pending receive fails: it stops taking writes
void rdma_on_write(SharedEp& sep, const fi_cq_tagged_entry& e);  // a peer's write landed
// A peer's write failed to land (an error completion with its immediate data): fails the receive
// it names. False when it names none.
bool rdma_on_write_error(SharedEp& sep, const CqError& err);
// Posts what an RDMA send still owes (writes after -FI_EAGAIN); the persistent receives that
// could not be reposted.
Status rdma_post_writes(Comm& c, Request* r);
void rdma_retry_reposts(Comm& c);
// Close: frees the completion slots of receives still posted.
void rdma_close(Comm& c);

}  // namespace nf
