// ExposureFilterHandlers' freshness checks of the reads:
// min_offsets validation, the lag gate (and allow_lagging past it),
// read-your-writes offsets, and the staleness an answer reports
// (serving_readiness.h; docs/scale-out.md "Consistency").
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/server/exposure_filter_handlers.h"

namespace exposure_filter {
namespace {

// The entries in partition order: protobuf maps iterate in no fixed order,
// and an error must name the same entry every time.
std::vector<std::pair<int32_t, int64_t>> Sorted(
    const google::protobuf::Map<int32_t, int64_t>& m) {
  std::vector<std::pair<int32_t, int64_t>> out(m.begin(), m.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::Status ExposureFilterHandlers::ValidateMinOffsets(
    const MinOffsets& min_offsets) const {
  if (min_offsets.empty()) return absl::OkStatus();
  if (readiness_ == nullptr) {
    // Not replicated: writes are applied by the replica that acknowledges
    // them, before it answers, so every read here already sees them; a
    // client sending offsets is configured for another deployment.
    return absl::FailedPreconditionError(
        "min_offsets: read-your-writes offsets are for a replicated "
        "deployment (--replication_factor >= 2, writes through Kafka); this "
        "server applies each write before acknowledging it, so its reads "
        "see every acknowledged write: send no min_offsets");
  }
  const int32_t partitions = ownership_->ownership().options().partitions;
  for (const auto& [partition, offset] : Sorted(min_offsets)) {
    if (partition < 0 || partition >= partitions) {
      return absl::InvalidArgumentError(
          absl::StrCat("min_offsets: partition ", partition,
                       " does not exist (--partitions=", partitions, ": 0 to ",
                       partitions - 1, ")"));
    }
    if (offset < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("min_offsets[", partition, "]: offset ", offset,
                       " is negative (Kafka offsets start at 0)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::CheckFresh(
    GatedRead read, absl::string_view user_id, const MinOffsets& min_offsets,
    bool allow_lagging, ReadAdmission* admission) const {
  if (readiness_ == nullptr) return absl::OkStatus();
  // Replicated implies partitioned: R >= 2 owners need as many replicas,
  // and replicas need --partitions.
  const int32_t user_partition =
      ownership_ == nullptr ? -1
                            : ownership_->ownership().PartitionOfUser(user_id);
  if (min_offsets.empty()) {
    return readiness_->Admit(read, user_partition, allow_lagging, admission);
  }
  const std::vector<std::pair<int32_t, int64_t>> wanted = Sorted(min_offsets);
  // A partition of another replica: this copy cannot tell whether the write
  // is applied, and the client routed by a different layout.
  for (const auto& [partition, offset] : wanted) {
    if (absl::Status s = ownership_->CheckPartition(
            absl::StrCat("min_offsets[", partition, "]"), partition);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          readiness_->Admit(read, user_partition, allow_lagging, admission);
      !s.ok()) {
    return s;
  }
  // allow_lagging relaxes the lag gate only: a write the read must see is
  // either applied here or the read is refused, lagging or not.
  for (const auto& [partition, offset] : wanted) {
    if (absl::Status s = readiness_->CheckApplied(read, partition, offset);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

void ExposureFilterHandlers::FillStaleness(
    GatedRead read, const ReadAdmission& admission,
    exposure::v1::ReadStaleness* staleness) const {
  staleness->set_lag_ms(absl::ToInt64Milliseconds(admission.lag));
  staleness->set_partition(admission.partition);
  staleness->set_lagging(admission.lagging);
  readiness_->CountLaggingAnswer(read, admission);
}

}  // namespace exposure_filter
