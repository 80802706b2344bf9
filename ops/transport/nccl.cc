#include "ops/transport/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#ifndef CERAR_NO_GLOO
#include <gloo/rendezvous/store.h>
#endif

#include "common/error.h"
#include "ops/transport/nccl_library.h"

namespace cerar {
namespace {

using Clock = std::chrono::steady_clock;

// NCCL is loaded at first use (ops/transport/nccl_library.h); a missing one fails here, clearly.
const NcclLibrary& nccl() { return ncclLibrary(); }

// One ncclGroupStart/End of buffered posts and the event recorded after it.
struct Group {
  cudaEvent_t event = nullptr;  // null until the group is enqueued
  ~Group() {
    if (event) cudaEventDestroy(event);
  }
};

struct Post {
  bool send;
  int peer;
  void* data;
  size_t bytes;
};

// Polls briefly, then sleeps a little: waits are short on a healthy ring, and a stuck one
// must not burn a core until its deadline.
void backoff(int& spins) {
  if (++spins < 1000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Polls a non-blocking communicator until it leaves ncclInProgress; returns its state.
ncclResult_t settle(ncclComm_t comm, ncclResult_t result, Clock::time_point deadline) {
  int spins = 0;
  while (result == ncclInProgress && Clock::now() < deadline) {
    backoff(spins);
    if (nccl().commGetAsyncError(comm, &result) != ncclSuccess) return ncclInternalError;
  }
  return result;
}

ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kUInt8: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  return op == ReduceOp::kMin ? ncclMin : op == ReduceOp::kMax ? ncclMax : ncclSum;
}

// One group of NCCL calls on `device`, settled against `timeout`: its result, ncclInProgress
// when it was not enqueued in time. `calls` returns its first failure.
ncclResult_t enqueueGroup(ncclComm_t comm, int device, std::chrono::milliseconds timeout,
                          const std::function<ncclResult_t()>& calls) {
  const auto deadline = Clock::now() + timeout;
  cudaSetDevice(device);
  ncclResult_t result = nccl().groupStart();
  if (result == ncclSuccess) result = calls();
  const ncclResult_t end = nccl().groupEnd();
  if (result == ncclSuccess || result == ncclInProgress) result = end;
  return settle(comm, result, deadline);
}

}  // namespace

struct NcclTransport::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<Post> unflushed;
  std::shared_ptr<Group> open = std::make_shared<Group>();  // the group being filled
  std::vector<std::deque<std::shared_ptr<Group>>> sends, recvs;  // per peer, oldest first
};

NcclId newNcclId() {
  ncclUniqueId id;
  const ncclResult_t result = nccl().getUniqueId(&id);
  if (result != ncclSuccess)
    throw Error(detail::concat("ncclGetUniqueId: ", nccl().getErrorString(result)));
  NcclId out;
  static_assert(sizeof(id) == sizeof(out));
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

NcclTransport::NcclTransport(std::unique_ptr<Impl> impl, int rank, int size, int device,
                             Duration timeout, bool streamOrdered)
    : impl_(std::move(impl)), rank_(rank), size_(size), device_(device), timeout_(timeout),
      streamOrdered_(streamOrdered) {
  impl_->sends.resize(size_);
  impl_->recvs.resize(size_);
}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);
  if (impl_->comm) {
    bool pending = !impl_->unflushed.empty();
    for (int peer = 0; peer < size_; ++peer)
      pending = pending || !impl_->sends[peer].empty() || !impl_->recvs[peer].empty();
    // Unwaited transfers may never complete (the peer may be gone): abort rather than hang.
    ncclResult_t state = ncclInProgress;
    if (!pending) state = settle(impl_->comm, nccl().commFinalize(impl_->comm),
                                 Clock::now() + timeout_);
    if (state == ncclSuccess) {
      nccl().commDestroy(impl_->comm);
    } else {
      nccl().commAbort(impl_->comm);
    }
  }
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

void* NcclTransport::stream() const { return impl_->stream; }

void NcclTransport::checkUsable(int peer, const char* op) {
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed = failure_;
  }
  if (!failed.empty()) {
    // A failure seen by waitEvent() on another thread: abort here, on the driving thread.
    std::lock_guard<std::mutex> lock(mutex_);
    if (impl_->comm) {
      nccl().commAbort(impl_->comm);
      impl_->comm = nullptr;
    }
    throw Error(detail::concat("rank ", rank_, ": NCCL transport unusable after an earlier "
                               "failure (", failed, "); cannot ", op, " rank ", peer));
  }
  CERAR_ENFORCE(peer >= 0 && peer < size_, "rank ", rank_, ": cannot ", op, " rank ", peer,
                " of ", size_);
}

