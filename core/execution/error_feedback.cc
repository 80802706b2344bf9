#include "core/execution/error_feedback.h"

namespace cerar {

const float* ErrorFeedback::residual(const std::string& key, const std::vector<int64_t>& shape) {
  auto it = residuals_.find(key);
  if (it == residuals_.end()) return nullptr;
  if (it->second.shape != shape) {
    residuals_.erase(it);
    return nullptr;
  }
  return it->second.values.data();
}

void ErrorFeedback::keep(const std::vector<Part>& parts, const float* lost) {
  for (const Part& part : parts) {
    if (lost == nullptr) {
      residuals_.erase(part.key);
      continue;
    }
    Residual& r = residuals_[part.key];
    r.shape = part.shape;
    r.values.assign(lost + part.offset, lost + part.offset + part.elements);
  }
}

}  // namespace cerar
