#include "src/persist/store_durability.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/persist/file_prefetcher.h"
#include "src/persist/posix_file.h"
#include "src/persist/record_frame.h"
#include "src/persist/trace_wal_record.h"
#include "src/persist/wal_reader.h"
#include "src/persist/wal_record.h"

namespace exposure_filter {
namespace {

// How often the snapshot thread checks its triggers (time and log size).
constexpr auto kSnapshotPollPeriod = std::chrono::milliseconds(200);
// How often a failed log tries to recover (a recovery rotation and a
// snapshot): space freed or a remount shows up within this.
constexpr absl::Duration kHealRetryPeriod = absl::Seconds(1);
// At most one snapshot-failure line per this (a snapshot is retried every
// second while the disk is full).
constexpr absl::Duration kFailureLogPeriod = absl::Seconds(30);

// Cuts a torn tail off the newest segment so that, once later segments
// exist, it reads as a complete segment instead of looking corrupt. A
// segment that died before its header was complete gets a whole header.
absl::Status TruncateTornTail(const std::string& path, uint64_t seq,
                              uint64_t good_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  absl::Status s;
  const bool no_header = good_bytes < kFileHeaderBytes;
  if (::ftruncate(fd, no_header ? 0 : static_cast<off_t>(good_bytes)) != 0) {
    s = ErrnoStatus("truncate", path);
  } else if (no_header) {
    const std::string header = EncodeFileHeader(kWalMagic, seq);
    if (::pwrite(fd, header.data(), header.size(), 0) !=
        static_cast<ssize_t>(header.size())) {
      s = ErrnoStatus("write", path);
    }
  }
  if (s.ok()) s = SyncFile(fd, path);
  ::close(fd);
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreDurability>> StoreDurability::Open(
    const DurabilityOptions& options, SurfaceRegistry* surfaces,
    ShardedFilterStore* store) {
  if (options.fsync_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--fsync_interval must be positive");
  }
  absl::StatusOr<std::unique_ptr<DataDir>> dir =
      DataDir::Open(options.data_dir, options.disk_io);
  if (!dir.ok()) return dir.status();
  return std::unique_ptr<StoreDurability>(
      new StoreDurability(options, *std::move(dir), surfaces, store));
}

StoreDurability::StoreDurability(const DurabilityOptions& options,
                                 std::unique_ptr<DataDir> dir,
                                 SurfaceRegistry* surfaces,
                                 ShardedFilterStore* store)
    : options_(options),
      dir_(std::move(dir)),
      surfaces_(surfaces),
      store_(store),
      sync_timer_(options.sync_timer != nullptr ? options.sync_timer
                                                : &real_sync_timer_) {}

StoreDurability::~StoreDurability() {
  Close(/*final_snapshot=*/false).IgnoreError();
}

absl::StatusOr<RecoveryReport> StoreDurability::Recover() {
  const absl::Time start = MonotonicTime();
  absl::StatusOr<DataDir::Listing> listing = dir_->List();
  if (!listing.ok()) return listing.status();
  RecoveryReport report;
  // Newest snapshot first; a damaged one falls back to the one before.
  for (auto it = listing->snapshots.rbegin(); it != listing->snapshots.rend();
       ++it) {
    const std::string path = dir_->SnapshotPath(*it);
    // The disk reads ahead while the load decodes (file_prefetcher.h): a
    // cold start costs max(disk, CPU), not their sum.
    FilePrefetcher prefetch(path);
    absl::StatusOr<MappedFile> file = MappedFile::Open(path);
    absl::StatusOr<SnapshotLoadResult> load =
        file.ok() ? LoadSnapshot(file->data(), *it, surfaces_, store_)
                  : absl::StatusOr<SnapshotLoadResult>(file.status());
    if (load.ok()) {
      report.snapshot_seq = *it;
      report.users_loaded = load->users;
      report.expired_users = load->expired_users;
      report.metadata = std::move(load->metadata);
      ImportTrace(&report);
      if (absl::Status s = ImportConsumerOffsets(&report.metadata); !s.ok()) {
        return s;
      }
      break;
    }
    if (!absl::IsDataLoss(load.status())) return load.status();
    store_->Clear();
    ++report.snapshots_skipped;
    report.corrupt = true;
    report.corruption = absl::StrCat(
        "snapshot ", path, " is damaged (", load.status().message(),
        "); falling back to ",
        std::next(it) == listing->snapshots.rend() ? "the log alone"
                                                   : "the previous snapshot");
    spdlog::error("recovery: {}", report.corruption);
    if (options_.strict_recovery) {
      return absl::DataLossError(
          absl::StrCat(report.corruption, " (--strict_recovery)"));
    }
  }
  if (absl::Status s = ReplayLog(*listing, &report); !s.ok()) return s;

  uint64_t next = report.snapshot_seq + 1;
  if (!listing->wal_segments.empty()) {
    next = std::max(next, listing->wal_segments.back() + 1);
  }
  absl::StatusOr<std::unique_ptr<WriteAheadLog>> wal =
      WriteAheadLog::Create(dir_.get(), next, options_.fsync, &disk_errors_);
  if (!wal.ok()) return wal.status();
  wal_ = *std::move(wal);
  if (trace_log_ != nullptr) {
    const int64_t now = store_->clock().NowMs();
    trace_log_->DropExpired(now);
    // A lost or unreadable stretch of log may have held trace records of
    // exposures the filters still claim (or claim from an older snapshot
    // plus the log up to the damage). Explain calls "filtered, traced, no
    // entry" a false positive only for slices after traced_since, so moving
    // traced_since to now keeps every verdict about the past truthful.
    if (report.torn_tails > 0 || report.corrupt) report.trace_reset = true;
    if (report.trace_reset) {
      const size_t reset = trace_log_->ResetTracedSince(now);
      if (reset > 0) {
        spdlog::warn(
            "recovery: the trace of {} traced users may miss exposures from "
            "before the restart (torn or corrupt log, or an exposure logged "
            "without its trace record); they count as traced since now",
            reset);
      }
    }
    report.trace_users = trace_log_->size();
    trace_log_->SetJournal(this);
  }
  {
    MutexLock lock(&snapshot_mu_);
    latest_snapshot_ = report.snapshot_seq;
    last_snapshot_time_ = MonotonicTime();
  }
  store_->SetJournal(this);
  report.consumer_offsets = consumer_offsets();
  report.duration = MonotonicTime() - start;
  spdlog::info(
      "recovery: {} users from snapshot {} ({} aged out), {} log records "
      "from {} segments, {} torn tail bytes skipped, in {}",
      report.users_loaded, report.snapshot_seq, report.expired_users,
      report.wal_records, report.wal_segments, report.torn_tail_bytes,
      absl::FormatDuration(report.duration));
  if (report.corrupt) {
    // The damaged files stay where they are for inspection; a snapshot of
    // what loaded supersedes them, so writes from now on do not sit behind
    // a record replay cannot pass.
    if (absl::Status s = Snapshot(); !s.ok()) {
      spdlog::error("recovery: snapshot after corruption failed: {}",
                    s.ToString(absl::StatusToStringMode::kWithNoExtraData));
    }
  }
  sync_thread_ = std::thread([this] { SyncLoop(); });
  snapshot_thread_ = std::thread([this] { SnapshotLoop(); });
  return report;
}

absl::Status StoreDurability::ReplayLog(const DataDir::Listing& listing,
                                        RecoveryReport* report) {
  std::vector<uint64_t> segments;
  for (uint64_t seq : listing.wal_segments) {
    if (seq > report->snapshot_seq) segments.push_back(seq);
  }
  absl::Status apply_error;
  // Exposures of traced users replayed minus their trace records: each
  // RecordExposure logs the exposure, then (same commit) its trace record,
  // so a positive count at the end means a trace record was lost.
  absl::flat_hash_map<std::string, int64_t> untraced_exposures;
  auto apply = [&](const WalRecord& r) {
    if (!apply_error.ok()) return;
    if (r.type == kWalDeleteUser) {
      if (const Surface* s = surfaces_->Find(r.surface)) {
        store_->DeleteUser(*s, r.user_id);
      }
      if (trace_log_ != nullptr) {
        trace_log_->DropUserEntries(r.surface, r.user_id);
      }
      return;
    }
    if (trace_log_ != nullptr && !r.item_hashes.empty() &&
        trace_log_->IsTraced(r.user_id)) {
      ++untraced_exposures[r.user_id];
    }
    absl::StatusOr<const Surface*> s = surfaces_->GetOrCreate(r.surface);
    if (!s.ok()) {
      apply_error = absl::FailedPreconditionError(absl::StrCat(
          "log names surface \"", r.surface, "\": ", s.status().message()));
      return;
    }
    const UserExposures ue{r.user_id, r.item_hashes, r.event_ms};
    store_->Record(**s, {&ue, 1});
  };
  auto apply_trace = [&](uint8_t type, absl::string_view body) {
    if (type == kWalConsumerOffsets) {
      ConsumerOffsets advanced;
      if (absl::Status s = DecodeConsumerOffsets(body, &advanced); !s.ok()) {
        // Checksummed but undecodable: a bug. The data is still replayed;
        // at worst the consumer re-reads from older offsets (idempotent).
        spdlog::error("recovery: {}", std::string(s.message()));
        return true;
      }
      MutexLock lock(&offsets_mu_);
      offsets_.Merge(advanced);
      return true;
    }
    if (trace_log_ == nullptr || !IsTraceWalRecordType(type)) return false;
    TraceWalRecord r;
    if (absl::Status s = DecodeTraceWalRecord(type, body, &r); !s.ok()) {
      // Checksummed but undecodable: a bug, not a torn write. The filters
      // are unaffected; the trace can no longer vouch for the past.
      spdlog::error("recovery: {}; trace reset", std::string(s.message()));
      report->trace_reset = true;
      return true;
    }
    ++report->trace_records;
    switch (r.type) {
      case kWalTraceAdd:
        // One at a time: a smaller --trace_max_users keeps the first ones.
        for (absl::string_view id : r.user_ids) {
          const std::string ids[] = {std::string(id)};
          if (!trace_log_->Add(ids, r.traced_since_ms).ok()) break;
        }
        break;
      case kWalTraceRemove: {
        const std::vector<std::string> ids(r.user_ids.begin(),
                                           r.user_ids.end());
        trace_log_->Remove(ids);
        for (const std::string& id : ids) untraced_exposures.erase(id);
        break;
      }
      case kWalTraceRecord: {
        const TracedExposure e{r.user_id, r.item_ids, r.item_keys, r.event_ms,
                               r.expires_at_ms};
        trace_log_->Record(r.surface, {&e, 1});
        auto it = untraced_exposures.find(r.user_id);
        if (it != untraced_exposures.end() && it->second > 0) --it->second;
        break;
      }
      case kWalTraceDrop:
        trace_log_->DropUserEntries(r.surface, r.user_id);
        break;
    }
    return true;
  };
  uint64_t expected = report->snapshot_seq + 1;
  for (size_t i = 0; i < segments.size(); ++i) {
    const uint64_t seq = segments[i];
    const std::string path = dir_->WalPath(seq);
    absl::Status stop;
    if (seq != expected) {
      stop = absl::DataLossError(
          absl::StrCat("log segment ", dir_->WalPath(expected), " is missing"));
    } else {
      FilePrefetcher prefetch(path);
      absl::StatusOr<MappedFile> file = MappedFile::Open(path);
      if (!file.ok()) return file.status();
      const bool newest = i + 1 == segments.size();
      const WalSegmentReplay replay =
          ReplayWalSegment(file->data(), seq, newest, apply, apply_trace);
      if (!apply_error.ok()) return apply_error;
      ++report->wal_segments;
      report->wal_records += replay.records;
      if (replay.torn_bytes > 0) {
        ++report->torn_tails;
        report->torn_tail_bytes += replay.torn_bytes;
        spdlog::debug("recovery: {} ends in a torn record ({} bytes), cut off",
                      path, replay.torn_bytes);
        if (absl::Status s = TruncateTornTail(path, seq, replay.good_bytes);
            !s.ok()) {
          return s;
        }
      }
      stop = replay.corruption;
      if (!stop.ok()) {
        stop = absl::DataLossError(
            absl::StrCat("log segment ", path, ": ", stop.message()));
      }
    }
    if (!stop.ok()) {
      report->corrupt = true;
      report->corruption = absl::StrCat(
          stop.message(), "; replay stopped at the last good record, ",
          segments.size() - i - (seq == expected ? 1 : 0),
          " later segment(s) not replayed");
      spdlog::error("recovery: {}", report->corruption);
      if (options_.strict_recovery) {
        return absl::DataLossError(
            absl::StrCat(report->corruption, " (--strict_recovery)"));
      }
      break;
    }
    ++expected;
  }
  for (const auto& [user, count] : untraced_exposures) {
    if (count > 0 && trace_log_->IsTraced(user)) {
      report->trace_reset = true;
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status StoreDurability::ImportConsumerOffsets(
    SnapshotMetadata* metadata) {
  auto it = std::find_if(
      metadata->begin(), metadata->end(),
      [](const auto& kv) { return kv.first == kConsumerOffsetsMetadataKey; });
  if (it == metadata->end()) return absl::OkStatus();
  ConsumerOffsets offsets;
  if (absl::Status s = DecodeConsumerOffsets(it->second, &offsets); !s.ok()) {
    return s;
  }
  MutexLock lock(&offsets_mu_);
  offsets_ = std::move(offsets);
  return absl::OkStatus();
}

void StoreDurability::LogConsumerOffsets(const ConsumerOffsets& advanced) {
  std::string body;
  EncodeConsumerOffsets(advanced, &body);
  MutexLock lock(&offsets_mu_);
  wal_->Append(kWalConsumerOffsets, body);
  offsets_.Merge(advanced);
}

ConsumerOffsets StoreDurability::consumer_offsets() const {
  MutexLock lock(&offsets_mu_);
  return offsets_;
}

void StoreDurability::ImportTrace(RecoveryReport* report) {
  auto it = std::find_if(
      report->metadata.begin(), report->metadata.end(),
      [](const auto& kv) { return kv.first == kTraceLogMetadataKey; });
  if (it == report->metadata.end()) return;
  if (trace_log_ != nullptr) {
    absl::StatusOr<TraceImportSummary> imported =
        trace_log_->Import(it->second, store_->clock().NowMs());
    if (imported.ok()) {
      report->trace_entries = imported->entries;
      spdlog::info(
          "recovery: {} traced users with {} entries from the snapshot ({} "
          "users over --trace_max_users, {} entries aged out or over the "
          "per-user cap)",
          imported->users, imported->entries, imported->users_skipped,
          imported->entries_dropped);
    } else {
      // Users traced since this snapshot still come back from the log.
      spdlog::error("recovery: traced users not restored: {}",
                    std::string(imported.status().message()));
    }
  }
  // The export can be large; the report's metadata is for humans.
  report->metadata.erase(it);
}

absl::Status StoreDurability::Commit() {
  if (wal_ == nullptr) {
    return absl::FailedPreconditionError("durability not recovered yet");
  }
  return wal_->Commit();
}

absl::Status StoreDurability::WriteStatus() const {
  if (wal_ == nullptr) {
    return absl::FailedPreconditionError("durability not recovered yet");
  }
  return wal_->status();
}

void StoreDurability::OnRecord(absl::string_view surface,
                               absl::string_view user_id, int64_t event_ms,
                               absl::Span<const uint64_t> item_hashes) {
  // Encoded per call on the caller's thread; the log lock covers only the
  // copy into its buffer.
  thread_local std::string body;
  body.clear();
  EncodeRecordExposure(surface, user_id, event_ms, item_hashes, &body);
  wal_->Append(kWalRecordExposure, body);
}

void StoreDurability::OnTraceAdd(absl::Span<const absl::string_view> user_ids,
                                 int64_t since_ms) {
  thread_local std::string body;
  body.clear();
  EncodeTraceAdd(user_ids, since_ms, &body);
  wal_->Append(kWalTraceAdd, body);
}

void StoreDurability::OnTraceRemove(
    absl::Span<const absl::string_view> user_ids) {
  thread_local std::string body;
  body.clear();
  EncodeTraceRemove(user_ids, &body);
  wal_->Append(kWalTraceRemove, body);
}

void StoreDurability::OnTraceRecord(absl::string_view surface,
                                    const TracedExposure& exposure) {
  thread_local std::string body;
  body.clear();
  EncodeTraceRecord(surface, exposure.user_id, exposure.event_ms,
                    exposure.expires_at_ms, exposure.item_ids,
                    exposure.item_keys, &body);
  wal_->Append(kWalTraceRecord, body);
}

void StoreDurability::OnTraceDropUser(absl::string_view surface,
                                      absl::string_view user_id) {
  thread_local std::string body;
  body.clear();
  EncodeTraceDrop(surface, user_id, &body);
  wal_->Append(kWalTraceDrop, body);
}

void StoreDurability::OnDelete(absl::string_view surface,
                               absl::string_view user_id) {
  thread_local std::string body;
  body.clear();
  EncodeDeleteUser(surface, user_id, &body);
  wal_->Append(kWalDeleteUser, body);
}

absl::Status StoreDurability::Snapshot() {
  MutexLock lock(&snapshot_mu_);
  return SnapshotLocked();
}

absl::Status StoreDurability::SnapshotLocked() {
  if (wal_ == nullptr) {
    return absl::FailedPreconditionError("durability not recovered yet");
  }
  const absl::Time start = MonotonicTime();
  // Everything logged in segments <= covered is already in the store (it
  // was applied under the shard lock before it was appended).
  absl::StatusOr<uint64_t> covered = absl::UnknownError("not rotated");
  absl::StatusOr<std::string> trace = std::string();
  ConsumerOffsets offsets_at_cut;
  {
    // Consumed offsets are logged under this lock: the copy holds exactly
    // the offsets logged in the segments this snapshot covers.
    MutexLock offsets_lock(&offsets_mu_);
    offsets_at_cut = offsets_;
    if (trace_log_ != nullptr) {
      // Trace changes are not idempotent: export at exactly the rotation, so
      // each is in this snapshot or in the log after it, not both.
      trace = trace_log_->ExportAtCut([&] {
        covered = wal_->Rotate();
        return covered.status();
      });
    } else {
      covered = wal_->Rotate();
    }
  }
  if (!covered.ok()) {
    ++snapshot_failures_;
    LogSnapshotFailure(wal_->current_segment(), covered.status());
    return covered.status();
  }
  // A recovery rotation (the log had failed): acknowledgements wait for
  // this snapshot, which must hold the poisoned segment's records.
  const bool healing = wal_->healing();
  last_snapshot_time_ = start;
  SnapshotMetadata metadata =
      metadata_provider_ ? metadata_provider_() : SnapshotMetadata{};
  if (!offsets_at_cut.topic.empty()) {
    std::string value;
    EncodeConsumerOffsets(offsets_at_cut, &value);
    metadata.emplace_back(kConsumerOffsetsMetadataKey, std::move(value));
  }
  if (trace_log_ != nullptr && trace.ok()) {
    if (trace->size() + 64 > kMaxFrameBytes) {
      // Only with huge --trace_max_users x --trace_max_entries_per_user;
      // the filters matter more than the trace, so snapshot without it.
      spdlog::error(
          "snapshot {}: traced users' export is {} bytes, over the record "
          "limit; traced users will not survive a restart",
          *covered, trace->size());
    } else {
      metadata.emplace_back(kTraceLogMetadataKey, *std::move(trace));
    }
  }
  absl::StatusOr<SnapshotWriteResult> written =
      WriteSnapshot(*dir_, *covered, *store_, metadata);
  if (healing) wal_->FinishHealing(written.status());
  if (!written.ok()) {
    ++snapshot_failures_;
    disk_errors_.Add(DiskOp::kSnapshot, written.status());
    LogSnapshotFailure(*covered, written.status());
    return written.status();
  }
  if (failure_logs_held_ > 0 || next_failure_log_ != absl::InfinitePast()) {
    spdlog::info(
        "snapshot {} succeeded after failures ({} more failure lines "
        "held back)",
        *covered, failure_logs_held_);
    failure_logs_held_ = 0;
    next_failure_log_ = absl::InfinitePast();
  }
  ++snapshots_written_;
  last_snapshot_bytes_ = written->bytes;
  last_snapshot_users_ = written->users;
  last_snapshot_finished_unix_micros_ = absl::ToUnixMicros(absl::Now());
  spdlog::info("snapshot {}: {} users, {} bytes in {}", *covered,
               written->users, written->bytes,
               absl::FormatDuration(MonotonicTime() - start));
  if (latest_snapshot_ != 0) fallback_snapshot_ = latest_snapshot_;
  latest_snapshot_ = *covered;
  RemoveObsoleteFiles(*covered);
  return absl::OkStatus();
}

void StoreDurability::LogSnapshotFailure(uint64_t seq, const absl::Status& s) {
  const absl::Time now = MonotonicTime();  // a rate limit: monotonic
  if (now < next_failure_log_) {
    ++failure_logs_held_;
    return;
  }
  next_failure_log_ = now + kFailureLogPeriod;
  spdlog::error(
      "snapshot {} failed: {}{}; the previous snapshot and the log it needs "
      "are kept{}",
      seq, std::string(s.message()),
      failure_logs_held_ > 0 ? absl::StrCat(" (", failure_logs_held_,
                                            " failures since the last "
                                            "line)")
                             : std::string(),
      wal_->status().ok() ? ""
                          : "; writes stay refused until a snapshot succeeds "
                            "(retried every second)");
  failure_logs_held_ = 0;
}

void StoreDurability::RemoveObsoleteFiles(uint64_t newest) {
  absl::StatusOr<DataDir::Listing> listing = dir_->List();
  if (!listing.ok()) return;
  std::vector<std::string> doomed;
  for (uint64_t seq : listing->snapshots) {
    if (seq < newest && seq != fallback_snapshot_) {
      doomed.push_back(dir_->SnapshotPath(seq));
    }
  }
  // The fallback snapshot needs the log after it; nothing needs the log
  // before it.
  for (uint64_t seq : listing->wal_segments) {
    if (seq <= fallback_snapshot_) doomed.push_back(dir_->WalPath(seq));
  }
  for (const std::string& path : doomed) {
    if (::unlink(path.c_str()) != 0) {
      spdlog::warn("cannot remove obsolete {}: {}", path,
                   std::string(ErrnoStatus("unlink", path).message()));
    }
  }
}

void StoreDurability::SyncLoop() {
  if (options_.fsync != FsyncPolicy::kInterval) return;
  while (sync_timer_->Wait(options_.fsync_interval)) {
    // A failure fails the log, which logs it once (write_ahead_log.h); a
    // failed log is not synced again, the snapshot thread recovers it.
    wal_->Sync().IgnoreError();
  }
}

void StoreDurability::SnapshotLoop() {
  const bool by_time = options_.snapshot_interval > absl::ZeroDuration();
  const bool by_size = options_.snapshot_wal_bytes > 0;
  // Runs even without time or size triggers: a failed log recovers here.
  MutexLock lock(&stop_mu_);
  while (!stop_mu_.AwaitWithTimeout(
      stop_cv_, kSnapshotPollPeriod,
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; })) {
    stop_mu_.Unlock();
    {
      MutexLock snap(&snapshot_mu_);
      // Monotonic (src/store/clock.h): wall-clock steps neither stall nor
      // hurry snapshots and heal attempts.
      const absl::Time now = MonotonicTime();
      // A failed log (disk full, read-only, I/O error) recovers only
      // through a snapshot (write_ahead_log.h): try every second.
      const bool failed = !wal_->status().ok();
      const bool heal = failed && now - last_heal_attempt_ >= kHealRetryPeriod;
      if (heal) last_heal_attempt_ = now;
      const bool due = failed
                           ? heal
                           : (by_time && now - last_snapshot_time_ >=
                                             options_.snapshot_interval) ||
                                 (by_size && wal_->segment_bytes() >=
                                                 options_.snapshot_wal_bytes);
      // A failed snapshot is logged and retried at the next trigger; the
      // log keeps everything meanwhile.
      if (due) SnapshotLocked().IgnoreError();
    }
    stop_mu_.Lock();
  }
}

absl::Status StoreDurability::Close(bool final_snapshot) {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  {
    MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  sync_timer_->Stop();
  if (sync_thread_.joinable()) sync_thread_.join();
  if (snapshot_thread_.joinable()) snapshot_thread_.join();
  if (wal_ == nullptr) return absl::OkStatus();  // never recovered
  absl::Status s;
  if (final_snapshot) s = Snapshot();
  store_->SetJournal(nullptr);
  if (trace_log_ != nullptr) trace_log_->SetJournal(nullptr);
  absl::Status closed = wal_->Close();
  return s.ok() ? closed : s;
}

void StoreDurability::SetMetadataProvider(
    std::function<SnapshotMetadata()> provider) {
  MutexLock lock(&snapshot_mu_);
  metadata_provider_ = std::move(provider);
}

DurabilityStats StoreDurability::stats() const {
  DurabilityStats st;
  if (wal_ != nullptr) {
    st.wal = wal_->stats();
    const absl::Status s = wal_->status();
    st.wal_writable = s.ok();
    st.wal_error = std::string(s.message());
  }
  st.snapshots_written = snapshots_written_.load();
  st.snapshot_failures = snapshot_failures_.load();
  st.last_snapshot_bytes = last_snapshot_bytes_.load();
  st.last_snapshot_users = last_snapshot_users_.load();
  if (const int64_t micros = last_snapshot_finished_unix_micros_.load();
      micros != 0) {
    st.last_snapshot_finished = absl::FromUnixMicros(micros);
  }
  return st;
}

}  // namespace exposure_filter