void NcclTransport::fail(const std::string& what, bool timedOut, int peer) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = what;
    if (impl_->comm) {
      nccl().commAbort(impl_->comm);  // also unblocks whatever NCCL left on the stream
      impl_->comm = nullptr;
    }
  }
  if (timedOut) throw TimeoutError(what, peer);
  throw Error(what);
}

void NcclTransport::postSend(int peer, const void* data, size_t bytes) {
  checkUsable(peer, "send to");
  CERAR_ENFORCE(bytes > 0, "rank ", rank_, ": zero-byte send posted");
  impl_->unflushed.push_back({true, peer, const_cast<void*>(data), bytes});
  impl_->sends[peer].push_back(impl_->open);
}

void NcclTransport::postRecv(int peer, void* data, size_t bytes) {
  checkUsable(peer, "receive from");
  CERAR_ENFORCE(bytes > 0, "rank ", rank_, ": zero-byte receive posted");
  impl_->unflushed.push_back({false, peer, data, bytes});
  impl_->recvs[peer].push_back(impl_->open);
}

void NcclTransport::flush() {
  if (impl_->unflushed.empty()) return;
  const int peer = impl_->unflushed.front().peer;
  const ncclResult_t result = enqueueGroup(impl_->comm, device_, timeout_, [&] {
    ncclResult_t r = ncclSuccess;
    for (const Post& p : impl_->unflushed) {
      if (r != ncclSuccess && r != ncclInProgress) break;
      r = p.send ? nccl().send(p.data, p.bytes, ncclUint8, p.peer, impl_->comm, impl_->stream)
                 : nccl().recv(p.data, p.bytes, ncclUint8, p.peer, impl_->comm, impl_->stream);
    }
    return r;
  });
  impl_->unflushed.clear();
  if (result == ncclInProgress)
    fail(detail::concat("rank ", rank_, ": NCCL group with rank ", peer, " not enqueued after ",
                        timeout_.count(), " ms"), true, peer);
  if (result != ncclSuccess)
    fail(detail::concat("rank ", rank_, ": NCCL send/recv with rank ", peer, " failed: ",
                        nccl().getErrorString(result)), false, peer);
  auto group = std::move(impl_->open);
  impl_->open = std::make_shared<Group>();
  cudaError_t status = cudaEventCreateWithFlags(&group->event, cudaEventDisableTiming);
  if (status == cudaSuccess) status = cudaEventRecord(group->event, impl_->stream);
  if (status != cudaSuccess)
    fail(detail::concat("rank ", rank_, ": CUDA event after NCCL group: ",
                        cudaGetErrorString(status)), false, peer);
}

void NcclTransport::collective(const char* what, const std::function<int()>& calls) {
  checkUsable(0, what);
  flush();  // earlier posts keep their place on the stream
  const ncclResult_t result =
      enqueueGroup(impl_->comm, device_, timeout_, [&] { return ncclResult_t(calls()); });
  if (result == ncclInProgress)
    fail(detail::concat("rank ", rank_, ": NCCL ", what, " not enqueued after ",
                        timeout_.count(), " ms"), true, -1);
  if (result != ncclSuccess)
    fail(detail::concat("rank ", rank_, ": NCCL ", what, " failed: ",
                        nccl().getErrorString(result)), false, -1);
}

