#include "src/persist/wal_reader.h"

#include "absl/strings/str_cat.h"
#include "src/persist/data_dir.h"
#include "src/persist/record_frame.h"

namespace exposure_filter {

WalSegmentReplay ReplayWalSegment(
    absl::string_view data, uint64_t seq, bool newest,
    absl::FunctionRef<void(const WalRecord&)> apply) {
  return ReplayWalSegment(data, seq, newest, apply,
                          [](uint8_t, absl::string_view) { return false; });
}

WalSegmentReplay ReplayWalSegment(
    absl::string_view data, uint64_t seq, bool newest,
    absl::FunctionRef<void(const WalRecord&)> apply,
    absl::FunctionRef<bool(uint8_t type, absl::string_view body)>
        apply_optional) {
  WalSegmentReplay out;
  if (data.size() < kFileHeaderBytes && newest) {
    // Died while creating the segment: nothing in it was acknowledged.
    out.torn_bytes = data.size();
    return out;
  }
  uint64_t header_seq = 0;
  if (absl::Status s = ParseFileHeader(data, kWalMagic, &header_seq); !s.ok()) {
    out.corruption = absl::DataLossError(absl::StrCat("header: ", s.message()));
    return out;
  }
  if (header_seq != seq) {
    out.corruption = absl::DataLossError(absl::StrCat(
        "header says segment ", header_seq, " (file renamed or copied?)"));
    return out;
  }
  size_t offset = kFileHeaderBytes;
  out.good_bytes = offset;
  WalRecord record;
  while (true) {
    Frame frame;
    const FrameParse parse = ParseFrame(data.substr(offset), &frame);
    if (parse == FrameParse::kEnd) break;
    if (parse == FrameParse::kTorn && newest) {
      out.torn_bytes = data.size() - offset;
      break;
    }
    if (parse != FrameParse::kOk) {
      out.corruption = absl::DataLossError(absl::StrCat(
          parse == FrameParse::kTorn ? "truncated record at offset "
                                     : "checksum mismatch at offset ",
          offset));
      break;
    }
    if (frame.type >= kFirstOptionalRecordType) {
      if (apply_optional(frame.type, frame.body)) {
        ++out.records;
      } else {
        ++out.skipped_optional;
      }
    } else if (absl::Status s =
                   DecodeWalRecord(frame.type, frame.body, &record);
               !s.ok()) {
      out.corruption =
          absl::DataLossError(absl::StrCat(s.message(), " at offset ", offset));
      break;
    } else {
      apply(record);
      ++out.records;
    }
    offset += frame.size;
    out.good_bytes = offset;
  }
  return out;
}

}  // namespace exposure_filter
