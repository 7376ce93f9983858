// The channel over MPI (configure --with-mpi): a byte stream to the other rank made of
// MPI_Isend/MPI_Irecv chunks, every wait an MPI_Test loop bounded by its timeout.
#include "perf/channel_mpi.h"

#include <cstdlib>

#ifdef NF_HAVE_MPI
#include <mpi.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <list>
#include <thread>
#endif

namespace nfp {

std::string mpi_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"}) {
    const char* e = getenv(var);
    if (e != nullptr && e[0] != '\0') return std::string(var) + "=" + e;
  }
  return "";
}

#ifndef NF_HAVE_MPI

bool mpi_built() { return false; }

bool mpi_init(int* rank, int* size, std::string* err) {
  *rank = 0;
  *size = 0;
  *err = "this build has no MPI";
  return false;
}

void mpi_finalize() {}

std::unique_ptr<Link> mpi_link(int) { return nullptr; }

#else  // NF_HAVE_MPI

bool mpi_built() { return true; }

namespace {

constexpr int kTag = 0x4e46;          // "NF"; below MPI_TAG_UB's guaranteed 32767
constexpr size_t kChunk = 64 * 1024;  // the most one message carries; the receive is this big
MPI_Comm g_comm = MPI_COMM_NULL;

std::string mpi_error(const char* call, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len <= 0)
    return std::string(call) + " failed with error " + std::to_string(rc);
  return std::string(call) + ": " + std::string(text, static_cast<size_t>(len));
}

class MpiLink : public Link {
 public:
  explicit MpiLink(int peer) : peer_(peer), rbuf_(new char[kChunk]) { post_recv(); }
  ~MpiLink() override;
  MpiLink(const MpiLink&) = delete;
  MpiLink& operator=(const MpiLink&) = delete;

  bool send(const void* buf, size_t len, int timeout_ms) override;
  bool recv(void* buf, size_t len, int timeout_ms) override;

 private:
  struct Out {
    MPI_Request req = MPI_REQUEST_NULL;
    std::string data;  // our copy: the caller's buffer may go before MPI is done with it
  };

  void post_recv();
  // Tests the posted receive (keeping what it brought, and posting the next) and the sends in
  // flight. False once MPI has failed.
  bool progress();
  // Progresses until done() or timeout_ms pass; after the first millisecond it sleeps 50 us
  // between tests, so that a rank that waits leaves the CPU to the one that works.
  template <typename F>
  bool until(F done, int timeout_ms);

  int peer_;
  bool broken_ = false;
  std::unique_ptr<char[]> rbuf_;
  MPI_Request rreq_ = MPI_REQUEST_NULL;
  std::string in_;  // received, not yet read: in_[in_off_..]
  size_t in_off_ = 0;
  std::list<Out> out_;  // sends in flight (list: their buffers never move)
};

void MpiLink::post_recv() {
  if (broken_) return;
  const int rc =
      MPI_Irecv(rbuf_.get(), static_cast<int>(kChunk), MPI_BYTE, peer_, kTag, g_comm, &rreq_);
  if (rc != MPI_SUCCESS) {
    rreq_ = MPI_REQUEST_NULL;
    broken_ = true;
  }
}

bool MpiLink::progress() {
  if (broken_) return false;
  if (rreq_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Status st;
    if (MPI_Test(&rreq_, &done, &st) != MPI_SUCCESS) {
      broken_ = true;
      return false;
    }
    if (done) {
      int n = 0;
      if (MPI_Get_count(&st, MPI_BYTE, &n) != MPI_SUCCESS || n < 0) {
        broken_ = true;
        return false;
      }
      if (in_off_ == in_.size()) {
        in_.clear();
        in_off_ = 0;
      }
      in_.append(rbuf_.get(), static_cast<size_t>(n));
      post_recv();
    }
  }
  for (auto it = out_.begin(); it != out_.end();) {
    int done = 0;
    if (MPI_Test(&it->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      broken_ = true;
      return false;
    }
    it = done ? out_.erase(it) : std::next(it);
  }
  return !broken_;
}

template <typename F>
bool MpiLink::until(F done, int timeout_ms) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (!progress()) return false;
    if (done()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (now - start > std::chrono::milliseconds(1))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool MpiLink::send(const void* buf, size_t len, int timeout_ms) {
  if (broken_) return false;
  const char* p = static_cast<const char*>(buf);
  for (size_t off = 0; off < len;) {
    const size_t n = std::min(kChunk, len - off);
    out_.emplace_back();
    Out& o = out_.back();
    o.data.assign(p + off, n);
    if (MPI_Isend(&o.data[0], static_cast<int>(n), MPI_BYTE, peer_, kTag, g_comm, &o.req) !=
        MPI_SUCCESS) {
      out_.pop_back();
      broken_ = true;
      return false;
    }
    off += n;
  }
  // Like a socket's send, done when the data has left; meanwhile the receive goes on, so two
  // ranks sending at once never wait for each other.
  return until([this] { return out_.empty(); }, timeout_ms);
}

bool MpiLink::recv(void* buf, size_t len, int timeout_ms) {
  // Nothing is taken unless all len bytes are there: a timeout loses no data.
  if (!until([&] { return in_.size() - in_off_ >= len; }, timeout_ms)) return false;
  if (len > 0) memcpy(buf, in_.data() + in_off_, len);
  in_off_ += len;
  if (in_off_ == in_.size()) {
    in_.clear();
    in_off_ = 0;
  }
  return true;
}

MpiLink::~MpiLink() {
  // The last sends get a second to leave; the posted receive is cancelled, its completion
  // awaited as long. What MPI still holds after that (only after a failure) is left to it:
  // its buffers are never freed, MPI_Abort is not called, and nothing waits without bound.
  if (!broken_) until([this] { return out_.empty(); }, 1000);
  bool recv_done = rreq_ == MPI_REQUEST_NULL;
  if (!recv_done && !broken_ && MPI_Cancel(&rreq_) == MPI_SUCCESS) {
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    while (!recv_done && Clock::now() < deadline) {
      int done = 0;
      if (MPI_Test(&rreq_, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      recv_done = done != 0;
      if (!recv_done) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  if (!recv_done) {
    MPI_Request_free(&rreq_);
    static_cast<void>(rbuf_.release());  // MPI may still write there
  }
  if (!out_.empty()) {
    for (Out& o : out_)
      if (o.req != MPI_REQUEST_NULL) MPI_Request_free(&o.req);
    static_cast<void>(new std::list<Out>(std::move(out_)));  // MPI may still read them
  }
}

}  // namespace

bool mpi_init(int* rank, int* size, std::string* err) {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    *err = mpi_error("MPI_Init_thread", rc);
    return false;
  }
  // Errors come back as codes (and are reported as failures), rather than ending the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS ||
      (rc = MPI_Comm_size(MPI_COMM_WORLD, size)) != MPI_SUCCESS) {
    *err = mpi_error("MPI_Comm_rank/size", rc);
    return false;
  }
  // Our own communicator: nothing else in the process can match our messages.
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &g_comm)) != MPI_SUCCESS) {
    *err = mpi_error("MPI_Comm_dup", rc);
    return false;
  }
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
  return true;
}

void mpi_finalize() {
  if (g_comm != MPI_COMM_NULL) MPI_Comm_free(&g_comm);
  MPI_Finalize();
}

std::unique_ptr<Link> mpi_link(int peer) { return std::unique_ptr<Link>(new MpiLink(peer)); }

#endif  // NF_HAVE_MPI

}  // namespace nfp