namespace {

// The slices' shape the two collectives below take: size equal ones of `slice` elements, the
// last with `rest` more, which start at byte `tail`.
struct SliceShape {
  size_t slice, rest, width, tail;
};

SliceShape shapeOf(const std::vector<size_t>& slices, int size, DType dtype) {
  CERAR_CHECK_ARGUMENT(int(slices.size()) == size && size > 0, "NCCL host level: ", size,
                       " ranks, ", slices.size(), " slices");
  const size_t slice = slices.front();
  for (int i = 0; i + 1 < size; ++i)
    CERAR_CHECK_ARGUMENT(slices[size_t(i)] == slice, "NCCL host level: unequal slices");
  CERAR_CHECK_ARGUMENT(slices.back() >= slice, "NCCL host level: a short last slice");
  const size_t width = dtypeSize(dtype);
  return {slice, slices.back() - slice, width, slice * size_t(size) * width};
}

}  // namespace

void NcclTransport::reduceScatter(void* data, const std::vector<size_t>& slices, DType dtype,
                                  ReduceOp op) {
  const auto [slice, rest, width, tail] = shapeOf(slices, size_, dtype);
  auto* bytes = static_cast<char*>(data);
  collective("reduce-scatter", [&] {
    ncclResult_t r = ncclSuccess;
    if (slice > 0)  // in place: this rank's slice is its receive buffer
      r = nccl().reduceScatter(bytes, bytes + size_t(rank_) * slice * width, slice,
                               ncclTypeOf(dtype), ncclOpOf(op), impl_->comm, impl_->stream);
    if (rest > 0 && (r == ncclSuccess || r == ncclInProgress))
      r = nccl().reduce(bytes + tail, bytes + tail, rest, ncclTypeOf(dtype), ncclOpOf(op),
                        size_ - 1, impl_->comm, impl_->stream);
    return int(r);
  });
}

void NcclTransport::allGather(void* data, const std::vector<size_t>& slices, DType dtype) {
  const auto [slice, rest, width, tail] = shapeOf(slices, size_, dtype);
  auto* bytes = static_cast<char*>(data);
  collective("all-gather", [&] {
    ncclResult_t r = ncclSuccess;
    if (slice > 0)
      r = nccl().allGather(bytes + size_t(rank_) * slice * width, bytes, slice,
                           ncclTypeOf(dtype), impl_->comm, impl_->stream);
    if (rest > 0 && (r == ncclSuccess || r == ncclInProgress))
      r = nccl().broadcast(bytes + tail, bytes + tail, rest, ncclTypeOf(dtype), size_ - 1,
                           impl_->comm, impl_->stream);
    return int(r);
  });
}

void NcclTransport::waitSend(int peer) { wait(true, peer); }
void NcclTransport::waitRecv(int peer) { wait(false, peer); }

void NcclTransport::wait(bool send, int peer) {
  const char* what = send ? "send to" : "receive from";
  checkUsable(peer, what);
  auto& queue = send ? impl_->sends[peer] : impl_->recvs[peer];
  CERAR_ENFORCE(!queue.empty(), "rank ", rank_, ": nothing pending to ", what, " rank ", peer);
  const std::shared_ptr<Group> group = queue.front();
  queue.pop_front();
  if (!group->event) flush();
  if (streamOrdered_) return;  // later work on the stream follows the group
  bool timedOut = false;
  const std::string why = poll(group->event, Clock::now() + timeout_, timedOut);
  if (!why.empty()) {
    fail(detail::concat("rank ", rank_, ": ", why, " waiting to ", what, " rank ", peer,
                        timedOut ? " (NCCL)" : ""), timedOut, peer);
  }
}

