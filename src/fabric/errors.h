// libfabric errors turned into text a user can act on.
#pragma once
#include <string>

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include "util/status.h"

namespace nf {

// "fi_tsend: Connection refused (-FI_ECONNREFUSED)": the call, the text and the symbolic code.
std::string fi_error_text(const char* call, int rc);

// The symbolic name of a libfabric error number (positive or negative), e.g. "FI_EAGAIN".
const char* fi_errno_name(int err);

// What a user can do about this error, or "" when there is nothing specific to say.
const char* fi_error_hint(int err);

// Logs a failed libfabric call once, with its text and a hint, and returns the matching status.
Status fi_fail(const char* call, int rc, const char* context);

// Text of an error completion: fi_strerror, the provider's own text (fi_cq_strerror) and
// prov_errno, as one line.
std::string cq_error_text(struct fid_cq* cq, const struct fi_cq_err_entry& e);

// Status for an error completion's err: the peer's fault, ours, or the user's.
Status status_for_cq_error(int err);
// Whether an error completion says the path to the peer is gone (reset, refused, unreachable,
// timed out, not connected, cancelled by the provider): every connection with that peer fails.
bool is_connection_error(int err, int prov_errno);

}  // namespace nf
