#include "client/raw_fabric.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include "client/oob.h"

namespace nfc {
namespace {

static_assert(std::is_standard_layout<RawOp>::value,
              "RawOp must be standard-layout: completions map &ctx back to the RawOp");

// The endpoint name never gets near this; a bound keeps a confused peer from making us allocate.
constexpr uint64_t kMaxAddrLen = 4096;

RawOp* op_of(void* context) { return reinterpret_cast<RawOp*>(context); }

}  // namespace

std::string fi_error(const char* call, long rc) {
  const int e = static_cast<int>(rc < 0 ? -rc : rc);
  return std::string(call) + ": " + fi_strerror(e) + " (-" + std::to_string(e) + ")";
}

uint32_t raw_api_version() {
  const uint32_t built = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  const uint32_t lib = fi_version();
  return lib < built ? lib : built;
}

RawFabric::~RawFabric() { close_all(); }

void RawFabric::close_all() {
  // The endpoint first (it cancels what is in flight), then what was bound to it or the domain.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  ep_ = nullptr;
  for (auto& m : mrs_)
    if (m->mr != nullptr) fi_close(&m->mr->fid);
  mrs_.clear();
  if (av_ != nullptr) fi_close(&av_->fid);
  av_ = nullptr;
  if (cq_ != nullptr) fi_close(&cq_->fid);
  cq_ = nullptr;
  if (domain_ != nullptr) fi_close(&domain_->fid);
  domain_ = nullptr;
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  fabric_ = nullptr;
  if (info_ != nullptr) fi_freeinfo(info_);
  info_ = nullptr;
  peer_ = FI_ADDR_UNSPEC;
}

bool RawFabric::open(const RawConfig& cfg, std::string* err) {
  close_all();
  provider_ = cfg.provider;
  use_inject_ = cfg.use_inject;

  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) {
    *err = "fi_allocinfo: out of memory";
    return false;
  }
  hints->caps = FI_TAGGED;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation carries an fi_context2
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(cfg.provider.c_str());

  fi_info* list = nullptr;
  int rc = fi_getinfo(raw_api_version(), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0) {
    *err = fi_error(("fi_getinfo(provider '" + cfg.provider + "', RDM, tagged)").c_str(), rc);
    return false;
  }
  const fi_info* chosen = nullptr;
  for (const fi_info* i = list; i != nullptr; i = i->next) {
    if (i->fabric_attr->prov_name == nullptr || cfg.provider != i->fabric_attr->prov_name) continue;
    const char* dn = i->domain_attr->name != nullptr ? i->domain_attr->name : "";
    if (!cfg.domain.empty() && cfg.domain != dn) continue;
    chosen = i;
    break;
  }
  if (chosen == nullptr) {
    fi_freeinfo(list);
    *err = "fi_getinfo: provider '" + cfg.provider + "' has no RDM tagged endpoint" +
           (cfg.domain.empty() ? std::string() : " on domain '" + cfg.domain + "'");
    return false;
  }
  info_ = fi_dupinfo(chosen);
  fi_freeinfo(list);
  if (info_ == nullptr) {
    *err = "fi_dupinfo: out of memory";
    return false;
  }
  if ((info_->mode & ~static_cast<uint64_t>(FI_CONTEXT | FI_CONTEXT2)) != 0) {
    char mode[32];
    snprintf(mode, sizeof(mode), "0x%llx", static_cast<unsigned long long>(info_->mode));
    *err = "provider '" + provider_ + "' asks for mode bits this client does not honour (" + mode +
           ")";
    close_all();
    return false;
  }
  domain_name_ = info_->domain_attr->name != nullptr ? info_->domain_attr->name : "";
  mr_mode_ = static_cast<uint64_t>(info_->domain_attr->mr_mode);
  inject_size_ = info_->tx_attr->inject_size;
  max_msg_size_ = info_->ep_attr->max_msg_size;

