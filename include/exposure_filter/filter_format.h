// Constants of the portable filter format returned by GetFilter. The full
// byte-level specification is docs/filter-format.md; this header only names
// its numbers so the encoder and decoders cannot disagree.
#ifndef EXPOSURE_FILTER_FILTER_FORMAT_H_
#define EXPOSURE_FILTER_FILTER_FORMAT_H_

#include <cstdint>

namespace exposure_filter::format {

inline constexpr char kMagic[4] = {'E', 'X', 'P', 'F'};
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kHeaderBytes = 32;
inline constexpr uint32_t kSegmentHeaderBytes = 32;
inline constexpr uint32_t kTrailerBytes = 8;
inline constexpr uint8_t kHashXxh3_64 = 1;
inline constexpr uint8_t kBlockBytesLog2 = 6;
// Bounds a decoder enforces (and the encoder never exceeds): 8 live slices of
// at most 8 segments each; 2^26 blocks (4 GiB) per segment.
inline constexpr uint32_t kMaxSegments = 64;
inline constexpr uint32_t kMaxBlocksPerSegment = 1u << 26;

}  // namespace exposure_filter::format

#endif  // EXPOSURE_FILTER_FILTER_FORMAT_H_
