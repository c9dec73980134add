#include "src/persist/record_frame.h"

// XXH3_state_t on the stack needs the static-linking declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>

#include "src/persist/byte_codec.h"

namespace exposure_filter {
namespace {

uint32_t LengthCheck(uint32_t length) {
  char b[4];
  absl::little_endian::Store32(b, length);
  return static_cast<uint32_t>(XXH3_64bits(b, sizeof b));
}

bool AllZero(absl::string_view data) {
  return std::all_of(data.begin(), data.end(), [](char c) { return c == 0; });
}

}  // namespace

void AppendFrame(uint8_t type, absl::string_view body, std::string* out) {
  const uint32_t length = static_cast<uint32_t>(body.size() + 1);
  XXH3_state_t state;
  XXH3_64bits_reset_withSeed(&state, length);
  XXH3_64bits_update(&state, &type, 1);
  XXH3_64bits_update(&state, body.data(), body.size());
  PutU32(out, length);
  PutU32(out, LengthCheck(length));
  PutU64(out, XXH3_64bits_digest(&state));
  PutU8(out, type);
  out->append(body.data(), body.size());
}

bool FrameHeaderValid(absl::string_view header, uint32_t* length) {
  if (header.size() < kFrameHeaderBytes) return false;
  ByteReader r(header);
  uint32_t check = 0;
  r.U32(length);
  r.U32(&check);
  return *length >= 1 && *length <= kMaxFrameBytes &&
         check == LengthCheck(*length);
}

bool FramePayloadValid(absl::string_view header, absl::string_view payload) {
  ByteReader r(header);
  uint32_t length = 0, check = 0;
  uint64_t sum = 0;
  r.U32(&length);
  r.U32(&check);
  r.U64(&sum);
  return payload.size() == length &&
         XXH3_64bits_withSeed(payload.data(), payload.size(), length) == sum;
}

FrameParse ParseFrame(absl::string_view data, Frame* frame) {
  if (data.empty()) return FrameParse::kEnd;
  // A power cut can leave the tail of a file zero-filled (the size was
  // extended before the data reached the disk): that is a torn write too.
  if (data.size() < kFrameHeaderBytes || AllZero(data)) {
    return FrameParse::kTorn;
  }
  uint32_t length = 0;
  if (!FrameHeaderValid(data.substr(0, kFrameHeaderBytes), &length)) {
    return FrameParse::kCorrupt;
  }
  const size_t total = kFrameHeaderBytes + length;
  if (data.size() < total) return FrameParse::kTorn;
  const absl::string_view payload = data.substr(kFrameHeaderBytes, length);
  if (!FramePayloadValid(data.substr(0, kFrameHeaderBytes), payload)) {
    return data.size() == total ? FrameParse::kTorn : FrameParse::kCorrupt;
  }
  frame->type = static_cast<uint8_t>(payload[0]);
  frame->body = payload.substr(1);
  frame->size = total;
  return FrameParse::kOk;
}

}  // namespace exposure_filter
