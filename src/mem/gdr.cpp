#include "mem/gdr.h"

#include <unistd.h>

#include <cstdio>

#include "fabric/errors.h"
#include "fabric/fi_compat.h"
#include "util/log.h"

namespace nf {
namespace {

constexpr size_t kProbeBytes = 2u << 20;  // one GPU large page

// A bare endpoint with CUDA calls forbidden, closed on scope exit.
struct ProbeEp {
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  ~ProbeEp() {
    if (ep != nullptr) fi_close(&ep->fid);
    if (av != nullptr) fi_close(&av->fid);
    if (cq != nullptr) fi_close(&cq->fid);
  }
  // "" when it opened with the option set, else why not.
  std::string open(Domain& dom) {
    fi_cq_attr cq_attr = {};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = 64;
    int rc = fi_cq_open(dom.domain(), &cq_attr, &cq, nullptr);
    if (rc != 0) return fi_error_text("fi_cq_open", rc);
    fi_av_attr av_attr = {};
    av_attr.type = FI_AV_TABLE;
    rc = fi_av_open(dom.domain(), &av_attr, &av, nullptr);
    if (rc != 0) return fi_error_text("fi_av_open", rc);
    rc = fi_endpoint(dom.domain(), const_cast<fi_info*>(dom.info()), &ep, nullptr);
    if (rc != 0) return fi_error_text("fi_endpoint", rc);
    bool permitted = false;
    rc =
        fi_setopt(&ep->fid, FI_OPT_ENDPOINT, kFiOptCudaApiPermitted, &permitted, sizeof(permitted));
    if (rc != 0) {
      std::string t = fi_error_text("fi_setopt(FI_OPT_CUDA_API_PERMITTED=false)", rc);
      if (rc == -FI_ENOPROTOOPT)
        return t + ": this libfabric/provider predates the option (libfabric 1.18+)";
      return t +
             ": the provider would need CUDA calls of its own (no peer-to-peer GPU access "
             "from this NIC: e.g. no GPUDirect RDMA support, FI_EFA_USE_DEVICE_RDMA=0, or the "
             "nvidia-peermem/dma-buf kernel support missing)";
    }
    rc = fi_ep_bind(ep, &av->fid, 0);
    if (rc == 0) rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0) rc = fi_enable(ep);
    if (rc != 0) return fi_error_text("fi_ep_bind/fi_enable", rc);
    return "";
  }
};

// The API version the NIC's fabric was opened at: EFA accepts FI_MR_DMABUF only from 1.20.
uint32_t nic_api_version(const Nic& nic, const Params& p) {
  if (p.get_bool(ParamId::kTestAssumeDmabuf)) return kFiDmabufVersion;
  return nic.api_version != 0 ? nic.api_version : fabric_api_version();
}

}  // namespace

