// The debugging RPCs of ExposureFilterHandlers: Explain and the
// traced-user admin calls. The data-path RPCs are in
// exposure_filter_handlers.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure_filter/item_hash.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/request_validation.h"

namespace exposure_filter {
namespace {

using exposure::v1::ItemExplanation;

void SetRange(const FilterPolicy& policy, int64_t slice_index,
              exposure::v1::TimeRange* out) {
  out->set_start_ms(policy.SliceStartMs(slice_index));
  out->set_end_ms(policy.SliceEndMs(slice_index));
}

// Why the item is filtered. A filtered item without a trace record is a
// proven false positive only if every exposure that could have set its bits
// was traced: an exposure lands in slice S with an event time >= S's start
// and is recorded no earlier than its (clamped) event time, so tracing that
// began strictly before S's start saw every write into S. Dropped entries
// (per-user cap) void the proof.
ItemExplanation::Verdict VerdictFor(const std::vector<int64_t>& claiming,
                                    const FilterPolicy& policy,
                                    const TraceLookup* trace,
                                    const std::vector<int64_t>* times) {
  if (claiming.empty()) return ItemExplanation::KEPT;
  if (trace == nullptr) return ItemExplanation::FILTERED_UNVERIFIED;
  if (!times->empty()) return ItemExplanation::FILTERED_RECORDED;
  if (trace->entries_dropped > 0) return ItemExplanation::FILTERED_UNVERIFIED;
  for (int64_t index : claiming) {
    if (trace->traced_since_ms >= policy.SliceStartMs(index)) {
      return ItemExplanation::FILTERED_UNVERIFIED;
    }
  }
  return ItemExplanation::FILTERED_FALSE_POSITIVE;
}

}  // namespace

absl::Status ExposureFilterHandlers::Explain(
    const exposure::v1::ExplainRequest& req,
    exposure::v1::ExplainResponse* resp) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateExplain(req, limits_); !s.ok()) return s;
  if (absl::Status s = ValidateMinOffsets(req.min_offsets()); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckOwner("user_id", req.user_id()); !s.ok()) return s;
  ReadAdmission admission;
  if (absl::Status s =
          CheckFresh(GatedRead::kExplain, req.user_id(), req.min_offsets(),
                     req.allow_lagging(), &admission);
      !s.ok()) {
    return s;
  }
  const int64_t now = store_->clock().NowMs();
  const Surface* surface = surfaces_->Find(req.surface());
  const FilterPolicy& policy =
      surface ? surface->policy : surfaces_->PolicyFor(req.surface());
  const size_t num_ids = req.item_ids_size();
  const size_t n = num_ids + req.item_keys_size();

  std::optional<UserExplanation> filter;
  if (surface != nullptr) {
    std::vector<uint64_t> hashes;
    hashes.reserve(n);
    for (uint64_t id : req.item_ids()) hashes.push_back(HashItemId(id));
    for (const std::string& key : req.item_keys()) {
      hashes.push_back(HashItemKey(key));
    }
    filter = store_->Explain(*surface, req.user_id(), hashes);
  }
  std::vector<absl::string_view> keys(req.item_keys().begin(),
                                      req.item_keys().end());
  TraceLookup trace;
  const bool traced = trace_log_->Lookup(
      req.surface(), req.user_id(),
      absl::MakeConstSpan(req.item_ids().data(), req.item_ids_size()), keys,
      now, &trace);

  resp->set_user_exists(filter.has_value());
  resp->set_traced(traced);
  if (traced) {
    resp->set_traced_since_ms(trace.traced_since_ms);
    resp->set_trace_entries_dropped(trace.entries_dropped);
  }
  if (filter.has_value()) {
    resp->set_estimated_fp_rate(filter->stats.estimated_fp_rate);
    for (const SliceStats& ss : filter->stats.slice_stats) {
      exposure::v1::TimeRange* r = resp->add_live_slices();
      r->set_start_ms(ss.start_ms);
      r->set_end_ms(ss.end_ms);
    }
  }
  static const std::vector<int64_t> kNone;
  for (size_t i = 0; i < n; ++i) {
    ItemExplanation* item = resp->add_items();
    if (i < num_ids) {
      item->set_item_id(req.item_ids(i));
    } else {
      item->set_item_key(req.item_keys(i - num_ids));
    }
    const std::vector<int64_t>& claiming =
        filter.has_value() ? filter->claiming_slices[i] : kNone;
    const std::vector<int64_t>* times =
        traced ? &trace.exposure_times_ms[i] : nullptr;
    item->set_filtered(!claiming.empty());
    item->set_verdict(
        VerdictFor(claiming, policy, traced ? &trace : nullptr, times));
    for (int64_t index : claiming)
      SetRange(policy, index, item->add_claimed_by());
    if (times != nullptr) {
      for (int64_t t : *times) item->add_recorded_exposures_ms(t);
    }
  }
  ReportStaleness(GatedRead::kExplain, admission, resp);
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::CheckTracedOwners(
    const google::protobuf::RepeatedPtrField<std::string>& user_ids) const {
  // Like RecordExposure: the first foreign user rejects the whole list.
  for (int i = 0; i < user_ids.size(); ++i) {
    if (absl::Status s =
            CheckOwner(absl::StrCat("user_ids[", i, "]"), user_ids[i]);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ExposureFilterHandlers::AddTracedUsers(
    const exposure::v1::AddTracedUsersRequest& req,
    exposure::v1::AddTracedUsersResponse* resp) {
  // Not while recovery replaces the trace.
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateTracedUserIds(req.user_ids(), limits_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTracedOwners(req.user_ids()); !s.ok()) return s;
  // With R >= 2 the change goes through the log (TraceUsersThroughLog).
  if (ownership_ != nullptr) {
    if (absl::Status s = ownership_->CheckDirectWrite("AddTracedUsers");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  const std::vector<std::string> ids(req.user_ids().begin(),
                                     req.user_ids().end());
  absl::StatusOr<size_t> added = trace_log_->Add(ids, store_->clock().NowMs());
  if (!added.ok()) return added.status();
  resp->set_added(static_cast<uint32_t>(*added));
  resp->set_traced(static_cast<uint32_t>(trace_log_->size()));
  // Answer once the log holds the change, like any write.
  return CommitWrite();
}

absl::Status ExposureFilterHandlers::RemoveTracedUsers(
    const exposure::v1::RemoveTracedUsersRequest& req,
    exposure::v1::RemoveTracedUsersResponse* resp) {
  // Not while recovery replaces the trace.
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  if (absl::Status s = ValidateTracedUserIds(req.user_ids(), limits_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTracedOwners(req.user_ids()); !s.ok()) return s;
  // With R >= 2 the change goes through the log (TraceUsersThroughLog).
  if (ownership_ != nullptr) {
    if (absl::Status s = ownership_->CheckDirectWrite("RemoveTracedUsers");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  const std::vector<std::string> ids(req.user_ids().begin(),
                                     req.user_ids().end());
  resp->set_removed(static_cast<uint32_t>(trace_log_->Remove(ids)));
  resp->set_traced(static_cast<uint32_t>(trace_log_->size()));
  return CommitWrite();
}

absl::Status ExposureFilterHandlers::TraceLoggedUser(
    const exposure::v1::TracedUser& user, bool traced) {
  // Not while recovery replaces the trace.
  if (absl::Status s = CheckAvailable(); !s.ok()) return s;
  google::protobuf::RepeatedPtrField<std::string> ids;
  ids.Add()->assign(user.user_id());
  // A user id the RPC would refuse can never be applied: a bad record.
  if (absl::Status s = ValidateTracedUserIds(ids, limits_); !s.ok()) return s;
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  const std::vector<std::string> one(ids.begin(), ids.end());
  if (traced) {
    // A user traced already keeps its traced_since (a replay of the
    // record, or --trace_users on this copy).
    if (absl::StatusOr<size_t> added =
            trace_log_->Add(one, user.traced_since_ms());
        !added.ok()) {
      return added.status();
    }
  } else {
    trace_log_->Remove(one);
  }
  return CommitWrite();
}

absl::Status ExposureFilterHandlers::ListTracedUsers(
    const exposure::v1::ListTracedUsersRequest& /*req*/,
    exposure::v1::ListTracedUsersResponse* resp) {
  for (const TracedUserInfo& info : trace_log_->List()) {
    exposure::v1::TracedUser* u = resp->add_users();
    u->set_user_id(info.user_id);
    u->set_traced_since_ms(info.traced_since_ms);
    u->set_entries(info.entries);
    u->set_entries_dropped(info.entries_dropped);
    u->set_bytes(info.bytes);
  }
  resp->set_max_users(static_cast<uint32_t>(trace_log_->limits().max_users));
  resp->set_max_entries_per_user(
      static_cast<uint32_t>(trace_log_->limits().max_entries_per_user));
  return absl::OkStatus();
}

}  // namespace exposure_filter