  const std::string where = " (" + provider_ + ", domain " + domain_name_ + ")";
  auto fail = [&](const char* call, int r) {
    *err = fi_error(call, r) + where;
    close_all();
    return false;
  };
  if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return fail("fi_domain", rc);

  fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = cfg.cq_size;
  cq_attr.wait_obj = FI_WAIT_NONE;
  if ((rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr)) != 0) return fail("fi_cq_open", rc);

  fi_av_attr av_attr = {};
  av_attr.type = FI_AV_TABLE;  // FI_AV_MAP is deprecated in libfabric 2.x
  av_attr.count = 4;
  if ((rc = fi_av_open(domain_, &av_attr, &av_, nullptr)) != 0) return fail("fi_av_open", rc);

  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return fail("fi_ep_bind(av)", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0)
    return fail("fi_ep_bind(cq)", rc);
  if ((rc = fi_enable(ep_)) != 0) return fail("fi_enable", rc);
  return true;
}

bool RawFabric::connect_peer(Oob& oob, int timeout_ms, std::string* err) {
  if (ep_ == nullptr) {
    *err = "connect_peer: endpoint not open";
    return false;
  }
  std::vector<uint8_t> mine(256);
  size_t len = mine.size();
  int rc = fi_getname(&ep_->fid, mine.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    mine.resize(len);
    rc = fi_getname(&ep_->fid, mine.data(), &len);
  }
  if (rc != 0) {
    *err = fi_error("fi_getname", rc);
    return false;
  }
  const uint64_t my_len = len;
  uint64_t peer_len = 0;
  if (!oob.send(&my_len, sizeof(my_len), timeout_ms) || !oob.send(mine.data(), len, timeout_ms) ||
      !oob.recv(&peer_len, sizeof(peer_len), timeout_ms)) {
    *err = "address exchange with the peer failed (out-of-band channel closed or timed out)";
    return false;
  }
  if (peer_len == 0 || peer_len > kMaxAddrLen) {
    *err = "peer sent an endpoint name of " + std::to_string(peer_len) + " bytes";
    return false;
  }
  std::vector<uint8_t> theirs(static_cast<size_t>(peer_len));
  if (!oob.recv(theirs.data(), theirs.size(), timeout_ms)) {
    *err = "address exchange with the peer failed (out-of-band channel closed or timed out)";
    return false;
  }
  rc = fi_av_insert(av_, theirs.data(), 1, &peer_, 0, nullptr);
  if (rc != 1) {
    *err = fi_error("fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
    return false;
  }
  return true;
}

const RawMr* RawFabric::reg(void* buf, size_t len, std::string* err) {
  std::unique_ptr<RawMr> m(new RawMr());
  m->base = buf;
  m->len = len;
  if ((mr_mode_ & FI_MR_LOCAL) != 0 && len > 0) {
    const uint64_t key = (mr_mode_ & FI_MR_PROV_KEY) != 0 ? 0 : next_key_++;
    int rc = fi_mr_reg(domain_, buf, len, FI_SEND | FI_RECV, 0, key, 0, &m->mr, nullptr);
    if (rc != 0) {
      *err = fi_error("fi_mr_reg", rc) + " (" + std::to_string(len) + " bytes)";
      return nullptr;
    }
    if ((mr_mode_ & FI_MR_ENDPOINT) != 0) {
      rc = fi_mr_bind(m->mr, &ep_->fid, 0);
      if (rc == 0) rc = fi_mr_enable(m->mr);
      if (rc != 0) {
        fi_close(&m->mr->fid);
        *err = fi_error("fi_mr_bind/fi_mr_enable", rc);
        return nullptr;
      }
    }
    m->desc = fi_mr_desc(m->mr);
  }
  mrs_.push_back(std::move(m));
  return mrs_.back().get();
}

void RawFabric::dereg(const RawMr* mr) {
  for (auto it = mrs_.begin(); it != mrs_.end(); ++it) {
    if (it->get() != mr) continue;
    if ((*it)->mr != nullptr) fi_close(&(*it)->mr->fid);
    mrs_.erase(it);
    return;
  }
}

RawFabric::Post RawFabric::send(const void* buf, size_t len, const RawMr* mr, uint64_t tag,
                                RawOp* op, std::string* err) {
  if (len > max_msg_size_) {
    *err = "send of " + std::to_string(len) + " bytes exceeds the provider's largest message (" +
           std::to_string(max_msg_size_) + ")";
    return Post::kError;
  }
  op->reset();
  ssize_t rc;
  const bool inject = use_inject_ && len <= inject_size_;
  if (inject) {
    rc = fi_tinject(ep_, buf, len, peer_, tag);
    if (rc == 0) {
      op->done = true;  // copied out; no completion will come
      op->len = len;
      return Post::kPosted;
    }
  } else {
    op->posted = true;
    rc = fi_tsend(ep_, buf, len, mr != nullptr ? mr->desc : nullptr, peer_, tag, &op->ctx);
    if (rc == 0) {
      op->len = len;
      return Post::kPosted;
    }
    op->posted = false;
  }
  if (rc == -FI_EAGAIN) return progress(err) ? Post::kAgain : Post::kError;
  *err = fi_error(inject ? "fi_tinject" : "fi_tsend", rc);
  return Post::kError;
}

RawFabric::Post RawFabric::recv(void* buf, size_t cap, const RawMr* mr, uint64_t tag, RawOp* op,
                                std::string* err) {
  op->reset();
  op->posted = true;
  ssize_t rc =
      fi_trecv(ep_, buf, cap, mr != nullptr ? mr->desc : nullptr, FI_ADDR_UNSPEC, tag, 0, &op->ctx);
  if (rc == 0) return Post::kPosted;
  op->posted = false;
  if (rc == -FI_EAGAIN) return progress(err) ? Post::kAgain : Post::kError;
  *err = fi_error("fi_trecv", rc);
  return Post::kError;
}

bool RawFabric::progress(std::string* err) {
  fi_cq_tagged_entry entries[32];
  for (;;) {
    ssize_t n = fi_cq_read(cq_, entries, 32);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (entries[i].op_context == nullptr) continue;
        RawOp* op = op_of(entries[i].op_context);
        // A send's len is not defined by libfabric; keep what send() recorded.
        if (entries[i].flags & FI_RECV) op->len = entries[i].len;
        op->posted = false;
        op->done = true;
      }
      if (n < 32) return true;
      continue;
    }
    if (n == -FI_EAGAIN) return true;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry e = {};
      ssize_t r = fi_cq_readerr(cq_, &e, 0);
      if (r == -FI_EAGAIN) return true;
      if (r < 0) {
        *err = fi_error("fi_cq_readerr", r);
        return false;
      }
      const char* text = fi_cq_strerror(cq_, e.prov_errno, e.err_data, nullptr, 0);
      op_error_ = fi_error(e.flags & FI_RECV ? "receive completion" : "send completion",
                           e.err != 0 ? e.err : FI_EOTHER);
      if (text != nullptr && text[0] != '\0') op_error_ += std::string("; provider: ") + text;
      if (e.err == FI_ETRUNC) op_error_ += "; " + std::to_string(e.olen) + " bytes did not fit";
      if (e.op_context == nullptr) {
        *err = op_error_;
        return false;
      }
      RawOp* op = op_of(e.op_context);
      op->posted = false;
      op->done = true;
      op->err = e.err != 0 ? e.err : FI_EOTHER;
      continue;
    }
    *err = fi_error("fi_cq_read", n);
    return false;
  }
}

bool RawFabric::wait(RawOp* op, int timeout_ms, std::string* err) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (unsigned spin = 0; !op->done; ++spin) {
    if (!progress(err)) return false;
    if ((spin & 255) == 255 && std::chrono::steady_clock::now() > deadline) {
      *err = "operation did not complete within " + std::to_string(timeout_ms) + " ms";
      return false;
    }
  }
  if (op->err != 0) {
    *err = op_error_;
    return false;
  }
  return true;
}

}  // namespace nfc
