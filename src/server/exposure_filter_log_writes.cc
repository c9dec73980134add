// ExposureFilterHandlers' replicated write path: a
// RecordExposure, DeleteUser, AddTracedUsers or RemoveTracedUsers RPC to a
// replica with --replication_factor R >= 2 is produced to the exposure topic
// (exposure_log_producer.h) and answered from Kafka's delivery reports. Every
// owner of the user, this replica included, applies it from the log like any
// logged exposure, so an acknowledged write is on every copy once each has
// consumed it, and survives the loss of any one replica.
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/server/exposure_filter_handlers.h"
#include "src/server/request_validation.h"

namespace exposure_filter {
namespace {

// Names at most this many unwritten messages; a bigger failure (the broker
// is down: every message of the call) adds "and N more".
constexpr size_t kMaxNamedFailures = 10;

absl::Status NotWritten(absl::string_view rpc, const std::string& topic,
                        const std::vector<std::string>& what, size_t total,
                        const std::vector<LogDeliveryFailure>& failures) {
  std::string named;
  for (size_t i = 0; i < failures.size() && i < kMaxNamedFailures; ++i) {
    absl::StrAppend(&named, i == 0 ? "" : "; ", what[failures[i].index], ": ",
                    failures[i].error);
  }
  if (failures.size() > kMaxNamedFailures) {
    absl::StrAppend(&named, "; and ", failures.size() - kMaxNamedFailures,
                    " more");
  }
  const size_t written = total - failures.size();
  return absl::UnavailableError(absl::StrCat(
      rpc, ": Kafka did not acknowledge ", failures.size(), " of ", total,
      " message", total == 1 ? "" : "s", " to topic ", topic,
      ", not written: ", named,
      written == 0   ? "; nothing of this call was written"
      : written == 1 ? "; the other one is written and every owner applies it"
                     : absl::StrCat("; the other ", written,
                                    " are written and every owner applies "
                                    "them"),
      "; retrying the call is safe (re-adding an item changes nothing)"));
}

}  // namespace

void ExposureFilterHandlers::AttachExposureLog(ExposureLogProducer* producer,
                                               KafkaMessageEncoder encoder) {
  exposure_log_owned_ = std::make_unique<const ExposureLog>(
      ExposureLog{producer, std::move(encoder)});
  exposure_log_.store(exposure_log_owned_.get(), std::memory_order_release);
}

absl::StatusOr<const ExposureFilterHandlers::ExposureLog*>
ExposureFilterHandlers::LogFor(absl::string_view rpc) const {
  const ExposureLog* log = exposure_log_.load(std::memory_order_acquire);
  if (log == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        rpc,
        ": starting: the exposure log producer is not connected yet "
        "(--replication_factor >= 2 writes through Kafka); retry "
        "shortly"));
  }
  return log;
}

void ExposureFilterHandlers::ProduceAndAnswer(const ExposureLog& log,
                                              absl::string_view rpc,
                                              std::vector<LogMessage> messages,
                                              OnWritten on_success,
                                              WriteDone done) {
  // All or nothing: a record librdkafka would refuse fails the whole call
  // here, before the call's other messages are in the log.
  if (absl::Status s = log.producer->CheckRecordSizes(messages); !s.ok()) {
    return std::move(done)(
        absl::Status(s.code(), absl::StrCat(rpc, ": ", s.message())));
  }
  std::vector<std::string> what;
  what.reserve(messages.size());
  for (const LogMessage& m : messages) what.push_back(m.what);
  log.producer->Produce(
      std::move(messages),
      [rpc = std::string(rpc), topic = log.producer->topic(),
       what = std::move(what), on_success = std::move(on_success),
       done = std::move(done)](std::vector<LogDeliveryFailure> failures,
                               WrittenOffsets written) mutable {
        if (failures.empty()) {
          std::move(on_success)(written);
          std::move(done)(absl::OkStatus());
          return;
        }
        std::move(done)(NotWritten(rpc, topic, what, what.size(), failures));
      });
}

