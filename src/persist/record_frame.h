// RecordFrame: how every record of the write-ahead log and of a snapshot is
// laid out on disk, and how a reader tells a torn tail from corruption.
//
//   offset size
//   0      4    L: bytes of type + body (1 .. kMaxFrameBytes)
//   4      4    low 32 bits of XXH3-64(the 4 bytes of L, seed 0)
//   8      8    XXH3-64(type + body, seed L)
//   16     1    record type
//   17     L-1  body
//
// The length has its own check so a bit flip in it is caught as corruption
// rather than read as "the file ends inside this record". Record types
// 1..63 must be understood by a reader; 64..255 are optional extensions a
// reader that does not know them skips (later features add records without
// breaking older binaries' recovery).
#ifndef EXPOSURE_FILTER_SRC_PERSIST_RECORD_FRAME_H_
#define EXPOSURE_FILTER_SRC_PERSIST_RECORD_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace exposure_filter {

inline constexpr size_t kFrameHeaderBytes = 16;
// Largest frame a writer produces: a RecordExposure of 100,000 items is
// ~800 KB and a snapshot user record of a 2^26-block segment is 4 GiB in
// theory; the store never builds one beyond ~64 MiB of bits per user.
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;
inline constexpr uint8_t kFirstOptionalRecordType = 64;

// Appends one frame (header, type, body) to *out.
void AppendFrame(uint8_t type, absl::string_view body, std::string* out);

enum class FrameParse {
  kOk,       // a whole, valid frame
  kEnd,      // no bytes left: a clean end
  kTorn,     // the input ends inside this frame (or only zeros remain)
  kCorrupt,  // a checksum or length check failed with data after it
};

struct Frame {
  uint8_t type = 0;
  absl::string_view body;
  size_t size = 0;  // bytes the frame occupies, header included
};

// Parses the frame at the start of `data` (the rest of a file). A frame
// whose payload checksum fails but which ends exactly at the end of `data`
// is kTorn: it is the last thing written and the write did not complete.
FrameParse ParseFrame(absl::string_view data, Frame* frame);

// True when a frame header (16 bytes) announces a frame of `length` bytes
// with a valid length check; used by streaming readers before they read the
// body.
bool FrameHeaderValid(absl::string_view header, uint32_t* length);
// Checks the body checksum of a frame whose header is valid.
bool FramePayloadValid(absl::string_view header, absl::string_view payload);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_RECORD_FRAME_H_
