// The rendezvous store server's requests (the protocol of wire.h): each checked against the
// server's limits, answered, or parked until its keys exist. A request refused (malformed, past
// a limit) is answered with kError and the reason; the connection stays usable.
#include "rendezvous/store_server.h"
#include "common/error.h"

namespace cerar::store_server {

using namespace store_framing;

namespace {
// A key or value within its limit, named by the variable that sets it.
void checkSize(const char* what, size_t bytes, size_t limit, const char* variable) {
  if (bytes > limit) {
    throw InvalidArgumentError(detail::concat(what, " of ", bytes, " bytes exceeds the limit of ",
                                              limit, " (", variable, ")"));
  }
}
}  // namespace

void Session::handle() {
  try {
    ByteReader in = reader(body);
    const auto op = in.get<Op>();
    if (!authenticated) {
      authenticated = op == Op::kHello && sameSecret(in.str(), server.secret);
      if (!authenticated) return reply(ReplyStatus::kRejected, {}, Then::kClose);
      // The secret holds: whose job is it? A client of another job learns the store's.
      const std::string job = in.left() > 0 ? in.str() : std::string();
      if (!server.jobId.empty() && job != server.jobId) {
        authenticated = false;
        return reply(ReplyStatus::kForeignJob,
                     std::vector<char>(server.jobId.begin(), server.jobId.end()), Then::kClose);
      }
      helloTimer.cancel();
      return reply(ReplyStatus::kOk);
    }
    dispatch(op, in);
  } catch (const std::exception& e) {
    std::string text = e.what();
    reply(ReplyStatus::kError, std::vector<char>(text.begin(), text.end()));
  }
}

void Session::dispatch(Op op, ByteReader& in) {
  switch (op) {
    case Op::kSet:
      return set(in);
    case Op::kGet:
    case Op::kWait:
      return getOrWait(op, in);
    case Op::kAdd:
      return add(in);
    case Op::kCheck: {
      const std::vector<std::string> keys = in.strs();
      for (const auto& key : keys) checkKey(key);
      return reply(ReplyStatus::kOk, {static_cast<char>(server.has(keys) ? 1 : 0)});
    }
    case Op::kOnLoss:
      return leaveOnLoss(in);
    case Op::kGoodbye:
      onLoss.reset();
      return close();  // no reply: the client closes its side at once
    default:
      throw InvalidArgumentError("unknown request");
  }
}

void Session::set(ByteReader& in) {
  auto [key, value] = entryToKeep(in);
  {
    std::lock_guard<std::mutex> lock(server.mutex);
    server.data[key] = std::move(value);
  }
  reply(ReplyStatus::kOk);
  server.notify();
}

void Session::getOrWait(Op op, ByteReader& in) {
  const int64_t timeoutMs = in.get<int64_t>();
  std::vector<std::string> keys = in.strs();
  for (const auto& key : keys) checkKey(key);
  if (op == Op::kGet && keys.size() != 1) throw InvalidArgumentError("get needs one key");
  if (timeoutMs < 0) throw InvalidArgumentError("negative timeout");
  if (server.has(keys)) {
    return reply(ReplyStatus::kOk,
                 op == Op::kGet ? server.value(keys.at(0)) : std::vector<char>{});
  }
  server.park(shared_from_this(), std::move(keys), op == Op::kGet, timeoutMs);
  parked = true;
  readHeader();
}

void Session::add(ByteReader& in) {
  const std::string key = in.str();
  checkKey(key);
  const int64_t delta = in.get<int64_t>();
  int64_t now = 0;
  {
    std::lock_guard<std::mutex> lock(server.mutex);
    auto found = server.data.find(key);
    now = addCounter(found == server.data.end() ? 0 : parseCounter(found->second), delta);
    if (found == server.data.end()) charge(key.size() + 20);
    const std::string text = std::to_string(now);
    server.data[key].assign(text.begin(), text.end());
  }
  Writer result;
  result.put<int64_t>(now);
  reply(ReplyStatus::kOk, result.data);
  server.notify();
}

void Session::leaveOnLoss(ByteReader& in) {
  onLoss = entryToKeep(in);
  reply(ReplyStatus::kOk);
}

std::pair<std::string, std::vector<char>> Session::entryToKeep(ByteReader& in) {
  std::string key = in.str();
  std::vector<char> value = in.bytes<char>();
  checkKey(key);
  checkSize("value", value.size(), server.limits.maxValueBytes, "CERAR_STORE_MAX_VALUE_BYTES");
  charge(key.size() + value.size());
  return {std::move(key), std::move(value)};
}

void Session::checkKey(const std::string& key) const {
  checkSize("key", key.size(), server.limits.maxKeyBytes, "CERAR_STORE_MAX_KEY_BYTES");
}

void Session::charge(size_t bytes) {
  if (bytes > server.limits.connectionQuotaBytes - stored) {
    throw InvalidArgumentError(
        detail::concat("this connection's quota of ", server.limits.connectionQuotaBytes,
                       " bytes is spent (CERAR_STORE_CONNECTION_QUOTA_BYTES)"));
  }
  stored += bytes;
}

}  // namespace cerar::store_server
