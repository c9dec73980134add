// Snapshots: every user's filter written to one file, and read back.
//
// File: the 32-byte header (data_dir.h, magic "EXPFSNAP", sequence = the
// newest log segment whose records the snapshot holds), then RecordFrames
// (record_frame.h), all integers little-endian:
//
//   type 16 Surface: u16 id (local to this file), u8 name bytes, name,
//           i64 slice_span_ms, i64 retention_ms, f64 fp_rate
//   type 17 User: u16 surface id, u32 user bytes, user, u8 slices, per slice
//           { i64 index, i64 min_event_ms, i64 max_event_ms, u8 segments,
//             per segment { u32 num_blocks, u8 k, u64 count, u64 capacity,
//                           num_blocks x 64 bytes of bits } }
//   type 64 Metadata (optional): u32 key bytes, key, u32 value bytes, value
//           (extension point: e.g. consumed Kafka offsets)
//   type 32 End: u64 users, u64 frames before End, u64 XXH3-64 of every
//           byte of the file before the End frame
//
// A snapshot is valid only if every frame checks, End is present, its counts
// and whole-file hash match, and nothing follows it. Only live slices are
// written; capacity is kept so a restored slice grows exactly as before.
//
// Writing visits one shard at a time under that shard's reader lock, copies
// its users into a buffer and writes the buffer after releasing the lock, to
// <name>.tmp; then fdatasync, rename, fsync of the directory.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_SNAPSHOT_H_
#define EXPOSURE_FILTER_SRC_PERSIST_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/persist/data_dir.h"
#include "src/store/sharded_filter_store.h"
#include "src/store/surface_registry.h"

namespace exposure_filter {

enum SnapshotRecordType : uint8_t {
  kSnapshotSurface = 16,
  kSnapshotUser = 17,
  // INTERIM (f2core, until f2wire's snapshot records land): a user whose
  // filter holds format-2 runs. Same body as kSnapshotUser with, after each
  // slice's segments, u8 runs and per run u32 capacity, u8 open,
  // string32 FingerprintRun::Serialize(). A previous release rejects it as
  // an unknown record type, as it must.
  kSnapshotUserRuns = 18,
  kSnapshotEnd = 32,
  kSnapshotMetadata = 64,
};

using SnapshotMetadata = std::vector<std::pair<std::string, std::string>>;

struct SnapshotWriteResult {
  std::string path;
  uint64_t users = 0;
  uint64_t bytes = 0;
};

// Writes snapshot `seq` of `store` into `dir` atomically.
absl::StatusOr<SnapshotWriteResult> WriteSnapshot(
    const DataDir& dir, uint64_t seq, const ShardedFilterStore& store,
    const SnapshotMetadata& metadata);

struct SnapshotLoadResult {
  uint64_t users = 0;
  uint64_t expired_users = 0;  // held only slices that aged out meanwhile
  SnapshotMetadata metadata;
};

// Loads snapshot file `data` (named as snapshot `seq`) into `store`, creating
// its surfaces in `surfaces`. DataLoss when the file is damaged (the store
// may then hold part of it: Clear() it); FailedPrecondition when it cannot
// be used with this configuration (a surface's slice_span changed, too many
// surfaces).
absl::StatusOr<SnapshotLoadResult> LoadSnapshot(absl::string_view data,
                                                uint64_t seq,
                                                SurfaceRegistry* surfaces,
                                                ShardedFilterStore* store);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_SNAPSHOT_H_