GdrReport probe_gdr(const Nic& nic, Domain& dom, const Params& params) {
  GdrReport r;
  r.dmabuf_reason = "GPUDirect is off";
  const std::string& mode = params.get_str(ParamId::kGdr);
  if (mode == "off") {
    r.cuda_reason = "NCCL_FABRIC_GDR=off";
    return r;
  }
  Cuda& cuda = Cuda::get(params.get_str(ParamId::kCudaLibrary));
  if (!cuda.available()) {
    r.cuda_reason = cuda.why();
    return r;
  }
  if (!nic.hmem) {
    r.cuda_reason = "provider '" + nic.provider + "' on " + nic.domain +
                    " offers no FI_HMEM (libfabric or the provider was built without CUDA support)";
    return r;
  }
  if (params.get_bool(ParamId::kFlush) && !nic.rma_read) {
    r.cuda_reason = "provider '" + nic.provider +
                    "' offers no RMA reads for the GPUDirect flush "
                    "(NCCL_FABRIC_FLUSH=0 lifts this where the GPUs need no flush)";
    return r;
  }
  if (!cuda.has_current_context()) {
    r.cuda_reason =
        "no CUDA context is current on the thread that initialised the plugin, so "
        "no GPU memory could be probed";
    return r;
  }
  ProbeEp pe;
  std::string why = pe.open(dom);
  if (!why.empty()) {
    r.cuda_reason = why;
    return r;
  }
  uintptr_t p = 0;
  if (!ok(cuda.alloc(kProbeBytes, &p, &why))) {
    r.cuda_reason = why;
    return r;
  }
  PtrInfo pi;
  if (!ok(cuda.classify(reinterpret_cast<void*>(p), &pi)) || pi.kind != MemKind::kCudaDevice) {
    cuda.free(p);
    r.cuda_reason = "a cuMemAlloc allocation does not classify as device memory";
    return r;
  }
  MemSpec spec;
  spec.kind = MemKind::kCudaDevice;
  spec.device = pi.device;
  MemReg reg;
  if (!ok(register_memory_spec(dom, pe.ep, reinterpret_cast<void*>(p), kProbeBytes,
                               FI_REMOTE_WRITE | FI_REMOTE_READ, spec, &reg, &why))) {
    cuda.free(p);
    r.cuda_reason = why;
    return r;
  }
  deregister_memory(&reg);
  r.cuda = true;
  char buf[512];
  snprintf(buf, sizeof(buf),
           "provider '%s' registers GPU memory (FI_HMEM_CUDA, device %d) with "
           "CUDA calls forbidden to it; %s",
           nic.provider.c_str(), pi.device, cuda.why().c_str());
  r.cuda_reason = buf;

  // DMA-BUF.
  const uint32_t v = nic_api_version(nic, params);
  const int attr = cuda.device_attribute(pi.device, cu::kDevAttrDmaBufSupported);
  int fd = -1;
  if (params.get_str(ParamId::kDmabuf) == "off") {
    r.dmabuf_reason = "NCCL_FABRIC_DMABUF=off";
  } else if (v < kFiDmabufVersion) {
    snprintf(buf, sizeof(buf),
             "libfabric API %u.%u (loaded %u.%u, built against %u.%u) has no "
             "FI_MR_DMABUF (1.20+)",
             FI_MAJOR(v), FI_MINOR(v), FI_MAJOR(fi_version()), FI_MINOR(fi_version()),
             FI_MAJOR_VERSION, FI_MINOR_VERSION);
    r.dmabuf_reason = buf;
  } else if (attr != 1) {
    r.dmabuf_reason = "the GPU does not export DMA-BUFs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=" +
                      std::to_string(attr) + ")";
  } else if (!ok(cuda.dmabuf_fd(p, kProbeBytes, &fd, &why))) {
    r.dmabuf_reason = why;
  } else {
    spec.dmabuf_fd = fd;
    spec.dmabuf_offset = 0;
    if (ok(register_memory_spec(dom, pe.ep, reinterpret_cast<void*>(p), kProbeBytes,
                                FI_REMOTE_WRITE | FI_REMOTE_READ, spec, &reg, &why))) {
      deregister_memory(&reg);
      r.dmabuf = true;
      r.dmabuf_reason = "a DMA-BUF of GPU memory registers (FI_MR_DMABUF)";
    } else {
      r.dmabuf_reason = why;
    }
    close(fd);
  }
  cuda.free(p);
  dom.set_forbid_cuda(true);
  return r;
}

Status check_gpu_buffer(const Domain& dom, void* data, size_t size, int fd, uint64_t offset,
                        const char* who, PtrInfo* info, MemSpec* spec) {
  if (!dom.gdr()) {
    NF_WARN(
        "%s: GPU memory, but this device does not offer NCCL_PTR_CUDA (GPUDirect RDMA is "
        "off; the INFO line \"GPUDirect RDMA off\" at init says why)",
        who);
    return Status::kInternalError;
  }
  Cuda* cuda = Cuda::loaded();
  if (cuda == nullptr || !cuda->available()) {
    // GPUDirect is only on where the probe loaded the driver; this would be a plugin bug.
    NF_WARN("%s: GPU memory, but the CUDA driver is not loaded in this process", who);
    return Status::kInternalError;
  }
  NF_CHECK(cuda->classify(data, info));
  if (info->kind == MemKind::kHost) {
    NF_WARN("%s: %p is not CUDA memory, although NCCL passed NCCL_PTR_CUDA", who, data);
    return Status::kInvalidArgument;
  }
  if (info->kind == MemKind::kCudaManaged) {
    NF_WARN(
        "%s: %p is CUDA managed memory, which GPUDirect RDMA cannot register (its pages "
        "migrate); NCCL copies such buffers instead",
        who, data);
    return Status::kInvalidUsage;
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(data);
  if (info->alloc_size > 0 && (a + size > info->alloc_base + info->alloc_size || a + size < a)) {
    NF_WARN("%s: [%p, +%zu) runs past the end of its CUDA allocation (%zu bytes at 0x%lx)", who,
            data, size, info->alloc_size, static_cast<unsigned long>(info->alloc_base));
    return Status::kInvalidArgument;
  }
  if (fd >= 0) {
    if (!dom.gdr_dmabuf()) {
      NF_WARN(
          "%s: DMA-BUF registration is not offered on this device (no NCCL_PTR_DMABUF; "
          "the INFO line \"DMA-BUF off\" at init says why)",
          who);
      return Status::kInternalError;
    }
    spec->dmabuf_fd = fd;
    spec->dmabuf_offset = offset;
  }
  return Status::kOk;
}

}  // namespace nf
