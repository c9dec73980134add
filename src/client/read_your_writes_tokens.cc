#include "src/client/read_your_writes_tokens.h"

#include <algorithm>

namespace exposure_filter {

void ReadYourWritesTokens::Record(absl::string_view user_id, int32_t partition,
                                  int64_t offset) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(user_id);
  if (it != users_.end()) {
    it->second.offset = std::max(it->second.offset, offset);
    it->second.partition = partition;
    return;
  }
  if (users_.size() >= max_users_) {
    // Fold: every user keeps its guarantee through its partition's floor.
    for (const auto& [user, token] : users_) {
      int64_t& floor =
          floors_.try_emplace(token.partition, token.offset).first->second;
      floor = std::max(floor, token.offset);
    }
    users_.clear();
  }
  users_.emplace(std::string(user_id), Token{partition, offset});
}

std::optional<int64_t> ReadYourWritesTokens::Lookup(absl::string_view user_id,
                                                    int32_t partition) const {
  absl::MutexLock lock(&mu_);
  std::optional<int64_t> out;
  if (auto it = users_.find(user_id);
      it != users_.end() && it->second.partition == partition) {
    out = it->second.offset;
  }
  if (auto it = floors_.find(partition); it != floors_.end()) {
    out = std::max(out.value_or(it->second), it->second);
  }
  return out;
}

size_t ReadYourWritesTokens::users() const {
  absl::MutexLock lock(&mu_);
  return users_.size();
}

}  // namespace exposure_filter
