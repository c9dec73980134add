// Constants of the portable filter format returned by GetFilter. The full
// byte-level specification is docs/filter-format.md; this header only names
// its numbers so the encoder and decoders cannot disagree.
//
// Format 2 (what the server encodes) carries per-slice fingerprint runs and
// the legacy Bloom segments of slices written before it; format 1 (what the
// previous release served: Bloom segments only) is still decoded, since a
// client may hold a cached format-1 filter.
#ifndef EXPOSURE_FILTER_FILTER_FORMAT_H_
#define EXPOSURE_FILTER_FILTER_FORMAT_H_

#include <cstdint>

namespace exposure_filter::format {

// --- Shared by both versions ----------------------------------------------
inline constexpr char kMagic[4] = {'E', 'X', 'P', 'F'};
inline constexpr uint32_t kTrailerBytes = 8;
inline constexpr uint8_t kHashXxh3_64 = 1;
// Bounds a decoder enforces (and the encoder never exceeds): 8 live slices of
// at most 8 Bloom segments each; 2^26 blocks (4 GiB) per segment.
inline constexpr uint32_t kMaxSlices = 8;
inline constexpr uint32_t kMaxSegmentsPerSlice = 8;
inline constexpr uint32_t kMaxSegments = kMaxSlices * kMaxSegmentsPerSlice;
inline constexpr uint32_t kMaxBlocksPerSegment = 1u << 26;
// The false-positive target a surface may configure (FilterPolicy).
inline constexpr double kMinFpRate = 1e-6;
inline constexpr double kMaxFpRate = 0.5;

// --- Format 1 (previous release) -------------------------------------------
inline constexpr uint16_t kVersion1 = 1;
inline constexpr uint32_t kHeaderBytes = 32;  // format 1 header
inline constexpr uint32_t kSegmentHeaderBytes = 32;
inline constexpr uint8_t kBlockBytesLog2 = 6;

// --- Format 2 (current) ----------------------------------------------------
inline constexpr uint16_t kVersion2 = 2;
// The version the server encodes.
inline constexpr uint16_t kVersion = kVersion2;
//   0 magic[4] | 4 u16 version | 6 u8 hash algorithm | 7 u8 slice count S
//   8 f64 delta | 16 i64 slice span ms
inline constexpr uint32_t kHeader2Bytes = 24;
//   i64 start_ms | u8 Bloom segment count G | u8 run count R
inline constexpr uint32_t kSlice2Bytes = 10;
//   u32 num_blocks | u8 k
inline constexpr uint32_t kSegment2Bytes = 5;
//   u32 L | L bytes: FingerprintRun::Serialize() (its 10-byte header and
//   payload), so a run takes kRunLengthBytes + L bytes in all
inline constexpr uint32_t kRunLengthBytes = 4;
// FingerprintRun::Serialize()'s header: u8 b | u8 k | u32 n | u32 U - 1.
inline constexpr uint32_t kRunHeaderBytes = 10;
// A run's payload (L - kRunHeaderBytes bytes) is shorter than this, i.e.
// under 2^32 - 64 bits: bit positions inside a run fit 32 bits with a 64-bit
// word to spare (FingerprintRun's skip entries and word reads), and every
// q * 2^k of a code (q < 2^32, k <= 31) stays below 2^63. Decoders check it
// before reading a payload byte; the encoder never writes more.
inline constexpr uint32_t kMaxRunPayloadBytes = (1u << 29) - 8;
// The u8 field bounds it; the sizing policy stays far below (each new run of
// a slice costs at least one more bit of precision, and b <= 32).
inline constexpr uint32_t kMaxRunsPerSlice = 255;
// The smallest slice span a surface may configure (1 s).
inline constexpr int64_t kMinSliceSpanMs = 1000;

}  // namespace exposure_filter::format

#endif  // EXPOSURE_FILTER_FILTER_FORMAT_H_
