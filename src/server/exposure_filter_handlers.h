// ExposureFilterHandlers: the logic of every exposure.v1 RPC, on protobuf
// messages and absl::Status, with no gRPC transport types, so that tests and
// fuzzers can drive it in-process. exposure_filter_service.h adapts it to the
// gRPC callback API.
#ifndef EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_HANDLERS_H_
#define EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_HANDLERS_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "src/ingest/exposure_log_producer.h"
#include "src/ingest/kafka_message_encoder.h"
#include "src/persist/store_durability.h"
#include "src/server/config/server_config.h"
#include "src/server/observability/striped_metrics.h"
#include "src/server/serving_readiness.h"
#include "src/server/user_ownership_gate.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"
#include "src/store/trace_log.h"

namespace exposure_filter {

class ExposureFilterHandlers {
 public:
  // `trace_log` (traced users) may be null: the handlers then keep their
  // own, with default limits. Whatever is passed must outlive the handlers.
  ExposureFilterHandlers(SurfaceRegistry* surfaces, ShardedFilterStore* store,
                         const RequestLimits& limits,
                         TraceLog* trace_log = nullptr);

  absl::Status RecordExposure(const exposure::v1::RecordExposureRequest& req,
                              exposure::v1::RecordExposureResponse* resp);
  // A batch taken from the Kafka exposure log (kafka_exposure_sink.h): as
  // RecordExposure, except that a replicated deployment (R >= 2)
  // accepts it, because every copy applies the same log, whereas an RPC
  // would reach this copy only (UserOwnershipGate::CheckDirectWrite).
  absl::Status RecordLoggedExposure(
      const exposure::v1::RecordExposureRequest& batch,
      exposure::v1::RecordExposureResponse* resp);
  // Replicated writes. With R >= 2 a write RPC is not
  // applied here: it is produced to the exposure topic, and every owner of
  // the user applies it from there (this replica included), so the copies
  // stay equal. The handler validates and checks ownership as the direct
  // path does, enqueues the messages and returns; `done` runs once, with OK
  // only when Kafka acknowledged every message (acks=all), else
  // UNAVAILABLE naming what was not written. It runs on the producer's
  // delivery thread, or inline when the call is refused or writes nothing;
  // `resp` must live until then. The synchronous RecordExposure and
  // DeleteUser stay refused with R >= 2 (they cannot wait for Kafka).
  using WriteDone = absl::AnyInvocable<void(absl::Status) &&>;
  bool WritesThroughLog() const {
    return ownership_ != nullptr &&
           ownership_->ownership().options().replication_factor > 1;
  }
  void RecordExposureThroughLog(const exposure::v1::RecordExposureRequest& req,
                                exposure::v1::RecordExposureResponse* resp,
                                WriteDone done);
  void DeleteUserThroughLog(const exposure::v1::DeleteUserRequest& req,
                            exposure::v1::DeleteUserResponse* resp,
                            WriteDone done);
  // A delete_user record taken from the log (kafka_exposure_sink.h): as
  // DeleteUser, accepted with R >= 2.
  absl::Status DeleteLoggedUser(const exposure::v1::DeleteUserRequest& req,
                                exposure::v1::DeleteUserResponse* resp);
  // Traced-user changes through the log: one trace_add / trace_remove
  // record per distinct user id (kafka_message_encoder.h), the same checks
  // as the direct calls. The response's counts are this copy's when it
  // produced the records, as DeleteUser's `existed` (see the .cc).
  void AddTracedUsersThroughLog(const exposure::v1::AddTracedUsersRequest& req,
                                exposure::v1::AddTracedUsersResponse* resp,
                                WriteDone done);
  void RemoveTracedUsersThroughLog(
      const exposure::v1::RemoveTracedUsersRequest& req,
      exposure::v1::RemoveTracedUsersResponse* resp, WriteDone done);
  // A trace_add (`traced`) / trace_remove record taken from the log: the
  // user starts tracing with the record's traced_since_ms, or stops.
  // ResourceExhausted (nothing changed) when this copy is full.
  absl::Status TraceLoggedUser(const exposure::v1::TracedUser& user,
                               bool traced);
  absl::Status FilterRecalled(const exposure::v1::FilterRecalledRequest& req,
                              exposure::v1::FilterRecalledResponse* resp);
  absl::Status GetFilter(const exposure::v1::GetFilterRequest& req,
                         exposure::v1::GetFilterResponse* resp);
  // The session stream's subscribe (docs/session-stream.md): GetFilter's
  // checks, then the pull, and under_lock(pull, policy) while the user's
  // shard lock is still held (ShardedFilterStore::PullUnderLock), so what
  // under_lock registers sees every later write. under_lock runs only when
  // the checks pass.
  using SessionPullConsumer =
      absl::FunctionRef<void(FilterPull& pull, const FilterPolicy& policy)>;
  absl::Status PullForSession(const exposure::v1::GetFilterRequest& req,
                              SessionPullConsumer under_lock);
  // False while this copy should not be trusted for fresh reads: starting
  // (recovery), or replicated and not serving (replaying, lagging more
  // than --max_serving_lag). A session pong says so.
  bool ServingFresh() const {
    return available_.load(std::memory_order_acquire) &&
           (readiness_ == nullptr || readiness_->serving());
  }
  const RequestLimits& limits() const { return limits_; }
  const Clock& clock() const { return store_->clock(); }
  absl::Status GetUserStats(const exposure::v1::GetUserStatsRequest& req,
                            exposure::v1::GetUserStatsResponse* resp);
  absl::Status DeleteUser(const exposure::v1::DeleteUserRequest& req,
                          exposure::v1::DeleteUserResponse* resp);
  absl::Status GetServerStats(const exposure::v1::GetServerStatsRequest& req,
                              exposure::v1::GetServerStatsResponse* resp);
  // Debugging.
  absl::Status Explain(const exposure::v1::ExplainRequest& req,
                       exposure::v1::ExplainResponse* resp);
  absl::Status AddTracedUsers(const exposure::v1::AddTracedUsersRequest& req,
                              exposure::v1::AddTracedUsersResponse* resp);
  absl::Status RemoveTracedUsers(
      const exposure::v1::RemoveTracedUsersRequest& req,
      exposure::v1::RemoveTracedUsersResponse* resp);
  absl::Status ListTracedUsers(const exposure::v1::ListTracedUsersRequest& req,
                               exposure::v1::ListTracedUsersResponse* resp);