void ExposureFilterHandlers::RecordExposureThroughLog(
    const exposure::v1::RecordExposureRequest& req,
    exposure::v1::RecordExposureResponse* resp, WriteDone done) {
  const int64_t now = store_->clock().NowMs();
  if (absl::Status s = CheckRecordable(req, now); !s.ok()) {
    return std::move(done)(s);
  }
  absl::StatusOr<const ExposureLog*> log = LogFor("RecordExposure");
  if (!log.ok()) return std::move(done)(log.status());
  absl::StatusOr<const Surface*> surface =
      surfaces_->GetOrCreate(req.surface());
  if (!surface.ok()) return std::move(done)(surface.status());
  // What goes into the log is what every copy must apply identically:
  // event time 0 ("now") becomes this replica's now, or each owner would
  // stamp its own consume time and the copies could file the items in
  // different slices; exposures already outside the retention are counted
  // here and left out, as RecordExposure counts and ignores them (an owner
  // would skip them as bad messages).
  exposure::v1::RecordExposureRequest logged;
  logged.set_surface(req.surface());
  std::vector<int> indices;
  uint64_t expired = 0;
  for (int i = 0; i < req.exposures_size(); ++i) {
    const exposure::v1::Exposure& e = req.exposures(i);
    const int64_t t = e.event_time_ms() == 0 ? now : e.event_time_ms();
    if ((*surface)->policy.EventExpired(t, now)) {
      expired += static_cast<uint64_t>(e.item_ids_size() + e.item_keys_size());
      continue;
    }
    exposure::v1::Exposure* out = logged.add_exposures();
    *out = e;
    out->set_event_time_ms(t);
    indices.push_back(i);
  }
  std::vector<LogMessage> messages;
  if (absl::Status s =
          (*log)->encoder.EncodeExposures(logged, indices, &messages);
      !s.ok()) {
    return std::move(done)(s);
  }
  uint64_t items = 0;
  for (const LogMessage& m : messages) items += m.items;
  // "Recorded" here means in the log, which every owner applies; the
  // owners count the items again as they apply them
  // (exposure_filter_kafka_items_total).
  // The read-your-writes token: a read carrying it as
  // min_offsets is served only by a copy that applied these offsets.
  auto on_success = [resp, items, expired](const WrittenOffsets& written) {
    resp->set_items_recorded(items);
    resp->set_items_expired(expired);
    for (const auto& [partition, offset] : written) {
      (*resp->mutable_written_offsets())[partition] = offset;
    }
  };
  if (messages.empty()) {
    on_success({});
    return std::move(done)(absl::OkStatus());
  }
  ProduceAndAnswer(**log, "RecordExposure", std::move(messages),
                   std::move(on_success), std::move(done));
}

void ExposureFilterHandlers::DeleteUserThroughLog(
    const exposure::v1::DeleteUserRequest& req,
    exposure::v1::DeleteUserResponse* resp, WriteDone done) {
  if (absl::Status s = CheckAvailable(); !s.ok()) return std::move(done)(s);
  const Surface* surface = nullptr;
  if (absl::Status s = ResolveRead(req.surface(), req.user_id(), &surface);
      !s.ok()) {
    return std::move(done)(s);
  }
  absl::StatusOr<const ExposureLog*> log = LogFor("DeleteUser");
  if (!log.ok()) return std::move(done)(log.status());
  // Whether this copy held the user when the delete was produced: the
  // owners apply it later, each to its own copy.
  const bool existed =
      surface != nullptr &&
      store_->GetUserStats(*surface, req.user_id()).has_value();
  std::vector<LogMessage> messages;
  messages.push_back((*log)->encoder.EncodeDeleteUser(req));
  ProduceAndAnswer(
      **log, "DeleteUser", std::move(messages),
      [resp, existed](const WrittenOffsets& written) {
        resp->set_existed(existed);
        for (const auto& [partition, offset] : written) {
          (*resp->mutable_written_offsets())[partition] = offset;
        }
      },
      std::move(done));
}

