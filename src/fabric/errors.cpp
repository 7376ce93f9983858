#include "fabric/errors.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <rdma/fi_errno.h>

#include "util/log.h"

namespace nf {

const char* fi_errno_name(int err) {
  if (err < 0) err = -err;
  switch (err) {
    case FI_EPERM: return "FI_EPERM";
    case FI_ENOENT: return "FI_ENOENT";
    case FI_EINTR: return "FI_EINTR";
    case FI_EIO: return "FI_EIO";
    case FI_E2BIG: return "FI_E2BIG";
    case FI_EBADF: return "FI_EBADF";
    case FI_EAGAIN: return "FI_EAGAIN";
    case FI_ENOMEM: return "FI_ENOMEM";
    case FI_EACCES: return "FI_EACCES";
    case FI_EFAULT: return "FI_EFAULT";
    case FI_EBUSY: return "FI_EBUSY";
    case FI_ENODEV: return "FI_ENODEV";
    case FI_EINVAL: return "FI_EINVAL";
    case FI_EMFILE: return "FI_EMFILE";
    case FI_ENOSPC: return "FI_ENOSPC";
    case FI_ENOSYS: return "FI_ENOSYS";
    case FI_ENODATA: return "FI_ENODATA";
    case FI_EOVERFLOW: return "FI_EOVERFLOW";
    case FI_EMSGSIZE: return "FI_EMSGSIZE";
    case FI_ENOPROTOOPT: return "FI_ENOPROTOOPT";
    case FI_EOPNOTSUPP: return "FI_EOPNOTSUPP";
    case FI_EADDRINUSE: return "FI_EADDRINUSE";
    case FI_EADDRNOTAVAIL: return "FI_EADDRNOTAVAIL";
    case FI_ENETDOWN: return "FI_ENETDOWN";
    case FI_ENETUNREACH: return "FI_ENETUNREACH";
    case FI_ECONNABORTED: return "FI_ECONNABORTED";
    case FI_ECONNRESET: return "FI_ECONNRESET";
    case FI_ENOBUFS: return "FI_ENOBUFS";
    case FI_EISCONN: return "FI_EISCONN";
    case FI_ENOTCONN: return "FI_ENOTCONN";
    case FI_ESHUTDOWN: return "FI_ESHUTDOWN";
    case FI_ETIMEDOUT: return "FI_ETIMEDOUT";
    case FI_ECONNREFUSED: return "FI_ECONNREFUSED";
    case FI_EHOSTDOWN: return "FI_EHOSTDOWN";
    case FI_EHOSTUNREACH: return "FI_EHOSTUNREACH";
    case FI_EALREADY: return "FI_EALREADY";
    case FI_EINPROGRESS: return "FI_EINPROGRESS";
    case FI_ECANCELED: return "FI_ECANCELED";
    case FI_EKEYREJECTED: return "FI_EKEYREJECTED";
    case FI_EOTHER: return "FI_EOTHER";
    case FI_ETOOSMALL: return "FI_ETOOSMALL";
    case FI_EOPBADSTATE: return "FI_EOPBADSTATE";
    case FI_EAVAIL: return "FI_EAVAIL";
    case FI_EBADFLAGS: return "FI_EBADFLAGS";
    case FI_ENOEQ: return "FI_ENOEQ";
    case FI_EDOMAIN: return "FI_EDOMAIN";
    case FI_ENOCQ: return "FI_ENOCQ";
    case FI_ECRC: return "FI_ECRC";
    case FI_ETRUNC: return "FI_ETRUNC";
    case FI_ENOKEY: return "FI_ENOKEY";
    case FI_ENOAV: return "FI_ENOAV";
    case FI_EOVERRUN: return "FI_EOVERRUN";
#ifdef FI_EREMOTEIO
    case FI_EREMOTEIO: return "FI_EREMOTEIO";
#endif
    default: return "FI_E?";
  }
}

const char* fi_error_hint(int err) {
  if (err < 0) err = -err;
  switch (err) {
    case FI_ENODATA:
      return "the provider offers no endpoint matching what the plugin needs; run fi_info -t "
             "FI_EP_RDM to see what is there, or set NCCL_FABRIC_PROVIDER";
    case FI_ENOMEM:
    case FI_ENOSPC:
      return "out of memory or NIC resources; check ulimit -l (locked memory must be unlimited "
             "for RDMA) and how many communicators the job opens";
    case FI_EACCES:
    case FI_EPERM:
      return "permission denied; in containers, check that the device files are mounted and "
             "that locked memory is unlimited";
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ETIMEDOUT:
    case FI_EHOSTDOWN:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_ENETDOWN:
      return "the peer cannot be reached or went away; check that it is alive and, on EFA, that "
             "the security group allows all traffic to and from itself";
    case FI_ETRUNC: return "a message was larger than the buffer posted for it";
    case FI_ENOSYS:
    case FI_EOPNOTSUPP: return "the provider does not support this operation";
    default: return "";
  }
}

std::string fi_error_text(const char* call, int rc) {
  char buf[512];
  snprintf(buf, sizeof(buf), "%s: %s (-%s)", call, fi_strerror(rc < 0 ? -rc : rc),
           fi_errno_name(rc));
  return buf;
}

Status fi_fail(const char* call, int rc, const char* context) {
  const char* hint = fi_error_hint(rc);
  NF_WARN("%s%s%s%s%s", context ? context : "", context ? ": " : "",
          fi_error_text(call, rc).c_str(), hint[0] ? "; " : "", hint);
  const int e = rc < 0 ? -rc : rc;
  if (e == FI_EINVAL || e == FI_EMSGSIZE) return Status::kInternalError;
  return Status::kSystemError;
}

std::string cq_error_text(struct fid_cq* cq, const struct fi_cq_err_entry& e) {
  char prov[256] = "";
  const char* ptext =
      cq != nullptr ? fi_cq_strerror(cq, e.prov_errno, e.err_data, prov, sizeof(prov)) : nullptr;
  char buf[768];
  snprintf(buf, sizeof(buf), "%s (%s), provider error %d: %s", fi_strerror(e.err),
           fi_errno_name(e.err), e.prov_errno, ptext ? ptext : "(no text)");
  return buf;
}

Status status_for_cq_error(int err) {
  if (err < 0) err = -err;
  switch (err) {
    case FI_ETRUNC: return Status::kInvalidUsage;
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_EHOSTDOWN:
    case FI_ESHUTDOWN:
    case FI_ENOTCONN:
    case FI_ETIMEDOUT:
    case FI_ENETDOWN: return Status::kRemoteError;
    default: return Status::kSystemError;
  }
}

bool is_connection_error(int err, int prov_errno) {
  if (err < 0) err = -err;
  if (status_for_cq_error(err) == Status::kRemoteError) return true;
  // Providers that report FI_EIO/FI_EOTHER with the socket's errno underneath (tcp, rxm).
  if (prov_errno < 0) prov_errno = -prov_errno;
  switch (prov_errno) {
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN: return err == FI_EIO || err == FI_EOTHER || err == FI_ECANCELED;
    default: return false;
  }
}

}  // namespace nf