  TraceLog& trace_log() { return *trace_log_; }

  // Counters since start, for metrics (exposure_filter_metrics.h).
  struct Counters {
    uint64_t items_recorded = 0;
    uint64_t items_expired = 0;
    uint64_t candidates_checked = 0;
    uint64_t candidates_removed = 0;
  };
  Counters counters() const;
  // Server clock minus event time of each recorded Exposure that carries an
  // event time (0 = "now" carries none), in ms; negative lags (events a
  // little ahead of our clock) count as 0.
  const StripedHistogram& exposure_lag_ms() const { return exposure_lag_ms_; }
  // Durability. While unavailable (recovery in progress) every
  // RPC answers UNAVAILABLE. With a durability attached, writes answer only
  // once the write-ahead log holds them. Both are set before serving.
  void SetAvailable(bool available) {
    available_.store(available, std::memory_order_release);
  }
  void AttachDurability(StoreDurability* durability) {
    durability_ = durability;
  }
  // Scale-out: with a partitioned gate, RPCs naming a user this
  // replica does not own answer FAILED_PRECONDITION (user_ownership_gate.h).
  // Set before serving; the gate must outlive the handlers.
  void AttachOwnership(const UserOwnershipGate* gate) { ownership_ = gate; }
  // The replicated write path's producer and the topic's message format
  // (--kafka_format, --kafka_surface). Until attached (startup), replicated
  // writes answer UNAVAILABLE. Attach once; the producer must outlive the
  // handlers' last write (close it to fail later ones).
  void AttachExposureLog(ExposureLogProducer* producer,
                         KafkaMessageEncoder encoder);
  // Lag-gated reads and read-your-writes (serving_readiness.h):
  // with a readiness attached (R >= 2), FilterRecalled, GetFilter,
  // GetUserStats and Explain answer UNAVAILABLE while this copy is not
  // ready (unless lagging and the read sets allow_lagging), honour
  // min_offsets, and report their staleness. Without one (not replicated) a
  // read with min_offsets is FAILED_PRECONDITION. Set before serving; it must
  // outlive the handlers.
  void AttachReadiness(const ServingReadiness* readiness) {
    readiness_ = readiness;
  }
  // What startup dropped as not owned (unowned_users.h), for GetServerStats.
  void SetUnownedUsersDropped(uint64_t users) {
    unowned_users_dropped_.store(users, std::memory_order_relaxed);
  }

