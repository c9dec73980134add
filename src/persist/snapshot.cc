#include "src/persist/snapshot.h"

#include <fcntl.h>
#include <unistd.h>
// XXH3_state_t on the stack needs the static-linking declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstdio>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "exposure_filter/bloom_probe.h"
#include "src/persist/byte_codec.h"
#include "src/persist/posix_file.h"
#include "src/persist/record_frame.h"
#include "src/persist/snapshot_user_record.h"

namespace exposure_filter {
namespace {

static_assert(kSnapshotUser == kSnapshotUserRecordV1 &&
                  kSnapshotUserParts == kSnapshotUserRecordV2,
              "snapshot.h and snapshot_user_record.h name the same types");

void EncodeSurface(const Surface& s, std::string* out) {
  std::string body;
  PutU16(&body, s.id);
  PutU8(&body, static_cast<uint8_t>(s.name.size()));
  body.append(s.name);
  PutI64(&body, s.policy.slice_span_ms());
  PutI64(&body, s.policy.retention_ms());
  PutF64(&body, s.policy.fp_rate());
  AppendFrame(kSnapshotSurface, body, out);
}

class SnapshotFile {
 public:
  SnapshotFile(std::string path, int fd, DiskIo* io)
      : path_(std::move(path)), fd_(fd), io_(io) {
    XXH3_64bits_reset(&hash_);
  }
  ~SnapshotFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status Write(absl::string_view data) {
    XXH3_64bits_update(&hash_, data.data(), data.size());
    bytes_ += data.size();
    return WriteFully(fd_, data, path_, io_);
  }
  uint64_t hash() { return XXH3_64bits_digest(&hash_); }
  uint64_t bytes() const { return bytes_; }
  absl::Status SyncAndClose() {
    absl::Status s = SyncFile(fd_, path_, io_);
    if (::close(fd_) != 0 && s.ok()) s = ErrnoStatus("close", path_);
    fd_ = -1;
    return s;
  }

