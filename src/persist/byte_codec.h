// Little-endian fixed-width encoding for the log and snapshot files, and a
// bounds-checked reader: decoding a damaged file fails, it never reads past
// the end of its input.
#ifndef EXPOSURE_FILTER_SRC_PERSIST_BYTE_CODEC_H_
#define EXPOSURE_FILTER_SRC_PERSIST_BYTE_CODEC_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/base/internal/endian.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

inline void PutU8(std::string* out, uint8_t v) {
  out->push_back(static_cast<char>(v));
}
inline void PutU16(std::string* out, uint16_t v) {
  char b[2];
  absl::little_endian::Store16(b, v);
  out->append(b, 2);
}
inline void PutU32(std::string* out, uint32_t v) {
  char b[4];
  absl::little_endian::Store32(b, v);
  out->append(b, 4);
}
inline void PutU64(std::string* out, uint64_t v) {
  char b[8];
  absl::little_endian::Store64(b, v);
  out->append(b, 8);
}
inline void PutI64(std::string* out, int64_t v) {
  PutU64(out, static_cast<uint64_t>(v));
}
inline void PutF64(std::string* out, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutU64(out, bits);
}
// u32 length, then the bytes.
inline void PutString32(std::string* out, absl::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

class ByteReader {
 public:
  explicit ByteReader(absl::string_view data) : data_(data) {}

  bool U8(uint8_t* v) {
    if (data_.size() < 1) return false;
    *v = static_cast<uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return true;
  }
  bool U16(uint16_t* v) { return Fixed(v, 2, absl::little_endian::Load16); }
  bool U32(uint32_t* v) { return Fixed(v, 4, absl::little_endian::Load32); }
  bool U64(uint64_t* v) { return Fixed(v, 8, absl::little_endian::Load64); }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool F64(double* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    std::memcpy(v, &u, sizeof u);
    return true;
  }
  bool Bytes(size_t n, absl::string_view* v) {
    if (data_.size() < n) return false;
    *v = data_.substr(0, n);
    data_.remove_prefix(n);
    return true;
  }
  bool String32(absl::string_view* v) {
    uint32_t n;
    return U32(&n) && Bytes(n, v);
  }
  size_t remaining() const { return data_.size(); }

 private:
  template <typename T, typename Load>
  bool Fixed(T* v, size_t n, Load load) {
    if (data_.size() < n) return false;
    *v = static_cast<T>(load(data_.data()));
    data_.remove_prefix(n);
    return true;
  }

  absl::string_view data_;
};

// The (surface, user) prefix every per-user log record starts with: the
// surface name behind a u8 length (names are at most 64 bytes), then the user
// id behind a u32 length. Decoding rejects an empty user id; whether an empty
// surface (the default one) is allowed is the record type's call.
inline void PutSurfaceUser(std::string* out, absl::string_view surface,
                           absl::string_view user_id) {
  PutU8(out, static_cast<uint8_t>(surface.size()));
  out->append(surface.data(), surface.size());
  PutString32(out, user_id);
}
inline bool ReadSurfaceUser(ByteReader& r, absl::string_view* surface,
                            absl::string_view* user_id) {
  uint8_t surface_bytes = 0;
  return r.U8(&surface_bytes) && r.Bytes(surface_bytes, surface) &&
         r.String32(user_id) && !user_id->empty();
}

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_PERSIST_BYTE_CODEC_H_