 private:
  // Where a write comes from: an RPC to this replica, or the Kafka log.
  enum class WriteOrigin { kRpc, kLog };
  absl::Status Record(WriteOrigin origin,
                      const exposure::v1::RecordExposureRequest& req,
                      exposure::v1::RecordExposureResponse* resp);
  absl::Status DeleteUserFrom(WriteOrigin origin,
                              const exposure::v1::DeleteUserRequest& req,
                              exposure::v1::DeleteUserResponse* resp);
  // RecordExposure's checks before anything is written: available, valid,
  // every user owned here (all or nothing).
  absl::Status CheckRecordable(const exposure::v1::RecordExposureRequest& req,
                               int64_t now) const;
  struct ExposureLog {
    ExposureLogProducer* producer;
    KafkaMessageEncoder encoder;
  };
  // The producer, or UNAVAILABLE naming `rpc` while none is attached.
  absl::StatusOr<const ExposureLog*> LogFor(absl::string_view rpc) const;
  // Produces `messages` and answers `done` from their delivery reports;
  // `on_success` fills the response from the offsets Kafka gave them.
  using OnWritten = absl::AnyInvocable<void(const WrittenOffsets&) &&>;
  void ProduceAndAnswer(const ExposureLog& log, absl::string_view rpc,
                        std::vector<LogMessage> messages, OnWritten on_success,
                        WriteDone done);
  // The shared body of {Add,Remove}TracedUsersThroughLog; `answer` gets
  // the response's counts once every record is acknowledged.
  using TraceAnswer =
      absl::AnyInvocable<void(uint32_t changed, uint32_t traced) &&>;
  void TraceUsersThroughLog(
      absl::string_view rpc,
      const google::protobuf::RepeatedPtrField<std::string>& user_ids,
      bool traced, TraceAnswer answer, WriteDone done);
  // Also keeps the exposures of traced users in the trace log.
  void TraceExposures(const exposure::v1::RecordExposureRequest& req,
                      const Surface& surface, int64_t now_ms);

  // GetFilter's checks, in its order; resolves the surface (null when it
  // was never written).
  absl::Status CheckGetFilter(const exposure::v1::GetFilterRequest& req,
                              const Surface** surface,
                              ReadAdmission* admission) const;
  // Validates a (surface, user_id) read and resolves the surface; *surface is
  // null when it was never written (every user there is unknown).
  absl::Status ResolveRead(absl::string_view surface_name,
                           absl::string_view user_id,
                           const Surface** surface) const;

  absl::Status CheckAvailable() const;
  using MinOffsets = google::protobuf::Map<int32_t, int64_t>;
  // Input validation of a read's min_offsets (exposure_filter_read_
  // freshness.cc): FAILED_PRECONDITION when non-empty on a server that is
  // not replicated, INVALID_ARGUMENT for a partition outside [0, P) or a
  // negative offset (the lowest bad partition is named).
  absl::Status ValidateMinOffsets(const MinOffsets& min_offsets) const;
  // After the user's ownership check: the listed partitions are owned here
  // (else the not-owner answer), this copy is ready (lag gate; or lagging,
  // not replaying, and the read sets allow_lagging) and has applied every
  // listed offset; else UNAVAILABLE naming why. On OK, *admission says how
  // stale the answer may be (untouched when not replicated).
  absl::Status CheckFresh(GatedRead read, absl::string_view user_id,
                          const MinOffsets& min_offsets, bool allow_lagging,
                          ReadAdmission* admission) const;
  // Once a read's answer is complete: its response's staleness (replicated
  // servers only: a server that is not replicated leaves the field unset,
  // it has nothing to miss), and the count of answers past the gate.
  template <typename Response>
  void ReportStaleness(GatedRead read, const ReadAdmission& admission,
                       Response* resp) const {
    if (readiness_ == nullptr) return;
    FillStaleness(read, admission, resp->mutable_staleness());
  }
  void FillStaleness(GatedRead read, const ReadAdmission& admission,
                     exposure::v1::ReadStaleness* staleness) const;
  absl::Status CheckTracedOwners(
      const google::protobuf::RepeatedPtrField<std::string>& user_ids) const;
  // OK when this replica owns the user (or is not partitioned).
  absl::Status CheckOwner(absl::string_view field,
                          absl::string_view user_id) const {
    if (ownership_ == nullptr) return absl::OkStatus();
    return ownership_->Check(field, user_id);
  }
  // UNAVAILABLE (retryable; writes are idempotent) if the log failed.
  absl::Status CommitWrite() const;
  // UNAVAILABLE while the log is failed (disk full, read-only,
  // fsync error), checked before a write touches memory, so a refused write
  // changes nothing a read could see.
  absl::Status CheckWritable() const;

  SurfaceRegistry* const surfaces_;
  ShardedFilterStore* const store_;
  std::atomic<bool> available_{true};
  StoreDurability* durability_ = nullptr;
  const UserOwnershipGate* ownership_ = nullptr;
  const ServingReadiness* readiness_ = nullptr;
  std::atomic<uint64_t> unowned_users_dropped_{0};
  std::unique_ptr<const ExposureLog> exposure_log_owned_;
  std::atomic<const ExposureLog*> exposure_log_{nullptr};
  const RequestLimits limits_;
  std::unique_ptr<TraceLog> owned_trace_log_;
  TraceLog* const trace_log_;
  // Uptime is an interval: monotonic, never negative after a clock step.
  const int64_t started_monotonic_ms_;
  std::atomic<uint64_t> items_recorded_{0};
  std::atomic<uint64_t> items_expired_{0};
  std::atomic<uint64_t> candidates_checked_{0};
  std::atomic<uint64_t> candidates_removed_{0};
  StripedHistogram exposure_lag_ms_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_EXPOSURE_FILTER_HANDLERS_H_
