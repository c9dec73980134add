#include "src/persist/store_durability.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/persist/posix_file.h"
#include "src/persist/wal_reader.h"
#include "src/persist/wal_record.h"

namespace exposure_filter {
namespace {

// How often the snapshot thread checks its triggers (time and log size).
constexpr auto kSnapshotPollPeriod = std::chrono::milliseconds(200);

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
      DataDir::Open(options.data_dir);
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
      store_(store) {}

StoreDurability::~StoreDurability() {
  Close(/*final_snapshot=*/false).IgnoreError();
}

absl::StatusOr<RecoveryReport> StoreDurability::Recover() {
  const absl::Time start = absl::Now();
  absl::StatusOr<DataDir::Listing> listing = dir_->List();
  if (!listing.ok()) return listing.status();
  RecoveryReport report;
  // Newest snapshot first; a damaged one falls back to the one before.
  for (auto it = listing->snapshots.rbegin(); it != listing->snapshots.rend();
       ++it) {
    const std::string path = dir_->SnapshotPath(*it);
    absl::StatusOr<MappedFile> file = MappedFile::Open(path);
    absl::StatusOr<SnapshotLoadResult> load =
        file.ok() ? LoadSnapshot(file->data(), *it, surfaces_, store_)
                  : absl::StatusOr<SnapshotLoadResult>(file.status());
    if (load.ok()) {
      report.snapshot_seq = *it;
      report.users_loaded = load->users;
      report.expired_users = load->expired_users;
      report.metadata = std::move(load->metadata);
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
      WriteAheadLog::Create(dir_.get(), next, options_.fsync);
  if (!wal.ok()) return wal.status();
  wal_ = *std::move(wal);
  {
    MutexLock lock(&snapshot_mu_);
    latest_snapshot_ = report.snapshot_seq;
    last_snapshot_time_ = absl::Now();
  }
  store_->SetJournal(this);
  report.duration = absl::Now() - start;
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
                    s.ToString());
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
  auto apply = [&](const WalRecord& r) {
    if (!apply_error.ok()) return;
    if (r.type == kWalDeleteUser) {
      if (const Surface* s = surfaces_->Find(r.surface)) {
        store_->DeleteUser(*s, r.user_id);
      }
      return;
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
  uint64_t expected = report->snapshot_seq + 1;
  for (size_t i = 0; i < segments.size(); ++i) {
    const uint64_t seq = segments[i];
    const std::string path = dir_->WalPath(seq);
    absl::Status stop;
    if (seq != expected) {
      stop = absl::DataLossError(
          absl::StrCat("log segment ", dir_->WalPath(expected), " is missing"));
    } else {
      absl::StatusOr<MappedFile> file = MappedFile::Open(path);
      if (!file.ok()) return file.status();
      const bool newest = i + 1 == segments.size();
      const WalSegmentReplay replay =
          ReplayWalSegment(file->data(), seq, newest, apply);
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
  return absl::OkStatus();
}

absl::Status StoreDurability::Commit() {
  if (wal_ == nullptr) {
    return absl::FailedPreconditionError("durability not recovered yet");
  }
  return wal_->Commit();
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
  const absl::Time start = absl::Now();
  // Everything logged in segments <= covered is already in the store (it
  // was applied under the shard lock before it was appended).
  absl::StatusOr<uint64_t> covered = wal_->Rotate();
  if (!covered.ok()) {
    ++snapshot_failures_;
    return covered.status();
  }
  last_snapshot_time_ = start;
  const SnapshotMetadata metadata =
      metadata_provider_ ? metadata_provider_() : SnapshotMetadata{};
  absl::StatusOr<SnapshotWriteResult> written =
      WriteSnapshot(*dir_, *covered, *store_, metadata);
  if (!written.ok()) {
    ++snapshot_failures_;
    spdlog::error("snapshot {} failed: {}", *covered,
                  written.status().ToString());
    return written.status();
  }
  ++snapshots_written_;
  last_snapshot_bytes_ = written->bytes;
  last_snapshot_users_ = written->users;
  spdlog::info("snapshot {}: {} users, {} bytes in {}", *covered,
               written->users, written->bytes,
               absl::FormatDuration(absl::Now() - start));
  if (latest_snapshot_ != 0) fallback_snapshot_ = latest_snapshot_;
  latest_snapshot_ = *covered;
  RemoveObsoleteFiles(*covered);
  return absl::OkStatus();
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
                   ErrnoStatus("unlink", path).ToString());
    }
  }
}

void StoreDurability::SyncLoop() {
  if (options_.fsync != FsyncPolicy::kInterval) return;
  const auto period = absl::ToChronoMilliseconds(options_.fsync_interval);
  MutexLock lock(&stop_mu_);
  while (!stop_mu_.AwaitWithTimeout(
      stop_cv_, period,
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; })) {
    stop_mu_.Unlock();
    if (absl::Status s = wal_->Sync(); !s.ok()) {
      spdlog::error("write-ahead log fsync failed: {}", s.ToString());
    }
    stop_mu_.Lock();
  }
}

void StoreDurability::SnapshotLoop() {
  const bool by_time = options_.snapshot_interval > absl::ZeroDuration();
  const bool by_size = options_.snapshot_wal_bytes > 0;
  if (!by_time && !by_size) return;
  MutexLock lock(&stop_mu_);
  while (!stop_mu_.AwaitWithTimeout(
      stop_cv_, kSnapshotPollPeriod,
      [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; })) {
    stop_mu_.Unlock();
    {
      MutexLock snap(&snapshot_mu_);
      const bool due =
          (by_time &&
           absl::Now() - last_snapshot_time_ >= options_.snapshot_interval) ||
          (by_size && wal_->segment_bytes() >= options_.snapshot_wal_bytes);
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
  if (sync_thread_.joinable()) sync_thread_.join();
  if (snapshot_thread_.joinable()) snapshot_thread_.join();
  if (wal_ == nullptr) return absl::OkStatus();  // never recovered
  absl::Status s;
  if (final_snapshot) s = Snapshot();
  store_->SetJournal(nullptr);
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
  if (wal_ != nullptr) st.wal = wal_->stats();
  st.snapshots_written = snapshots_written_.load();
  st.snapshot_failures = snapshot_failures_.load();
  st.last_snapshot_bytes = last_snapshot_bytes_.load();
  st.last_snapshot_users = last_snapshot_users_.load();
  return st;
}

}  // namespace exposure_filter
