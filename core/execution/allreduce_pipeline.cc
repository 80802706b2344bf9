#include "core/execution/allreduce_pipeline.h"

#include "core/device/device_queue.h"
#include "core/execution/scaling.h"
#include "ops/codec/codec.h"

namespace cerar {

RunStats runPipeline(PipelineMemory& memory, const std::vector<PipelinePart>& parts,
                     const PipelineJob& job, const PipelinePhase& phase) {
  const size_t bytes = job.total * dtypeSize(job.dtype);
  auto* buffer = static_cast<std::byte*>(job.direct ? job.direct : memory.buffer(bytes));
  memory.pack(parts, buffer, job);
  for (const PipelinePart& p : parts) {
    if (p.in == nullptr) memory.fillIdentity(job, buffer + p.offset * dtypeSize(job.dtype),
                                             p.elements);
  }
  if (phase) phase("pack");
  if (job.input) memory.toHost(job.input, buffer, bytes);
  const RunStats run = memory.reduce(buffer, job);
  if (job.result) memory.toHost(job.result, buffer, bytes);
  if (phase) phase("reduce");
  memory.unpack(parts, buffer, job);
  return run;
}

// The communicator's exact ring scales each slice as it finishes it, a fraction of the pass
// unpack would make; debug error mode compares the sum itself, and Adasum and the host-by-host
// path reduce without the communicator's postscale.
bool HostPipelineMemory::communicatorScales(const PipelineJob& job) const {
  return reducer_.options.algorithm != Algorithm::kAdasum && reducer_.hierarchy == nullptr &&
         job.factor != 1.0 && isFloatDType(job.dtype) && !job.input && !job.result;
}

std::byte* HostPipelineMemory::buffer(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

void HostPipelineMemory::pack(const std::vector<PipelinePart>& parts, std::byte* buffer,
                              const PipelineJob& job) {
  const size_t elementSize = dtypeSize(job.dtype);
  const bool check =
      reducer_.hierarchy == nullptr && testsCerarRange(reducer_.options, reducer_.ranks);
  auto copy = [&](const void* src, void* dst, size_t n) {
    if (check) {
      beyond_ |= scaledCopyChecked(job.dtype, src, dst, n, job.prescale, reducer_.ranks);
    } else {
      scaledCopy(job.dtype, src, dst, n, job.prescale);
    }
  };
  sizes_.clear();
  for (const PipelinePart& p : parts) {
    sizes_.push_back(p.elements);
    if (p.in == nullptr) continue;
    std::byte* at = buffer + p.offset * elementSize;
    if (p.inDevice >= 0) {  // a mixed unit: this rank's tensor is on its device
      devices_.get(p.inDevice).download(at, p.in, p.elements * elementSize, p.ready);
      copy(at, at, p.elements);
    } else {
      copy(p.in, at, p.elements);
    }
    // values = residual + values: the codec's vectorised in-place add
    if (p.residual != nullptr)
      codec::finishFirst(DType::kFloat32, ReduceOp::kSum, p.residual, at, p.elements);
  }
}

void HostPipelineMemory::fillIdentity(const PipelineJob& job, std::byte* at, size_t elements) {
  cerar::fillIdentity(job.dtype, job.op, at, elements);
}

void HostPipelineMemory::toHost(std::byte* host, const std::byte* buffer, size_t bytes) {
  std::copy(buffer, buffer + bytes, host);
}

RunStats HostPipelineMemory::reduce(std::byte* buffer, const PipelineJob& job) {
  if (reducer_.options.algorithm == Algorithm::kAdasum) {
    // Dot products and norms are per tensor of the group (docs/adasum.md).
    return reducer_.adasum->run(*reducer_.transport, buffer, job.dtype, sizes_);
  }
  AllreduceOptions options = reducer_.options;
  if (reducer_.hierarchy != nullptr) {
    return reducer_.hierarchy->allreduce(buffer, job.total, job.dtype, options);
  }
  options.lost = job.lost;
  // Tested while packing (the same rule): the communicator need not read the buffer again.
  if (testsCerarRange(options, reducer_.ranks)) options.beyondCerarRange = beyond_;
  if (communicatorScales(job)) options.postscale = job.factor;
  return reducer_.communicator->allreduce(buffer, job.total, job.dtype, options);
}

void HostPipelineMemory::unpack(const std::vector<PipelinePart>& parts, std::byte* buffer,
                                const PipelineJob& job) {
  const double factor = communicatorScales(job) ? 1.0 : job.factor;
  if (job.direct) {
    scaledCopy(job.dtype, buffer, buffer, job.total, factor);
    return;
  }
  const size_t elementSize = dtypeSize(job.dtype);
  for (const PipelinePart& p : parts) {
    if (p.in == nullptr) continue;
    std::byte* at = buffer + p.offset * elementSize;
    if (p.outDevice >= 0) {
      scaledCopy(job.dtype, at, at, p.elements, factor);
      devices_.get(p.outDevice).upload(p.out, at, p.elements * elementSize);
    } else {
      scaledCopy(job.dtype, at, p.out, p.elements, factor);
    }
  }
}

// One batched copy, then one scale kernel over the whole buffer (identity is filled after).
void DevicePipelineMemory::pack(const std::vector<PipelinePart>& parts, std::byte* buffer,
                                const PipelineJob& job) {
  const size_t elementSize = dtypeSize(job.dtype);
  std::vector<DeviceCopy> copies;
  for (const PipelinePart& p : parts) {
    std::byte* at = buffer + p.offset * elementSize;
    if (p.in != nullptr && p.in != at) copies.push_back({p.in, at, p.elements * elementSize});
  }
  ops_.copy(copies);
  if (job.prescale != 1.0) ops_.scale(job.dtype, buffer, job.total, job.prescale);
}

void DevicePipelineMemory::unpack(const std::vector<PipelinePart>& parts, std::byte* buffer,
                                  const PipelineJob& job) {
  if (job.factor != 1.0) ops_.scale(job.dtype, buffer, job.total, job.factor);
  const size_t elementSize = dtypeSize(job.dtype);
  std::vector<DeviceCopy> copies;
  for (const PipelinePart& p : parts) {
    std::byte* at = buffer + p.offset * elementSize;
    if (p.in != nullptr && p.out != at) copies.push_back({at, p.out, p.elements * elementSize});
  }
  ops_.copy(copies);
}

}  // namespace cerar