void ExposureFilterHandlers::AddTracedUsersThroughLog(
    const exposure::v1::AddTracedUsersRequest& req,
    exposure::v1::AddTracedUsersResponse* resp, WriteDone done) {
  TraceUsersThroughLog(
      "AddTracedUsers", req.user_ids(), /*traced=*/true,
      [resp](uint32_t added, uint32_t traced) {
        resp->set_added(added);
        resp->set_traced(traced);
      },
      std::move(done));
}

void ExposureFilterHandlers::RemoveTracedUsersThroughLog(
    const exposure::v1::RemoveTracedUsersRequest& req,
    exposure::v1::RemoveTracedUsersResponse* resp, WriteDone done) {
  TraceUsersThroughLog(
      "RemoveTracedUsers", req.user_ids(), /*traced=*/false,
      [resp](uint32_t removed, uint32_t traced) {
        resp->set_removed(removed);
        resp->set_traced(traced);
      },
      std::move(done));
}

void ExposureFilterHandlers::TraceUsersThroughLog(
    absl::string_view rpc,
    const google::protobuf::RepeatedPtrField<std::string>& user_ids,
    bool traced, TraceAnswer answer, WriteDone done) {
  // The direct calls' checks, in their order (exposure_filter_debug_
  // handlers.cc): the first foreign user rejects the whole list.
  if (absl::Status s = CheckAvailable(); !s.ok()) return std::move(done)(s);
  if (absl::Status s = ValidateTracedUserIds(user_ids, limits_); !s.ok()) {
    return std::move(done)(s);
  }
  if (absl::Status s = CheckTracedOwners(user_ids); !s.ok()) {
    return std::move(done)(s);
  }
  absl::StatusOr<const ExposureLog*> log = LogFor(rpc);
  if (!log.ok()) return std::move(done)(log.status());
  // traced_since for every owner: this replica's clock, the one that also
  // stamps the exposures it produces (kafka_message_encoder.h).
  const int64_t now = store_->clock().NowMs();
  // The counts are this copy's at produce time, like DeleteUser.existed:
  // `changed` ids whose state the records change here, and the traced
  // users this copy holds once it applied them, if nothing else changes
  // meanwhile. The other owner applies the same records to its own set,
  // which also holds the users of partitions this copy does not own.
  absl::flat_hash_set<absl::string_view> seen;
  std::vector<LogMessage> messages;
  size_t changed = 0;
  for (const std::string& id : user_ids) {
    if (!seen.insert(id).second) continue;
    if (trace_log_->IsTraced(id) != traced) ++changed;
    messages.push_back((*log)->encoder.EncodeTraceChange(id, traced, now));
  }
  const size_t before = trace_log_->size();
  const size_t max_users = trace_log_->limits().max_users;
  // The direct call's all-or-nothing limit, checked on this copy before
  // anything is written. A copy that is fuller (another owner) skips the
  // record it cannot hold and counts it (reason trace_full).
  if (traced && before + changed > max_users) {
    return std::move(done)(absl::ResourceExhaustedError(
        absl::StrCat("user_ids: tracing ", changed, " more users would exceed ",
                     "--trace_max_users=", max_users, " (traced now: ", before,
                     "); nothing was written")));
  }
  const size_t after = traced ? before + changed : before - changed;
  ProduceAndAnswer(
      **log, rpc, std::move(messages),
      [answer = std::move(answer), changed,
       after](const WrittenOffsets& /*written*/) mutable {
        std::move(answer)(static_cast<uint32_t>(changed),
                          static_cast<uint32_t>(after));
      },
      std::move(done));
}

}  // namespace exposure_filter
