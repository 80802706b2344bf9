#include "ops/transport/inproc.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace cerar {

namespace {

// One posted transfer; `done` flips when the bytes have moved.
struct Transfer {
  const void* from = nullptr;
  void* to = nullptr;
  size_t bytes = 0;
  bool done = false;
  std::string error;  // set when the two ends disagree on the size
};

// The transfers in flight from one rank to another, matched in posting order.
struct Channel {
  std::deque<std::shared_ptr<Transfer>> sends;  // posted, not yet matched
  std::deque<std::shared_ptr<Transfer>> recvs;
};

}  // namespace

struct InprocHub::State {
  int size;
  Transport::Duration timeout;
  std::mutex mutex;
  std::condition_variable moved;
  std::map<uint32_t, std::vector<Channel>> channels;  // [tag][from * size + to]
  std::vector<bool> dead;

  Channel& channel(uint32_t tag, int from, int to) {
    std::vector<Channel>& all = channels[tag];
    if (all.empty()) all.resize(size_t(size) * size);
    return all[from * size + to];
  }

  // Moves bytes for every matched pair at the heads of the channel; called with the lock held.
  void match(Channel& ch) {
    while (!ch.sends.empty() && !ch.recvs.empty()) {
      auto send = ch.sends.front();
      auto recv = ch.recvs.front();
      ch.sends.pop_front();
      ch.recvs.pop_front();
      if (send->bytes != recv->bytes) {
        const std::string what = detail::concat("size mismatch: ", send->bytes,
                                                " bytes sent, ", recv->bytes, " bytes expected");
        send->error = what;
        recv->error = what;
      } else {
        std::memcpy(recv->to, send->from, send->bytes);
      }
      send->done = recv->done = true;
    }
    moved.notify_all();
  }
};

namespace {

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocHub::State> state, int rank, uint32_t tag = 0)
      : state_(std::move(state)), rank_(rank), tag_(tag), pendingSends_(state_->size),
        pendingRecvs_(state_->size) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }
  Duration timeout() const override { return state_->timeout; }
  // Transfers of another tag are matched apart, as Gloo's slots are.
  std::shared_ptr<Transport> channel(uint32_t tag) override {
    return std::make_shared<InprocTransport>(state_, rank_, tag);
  }

  void postSend(int peer, const void* data, size_t bytes) override {
    auto transfer = post(peer, bytes, "send");
    transfer->from = data;
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->dead[rank_]) return;  // a dead rank's data never leaves
    state_->channel(tag_, rank_, peer).sends.push_back(transfer);
    pendingSends_[peer].push_back(transfer);
    state_->match(state_->channel(tag_, rank_, peer));
  }

  void postRecv(int peer, void* data, size_t bytes) override {
    auto transfer = post(peer, bytes, "receive");
    transfer->to = data;
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->dead[rank_]) return;
    state_->channel(tag_, peer, rank_).recvs.push_back(transfer);
    pendingRecvs_[peer].push_back(transfer);
    state_->match(state_->channel(tag_, peer, rank_));
  }

  void waitSend(int peer) override { wait(pendingSends_, peer, "send to"); }
  void waitRecv(int peer) override { wait(pendingRecvs_, peer, "receive from"); }

 private:
  std::shared_ptr<Transfer> post(int peer, size_t bytes, const char* what) {
    CERAR_ENFORCE(peer >= 0 && peer < size() && peer != rank_, "rank ", rank_, ": cannot ",
                  what, " rank ", peer);
    CERAR_ENFORCE(bytes > 0, "rank ", rank_, ": zero-byte ", what, " posted");
    auto transfer = std::make_shared<Transfer>();
    transfer->bytes = bytes;
    return transfer;
  }

  void wait(std::vector<std::deque<std::shared_ptr<Transfer>>>& pending, int peer,
            const char* what) {
    CERAR_ENFORCE(peer >= 0 && peer < size() && !pending[peer].empty(), "rank ", rank_,
                  ": nothing pending to ", what, " rank ", peer);
    auto transfer = pending[peer].front();
    pending[peer].pop_front();
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->moved.wait_for(lock, state_->timeout, [&] { return transfer->done; })) {
      throw TimeoutError(detail::concat("rank ", rank_, ": timed out after ",
                                        state_->timeout.count(), " ms waiting to ", what,
                                        " rank ", peer, " (", transfer->bytes, " bytes)"),
                         peer);
    }
    if (!transfer->error.empty())
      throw MismatchError(detail::concat("rank ", rank_, ": ", what, " rank ", peer, ": ",
                                         transfer->error),
                          peer);
  }

  std::shared_ptr<InprocHub::State> state_;
  int rank_;
  uint32_t tag_;
  std::vector<std::deque<std::shared_ptr<Transfer>>> pendingSends_;
  std::vector<std::deque<std::shared_ptr<Transfer>>> pendingRecvs_;
};

}  // namespace

InprocHub::InprocHub(int size, Transport::Duration timeout) : state_(std::make_shared<State>()) {
  CERAR_ENFORCE(size >= 1, "in-process group size must be >= 1, got ", size);
  state_->size = size;
  state_->timeout = timeout;
  state_->dead.assign(size, false);
}

InprocHub::~InprocHub() = default;

int InprocHub::size() const { return state_->size; }

std::unique_ptr<Transport> InprocHub::connect(int rank) {
  CERAR_ENFORCE(rank >= 0 && rank < state_->size, "rank ", rank, " out of range for size ",
                state_->size);
  return std::make_unique<InprocTransport>(state_, rank);
}

void InprocHub::kill(int rank) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->dead[rank] = true;
  // Whatever the dead rank had posted is lost.
  for (auto& [tag, channels] : state_->channels) {
    for (int peer = 0; peer < state_->size; ++peer) {
      channels[rank * state_->size + peer].sends.clear();
      channels[peer * state_->size + rank].recvs.clear();
    }
  }
}

}  // namespace cerar