 private:
  const std::string path_;
  int fd_;
  DiskIo* const io_;
  XXH3_state_t hash_;
  uint64_t bytes_ = 0;
};

absl::Status Malformed(absl::string_view what, size_t offset) {
  return absl::DataLossError(
      absl::StrCat("malformed ", what, " record at offset ", offset));
}

}  // namespace

absl::StatusOr<SnapshotWriteResult> WriteSnapshot(
    const DataDir& dir, uint64_t seq, const ShardedFilterStore& store,
    const SnapshotMetadata& metadata) {
  SnapshotWriteResult result;
  result.path = dir.SnapshotPath(seq);
  const std::string tmp = absl::StrCat(result.path, ".tmp");
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", tmp);
  // Every failure below removes the .tmp: a full disk keeps the space the
  // previous snapshot and the log need, and the previous snapshot is never
  // touched (the new one replaces it only by rename(2), once complete).
  SnapshotFile file(tmp, fd, dir.io());
  uint64_t frames = 0;
  std::string chunk = EncodeFileHeader(kSnapshotMagic, seq);
  for (const auto& [key, value] : metadata) {
    std::string body;
    PutString32(&body, key);
    PutString32(&body, value);
    AppendFrame(kSnapshotMetadata, body, &chunk);
    ++frames;
  }
  std::vector<bool> surface_written;
  std::string body;
  for (int shard = 0; shard < store.num_shards(); ++shard) {
    // Aging is judged once per shard, like the sweeper.
    const int64_t now = store.clock().NowMs();
    store.VisitShard(shard,
                     [&](const Surface& surface, absl::string_view user_id,
                         const UserFilter& filter) {
                       body.clear();
                       if (!EncodeUserRecord(surface.id, user_id, filter,
                                             surface.policy, now, &body)) {
                         return;
                       }
                       if (surface_written.size() <= surface.id) {
                         surface_written.resize(surface.id + 1);
                       }
                       if (!surface_written[surface.id]) {
                         EncodeSurface(surface, &chunk);
                         surface_written[surface.id] = true;
                         ++frames;
                       }
                       AppendFrame(kSnapshotUserParts, body, &chunk);
                       ++frames;
                       ++result.users;
                     });
    // The shard lock is released: the disk write stalls nobody.
    if (absl::Status s = file.Write(chunk); !s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
    chunk.clear();
  }
  std::string end;
  PutU64(&end, result.users);
  PutU64(&end, frames);
  PutU64(&end, file.hash());
  AppendFrame(kSnapshotEnd, end, &chunk);
  absl::Status s = file.Write(chunk);
  if (s.ok()) s = file.SyncAndClose();
  if (s.ok() && ::rename(tmp.c_str(), result.path.c_str()) != 0) {
    s = ErrnoStatus("rename", tmp);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (s = SyncDirectory(dir.path(), dir.io()); !s.ok()) return s;
  result.bytes = file.bytes();
  return result;
}

absl::StatusOr<SnapshotLoadResult> LoadSnapshot(absl::string_view data,
                                                uint64_t seq,
                                                SurfaceRegistry* surfaces,
                                                ShardedFilterStore* store) {
  uint64_t header_seq = 0;
  if (absl::Status s = ParseFileHeader(data, kSnapshotMagic, &header_seq);
      !s.ok()) {
    return absl::DataLossError(absl::StrCat("header: ", s.message()));
  }
  if (header_seq != seq) {
    return absl::DataLossError(
        absl::StrCat("header says snapshot ", header_seq));
  }
  SnapshotLoadResult result;
  absl::flat_hash_map<uint16_t, const Surface*> by_id;
  const int64_t now = store->clock().NowMs();
  uint64_t frames = 0, users = 0;
  size_t offset = kFileHeaderBytes;
  XXH3_state_t hash;
  XXH3_64bits_reset(&hash);
  XXH3_64bits_update(&hash, data.data(), kFileHeaderBytes);
  while (true) {
    Frame frame;
    const FrameParse parse = ParseFrame(data.substr(offset), &frame);
    if (parse == FrameParse::kEnd) {
      return absl::DataLossError("ends without its End record (truncated)");
    }
    if (parse != FrameParse::kOk) {
      return absl::DataLossError(absl::StrCat(
          parse == FrameParse::kTorn ? "truncated" : "checksum mismatch",
          " at offset ", offset));
    }
    if (frame.type == kSnapshotEnd) {
      ByteReader r(frame.body);
      uint64_t end_users = 0, end_frames = 0, end_hash = 0;
      if (!r.U64(&end_users) || !r.U64(&end_frames) || !r.U64(&end_hash) ||
          r.remaining() != 0) {
        return Malformed("End", offset);
      }
      if (end_users != users || end_frames != frames ||
          end_hash != XXH3_64bits_digest(&hash)) {
        return absl::DataLossError(
            "End record does not match the file (records missing or "
            "reordered)");
      }
      if (offset + frame.size != data.size()) {
        return absl::DataLossError(
            absl::StrCat("unexpected bytes after the End record at offset ",
                         offset + frame.size));
      }
      return result;
    }
    ++frames;
    XXH3_64bits_update(&hash, data.data() + offset, frame.size);
    switch (frame.type) {
      case kSnapshotSurface: {
        ByteReader r(frame.body);
        uint16_t id = 0;
        uint8_t name_bytes = 0;
        absl::string_view name;
        int64_t span_ms = 0, retention_ms = 0;
        double fp = 0;
        if (!r.U16(&id) || !r.U8(&name_bytes) || !r.Bytes(name_bytes, &name) ||
            !r.I64(&span_ms) || !r.I64(&retention_ms) || !r.F64(&fp) ||
            r.remaining() != 0) {
          return Malformed("Surface", offset);
        }
        absl::StatusOr<const Surface*> surface = surfaces->GetOrCreate(name);
        if (!surface.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "surface \"", name, "\": ", surface.status().message()));
        }
        // Slice indexes are positions on the slice_span grid: with another
        // span they would name other times, so the filters cannot be used.
        if ((*surface)->policy.slice_span_ms() != span_ms) {
          return absl::FailedPreconditionError(absl::StrCat(
              "surface \"", name, "\" was saved with slice_span ",
              absl::FormatDuration(absl::Milliseconds(span_ms)),
              " but is configured with ",
              absl::FormatDuration(
                  absl::Milliseconds((*surface)->policy.slice_span_ms())),
              "; restart with the old slice_span (or move the data_dir "
              "away to start empty)"));
        }
        by_id[id] = *surface;
        break;
      }
      case kSnapshotUser:         // the previous release's (Bloom slices)
      case kSnapshotUserParts: {  // FilterParts (snapshot_user_record.h)
        absl::StatusOr<DecodedUserRecord> record =
            DecodeUserRecord(frame.type, frame.body);
        if (!record.ok()) {
          return Malformed(
              absl::StrCat("User (", record.status().message(), ")"), offset);
        }
        auto it = by_id.find(record->surface_id);
        if (it == by_id.end())
          return Malformed("User (unknown surface)", offset);
        const absl::string_view user_id = record->user_id;
        absl::StatusOr<UserFilter> parts_filter = UserFilter::FromParts(
            it->second->policy, std::move(record->parts), "");
        if (!parts_filter.ok()) {
          return Malformed(
              absl::StrCat("User (", parts_filter.status().message(), ")"),
              offset);
        }
        UserFilter filter = *std::move(parts_filter);
        ++users;
        // Aging applies across the restart: slices that expired while the
        // server was down are dropped, not resurrected.
        filter.DropExpired(it->second->policy, now);
        if (filter.empty()) {
          ++result.expired_users;
          break;
        }
        store->LoadUser(*it->second, user_id, std::move(filter));
        ++result.users;
        break;
      }
      case kSnapshotMetadata: {
        ByteReader r(frame.body);
        absl::string_view key, value;
        if (!r.String32(&key) || !r.String32(&value) || r.remaining() != 0) {
          return Malformed("Metadata", offset);
        }
        result.metadata.emplace_back(std::string(key), std::string(value));
        break;
      }
      default:
        if (frame.type < kFirstOptionalRecordType) {
          return absl::DataLossError(
              absl::StrCat("unknown record type ", frame.type, " at offset ",
                           offset, " (written by a newer version?)"));
        }
        break;  // an optional extension this build does not know
    }
    offset += frame.size;
  }
}

}  // namespace exposure_filter