std::string NcclTransport::poll(void* event, Clock::time_point deadline, bool& timedOut) const {
  int spins = 0;
  for (;;) {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaSuccess) return "";
    if (status != cudaErrorNotReady)
      return detail::concat("CUDA error ", cudaGetErrorString(status));
    ncclResult_t async = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(mutex_);  // the communicator may be aborted meanwhile
      if (!impl_->comm) return "the communicator was aborted";
      nccl().commGetAsyncError(impl_->comm, &async);
    }
    if (async != ncclSuccess && async != ncclInProgress)
      return detail::concat("NCCL error ", nccl().getErrorString(async));
    if (Clock::now() >= deadline) {
      timedOut = true;
      return detail::concat("timed out after ", timeout_.count(), " ms");
    }
    backoff(spins);
  }
}

// Off the driving thread: records the failure (the driving thread aborts) and throws it.
bool NcclTransport::waitEvent(void* event, Duration timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty())
      throw Error(detail::concat("rank ", rank_, ": NCCL transport failed earlier (", failure_,
                                 ")"));
  }
  bool timedOut = false;
  const std::string why = poll(event, Clock::now() + timeout, timedOut);
  if (why.empty()) return true;
  const std::string what =
      detail::concat("rank ", rank_, ": ", why, " waiting for the device's NCCL transfers");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = what;
  }
  if (timedOut) throw TimeoutError(what, -1);
  throw Error(what);
}

std::unique_ptr<NcclTransport> connectNcclWithId(const NcclId& id, int rank, int size,
                                                 int device, const NcclOptions& options) {
  CERAR_ENFORCE(size >= 1 && rank >= 0 && rank < size, "connectNccl: rank ", rank,
                " is not in a group of ", size);
  CERAR_ENFORCE(options.timeout.count() > 0, "connectNccl: the timeout must be positive");
  auto fail = [&](const std::string& why) -> Error {
    return Error(detail::concat("rank ", rank, ": NCCL init of ", size, " ranks on device ",
                                device, " failed: ", why));
  };
  cudaError_t status = cudaSetDevice(device);
  if (status != cudaSuccess) throw fail(cudaGetErrorString(status));
  auto impl = std::make_unique<NcclTransport::Impl>();
  status = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
  if (status != cudaSuccess) throw fail(cudaGetErrorString(status));
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof uid);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init must not hang on a missing peer: poll it against the deadline
  ncclResult_t result = nccl().commInitRankConfig(&impl->comm, size, uid, rank, &config);
  if (impl->comm) result = settle(impl->comm, result, Clock::now() + options.timeout);
  if (result != ncclSuccess) {
    if (impl->comm) nccl().commAbort(impl->comm);
    cudaStreamDestroy(impl->stream);
    throw fail(result == ncclInProgress
                   ? detail::concat("timed out after ", options.timeout.count(), " ms")
                   : std::string(nccl().getErrorString(result)));
  }
  return std::make_unique<NcclTransport>(std::move(impl), rank, size, device, options.timeout,
                                         options.streamOrdered);
}

#ifndef CERAR_NO_GLOO
std::unique_ptr<NcclTransport> connectNccl(gloo::rendezvous::Store& store, int rank, int size,
                                           int device, const NcclOptions& options) {
  const std::string key = options.prefix + "/id";
  NcclId id;
  try {
    if (rank == 0) {
      id = newNcclId();
      store.set(key, std::vector<char>(id.begin(), id.end()));
    } else {
      store.wait({key}, options.timeout);
      const std::vector<char> bytes = store.get(key);
      CERAR_ENFORCE(bytes.size() == id.size(), "the id under '", key, "' has ", bytes.size(),
                    " bytes, expected ", id.size());
      std::memcpy(id.data(), bytes.data(), id.size());
    }
  } catch (const std::exception& e) {
    throw Error(detail::concat("rank ", rank, ": sharing the NCCL id (key '", key,
                               "') failed: ", e.what()));
  }
  return connectNcclWithId(id, rank, size, device, options);
}
#endif

}  // namespace cerar
