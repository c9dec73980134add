#include "src/filter/user_filter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "exposure_filter/filter_format.h"
#include "src/filter/candidate_sort.h"
#include "src/filter/claim_index.h"
#include "src/filter/rice_model.h"
#include "src/filter/run_sizing.h"

namespace exposure_filter {

// Legacy format-1 slices: read-only, their expected FP rate charged to F.
struct UserFilter::Legacy {
  BloomSlices slices;
  double fp = 0;  // LegacyFpRate: what it adds to F
};

namespace {

// Header::key_len of a key of >= 65535 bytes, whose u32 length then sits in
// the 4 bytes before the header.
constexpr uint16_t kLongKey = 0xffff;
constexpr uint8_t kHasLegacy = 1;

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// --- Varint tables ---------------------------------------------------------

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
uint64_t GetVarint(const unsigned char*& p) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const unsigned char c = *p++;
    v |= uint64_t{c & 0x7fu} << shift;
    if (c < 0x80) return v;
  }
}
uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Fixed-length little-endian fields of a slice's head (event times: a
// varint spends 1 bit in 8 on continuation, e.g. 5 bytes for the 29 bits of
// a 5-day span in ms; 4 bytes here plus 3 bits of length in the head).
// Length codes 0..6 are that many bytes; 7 is 8 bytes.
int LenCode(uint64_t v) {
  int n = 0;
  for (; v != 0; v >>= 8) ++n;
  return n >= 7 ? 7 : n;
}
int CodeBytes(int code) { return code == 7 ? 8 : code; }
void PutFixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> 8 * i));
}
uint64_t GetFixed(const unsigned char*& p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{*p++} << 8 * i;
  return v;
}

// Slice head, a fixed u16: the quiet count, the run count (kHeadManyRuns),
// the length codes
// of |min - previous slice's max| and of max - min, min's sign, and whether
// the index differs from the previous slice's + 1 (then its zigzag delta
// follows as a varint).
constexpr int kHeadRunsShift = 4;
// Run count field value meaning "15 or more: a varint of the excess follows"
// (a slice holds up to kMaxRunsPerSlice = 64: a fast-growing slice of a
// 50,000-item user would open 256 without that cap).
constexpr uint64_t kHeadManyRuns = 15;
constexpr int kHeadMinLenShift = 8;
constexpr int kHeadSpanLenShift = 11;
constexpr uint16_t kHeadMinNegative = 1 << 14;
constexpr uint16_t kHeadIndexJump = 1 << 15;

// A run: count (varint); `packed` (varint): bits 0-4 b - 1, bit 5 open,
// bit 6 tail (the tail of the open run before it), bits 7.. the rest:
// zigzag(k - CanonicalRiceK) << 3 | kRunWide | kRunSpare; capacity - count
// (varint; open runs, and sealed ones with kRunSpare); a sealed run's U
// (varint, kUniverseShift); the differences of weight (sealed runs) and
// payload bits to their expected values (one nibble byte or varints,
// kRunWide). `packed` is one byte when k is the canonical one, a sealed run
// is full (always, unless loaded from parts that say otherwise) and its
// differences fit the nibbles.
constexpr uint64_t kRunOpen = 1 << 5;
constexpr uint64_t kRunTail = 1 << 6;
// A sealed run's U: (U >> 8) << 1 if a multiple of 256 (as RunSizing seals,
// kSealedUniverseQuantum), else (U - 1) << 1 | 1.
constexpr int kUniverseShift = 8;
constexpr int kRunRestShift = 7;
constexpr uint64_t kRunSpare = 1;  // in the rest: a sealed run not full
// In the rest: a sealed run's weight and payload differences are varints.
// Without it they are the two nibbles of one byte (both zigzags < 16: the
// common case, the differences are a few units).
constexpr uint64_t kRunWide = 2;

// Expected weight (RunMeta::weight) of n fingerprints at (b, u): an item
// lands on f with probability c_f / 2^b, so a stored f covers E[c_f] =
// sum c^2 / 2^b prefixes (size-biased), with u - h fingerprints covering
// floor(2^b / u) prefixes and h = 2^b mod u one more. Stored as the
// difference, a few units instead of 2 varint bytes.
int64_t ExpectedWeight(uint64_t n, int b, uint64_t u) {
  const uint64_t full = uint64_t{1} << b;
  if (u >= full) return static_cast<int64_t>(n);
  const uint64_t lo = full / u;
  const uint64_t hi_count = full - lo * u;
  const double lo_d = static_cast<double>(lo);
  const double mean_c =
      (static_cast<double>(u - hi_count) * lo_d * lo_d +
       static_cast<double>(hi_count) * (lo_d + 1) * (lo_d + 1)) /
      static_cast<double>(full);
  return std::llround(static_cast<double>(n) * mean_c);
}

// P(a fresh item passes every segment of a legacy slice), each segment at
// its expected rate for its count (bloom_math.h), the rate format 1 reports.
double LegacySliceClean(const BloomSlices::Slice& s) {
  double clean = 1.0;
  for (const BloomSlices::Segment& seg : s.segments) {
    clean *= 1.0 - seg.EstimatedFpRate();
  }
  return clean;
}

// The legacy slices' FP rate: 1 - P(a fresh item passes all of them).
double LegacyFpRate(const BloomSlices& b) {
  double clean = 1.0;
  for (const BloomSlices::Slice& s : b.slices()) clean *= LegacySliceClean(s);
  return 1.0 - clean;
}

bool LegacySliceClaims(const BloomSlices::Slice& s, uint64_t h) {
  for (const BloomSlices::Segment& seg : s.segments) {
    if (seg.MayContain(h)) return true;
  }
  return false;
}

// Record's per-item buffers (malloc and free were ~9% of a RecordExposure's
// server CPU): on the stack up to kWriteInlineItems items, the common call
// (20 per user); larger calls allocate. Nothing is kept between calls, so a
// thread holds no memory for the largest call it once saw.
constexpr size_t kWriteInlineItems = 64;
struct WriteScratch {
  absl::InlinedVector<uint64_t, kWriteInlineItems> keys, incoming;
  absl::InlinedVector<uint8_t, kWriteInlineItems> fresh;
  absl::InlinedVector<uint32_t, kWriteInlineItems> open_fps, run_fps;
  absl::InlinedVector<SplicePoint, kWriteInlineItems> open_at, run_at;
};
// SortKeysByHashPrefix's buffer, per thread for calls of up to
// kWriteInlineItems keys (at most 512 bytes kept per thread).
std::vector<uint64_t>& ThreadSortScratch() {
  thread_local std::vector<uint64_t> s;
  return s;
}

}  // namespace

// --- Allocation --------------------------------------------------------------

UserFilter::UserFilter(absl::string_view key) {
  std::vector<SlicePlan> none;
  Rebuild(none, nullptr, key);
}

UserFilter::~UserFilter() {
  if (h_ != nullptr) {
    delete ReadHead().legacy;
    Free(h_);
  }
}

UserFilter& UserFilter::operator=(UserFilter&& o) noexcept {
  if (this != &o) {
    if (h_ != nullptr) {
      delete ReadHead().legacy;
      Free(h_);
    }
    h_ = o.h_;
    o.h_ = nullptr;
  }
  return *this;
}

size_t UserFilter::AllocBytes(const Header* h) {
  size_t key_bytes = h->key_len;
  if (h->key_len == kLongKey) {
    uint32_t len;
    std::memcpy(&len, reinterpret_cast<const char*>(h + 1) + h->payload_bytes,
                sizeof(len));
    key_bytes = size_t{len} + sizeof(len);
  }
  return sizeof(Header) +
         BodyBytes(h->payload_bytes, key_bytes, h->table_bytes);
}

size_t UserFilter::BodyBytes(size_t payload_bytes, size_t key_bytes,
                             size_t table_bytes) {
  // The decoder reads one word past the payload's last (fingerprint_run.h):
  // the body reaches at least that far (key and tables mostly do anyway).
  return std::max(payload_bytes + key_bytes + table_bytes,
                  Align8(payload_bytes) + 8);
}

void UserFilter::Free(Header* h) {
  if (h == nullptr) return;
  h->~Header();
  ::operator delete(h);
}

absl::string_view UserFilter::key() const {
  if (h_ == nullptr) return {};
  const char* base =
      reinterpret_cast<const char*>(payload()) + h_->payload_bytes;
  size_t len = h_->key_len;
  if (len == kLongKey) {
    uint32_t long_len;
    std::memcpy(&long_len, base, 4);
    len = long_len;
    base += 4;
  }
  return absl::string_view(base, len);
}

UserFilter::TablesHead UserFilter::ReadHead() const {
  TablesHead th;
  if (h_ == nullptr) return th;
  const auto* p =
      reinterpret_cast<const unsigned char*>(key().data()) + key().size();
  const uint64_t head = GetVarint(p);
  if (head & kHasLegacy) {
    std::memcpy(&th.legacy, p, sizeof(th.legacy));
    p += sizeof(th.legacy);
  }
  th.slices = head >> 1;
  th.first_slice = p;
  return th;
}

UserFilter::SliceMeta UserFilter::ReadSliceHead(const unsigned char*& p,
                                                int64_t prev_index,
                                                uint64_t prev_max) {
  SliceMeta s;
  const uint16_t sh = static_cast<uint16_t>(GetFixed(p, 2));
  s.quiet = static_cast<uint8_t>(sh & 15);
  uint64_t runs = (sh >> kHeadRunsShift) & 15;
  if (runs == kHeadManyRuns) runs += GetVarint(p);
  s.num_runs = static_cast<int32_t>(runs);
  s.index = prev_index + 1;
  if (sh & kHeadIndexJump) s.index = prev_index + UnZigZag(GetVarint(p));
  // Unsigned: the differences wrap, exactly.
  const uint64_t dmin = GetFixed(p, CodeBytes((sh >> kHeadMinLenShift) & 7));
  const uint64_t min =
      (sh & kHeadMinNegative) ? prev_max - dmin : prev_max + dmin;
  const uint64_t span = GetFixed(p, CodeBytes((sh >> kHeadSpanLenShift) & 7));
  s.min_event_ms = static_cast<int64_t>(min);
  s.max_event_ms = static_cast<int64_t>(min + span);
  return s;
}

UserFilter::Tables UserFilter::Decode() const {
  Tables t;
  if (h_ == nullptr) return t;
  const TablesHead head = ReadHead();
  t.legacy = head.legacy;
  const unsigned char* p = head.first_slice;
  int64_t prev_index = -1;
  uint64_t prev_max = 0;
  uint64_t offset = 0;
  for (uint64_t i = 0; i < head.slices; ++i) {
    const SliceMeta s = ReadSliceHead(p, prev_index, prev_max);
    prev_index = s.index;
    prev_max = static_cast<uint64_t>(s.max_event_ms);
    t.slices.push_back(s);
    for (int j = 0; j < s.num_runs; ++j) {
      RunMeta r;
      r.count = static_cast<uint32_t>(GetVarint(p));
      const uint64_t packed = GetVarint(p);
      r.precision = static_cast<uint8_t>((packed & 31) + 1);
      r.open = (packed & kRunOpen) != 0;
      r.tail = (packed & kRunTail) != 0;
      const uint64_t rest = packed >> kRunRestShift;
      r.capacity = r.count;
      if (r.open || (rest & kRunSpare)) {
        r.capacity += static_cast<uint32_t>(GetVarint(p));
      }
      // An open run is a prefix run: U = 2^b, not stored.
      if (r.open) {
        r.universe = uint64_t{1} << r.precision;
      } else {
        const uint64_t u = GetVarint(p);
        r.universe = (u & 1) ? (u >> 1) + 1 : (u >> 1) << kUniverseShift;
      }
      r.rice_k = static_cast<uint8_t>(CanonicalRiceK(r.count, r.universe) +
                                      UnZigZag(rest >> 3));
      r.decoded = true;
      r.z_k = rest >> 3;
      uint64_t zw = 0, zb;
      if (!r.open && !(rest & kRunWide)) {
        const uint8_t both = *p++;
        zw = both & 15;
        zb = both >> 4;
      } else {
        if (!r.open) zw = GetVarint(p);
        zb = GetVarint(p);
      }
      r.weight = r.count;
      if (!r.open) {
        r.weight = static_cast<uint64_t>(
            ExpectedWeight(r.count, r.precision, r.universe) + UnZigZag(zw));
      }
      r.payload_bits = static_cast<uint32_t>(
          ExpectedRiceBits(r.count, r.universe, r.rice_k) + UnZigZag(zb));
      r.z_weight = zw;
      r.z_bits = zb;
      r.bit_offset = offset;
      offset += r.payload_bits;
      t.runs.push_back(r);
    }
  }
  return t;
}

FingerprintRunView UserFilter::View(const RunMeta& r) const {
  return FingerprintRunView(payload(), r.bit_offset, r.count, r.universe,
                            r.precision, r.rice_k, r.payload_bits);
}

std::vector<UserFilter::SlicePlan> UserFilter::Plan(const Tables& t) const {
  std::vector<SlicePlan> plan;
  plan.reserve(t.slices.size() + 1);
  size_t r = 0;
  for (const SliceMeta& s : t.slices) {
    SlicePlan sp;
    sp.meta = s;
    for (int j = 0; j < s.num_runs; ++j, ++r) {
      RunPlan rp;
      rp.meta = t.runs[r];
      rp.src = payload();
      sp.runs.push_back(std::move(rp));
    }
    plan.push_back(std::move(sp));
  }
  return plan;
}

void UserFilter::Rebuild(std::vector<SlicePlan>& plan, Legacy* legacy,
                         absl::string_view key) {
  // Runs to encode get their code; empty runs and slices are dropped.
  uint64_t total_bits = 0;
  std::string tables;
  tables.reserve(256);  // a few slices' and runs' entries: one allocation
  size_t live_slices = 0;
  for (SlicePlan& s : plan) {
    s.runs.erase(std::remove_if(s.runs.begin(), s.runs.end(),
                                [](const RunPlan& r) {
                                  return r.src == nullptr && !r.splice
                                             ? r.fps.empty()
                                             : r.meta.count == 0;
                                }),
                 s.runs.end());
    if (!s.runs.empty()) ++live_slices;
  }
  // Head: slice count and the legacy flag, then the legacy pointer.
  PutVarint(&tables, live_slices << 1 | (legacy != nullptr ? kHasLegacy : 0));
  if (legacy != nullptr) {
    tables.append(reinterpret_cast<const char*>(&legacy), sizeof(legacy));
  }
  int64_t prev_index = -1;
  uint64_t prev_max = 0;
  for (SlicePlan& s : plan) {
    if (s.runs.empty()) continue;
    // Event times exactly (ToParts returns them): min as its distance to
    // the previous slice's max (small for an in-order stream), max - min.
    const uint64_t min = static_cast<uint64_t>(s.meta.min_event_ms);
    const uint64_t span = static_cast<uint64_t>(s.meta.max_event_ms) - min;
    const bool negative = static_cast<int64_t>(min - prev_max) < 0;
    const uint64_t dmin = negative ? prev_max - min : min - prev_max;
    const int min_code = LenCode(dmin), span_code = LenCode(span);
    const bool jump = s.meta.index != prev_index + 1;
    const uint64_t runs = s.runs.size();
    PutFixed(&tables,
             uint64_t{std::min<uint8_t>(s.meta.quiet, 15)} |
                 std::min<uint64_t>(runs, kHeadManyRuns) << kHeadRunsShift |
                 uint64_t(min_code) << kHeadMinLenShift |
                 uint64_t(span_code) << kHeadSpanLenShift |
                 (negative ? kHeadMinNegative : 0) |
                 (jump ? kHeadIndexJump : 0),
             2);
    if (runs >= kHeadManyRuns) PutVarint(&tables, runs - kHeadManyRuns);
    if (jump) PutVarint(&tables, ZigZag(s.meta.index - prev_index));
    PutFixed(&tables, dmin, CodeBytes(min_code));
    PutFixed(&tables, span, CodeBytes(span_code));
    prev_index = s.meta.index;
    prev_max = min + span;
    for (RunPlan& r : s.runs) {
      if (r.splice) {
        r.meta.capacity = std::max(r.meta.capacity, r.meta.count);
      } else if (r.src == nullptr) {
        // Open runs are coded at the model's k, so that writes can splice
        // (AddToOpen); sealed runs at the exactly shortest of k - 1..k + 1.
        const RiceCode code =
            r.meta.open ? RiceCode::At(r.fps, CanonicalRiceK(r.fps.size(),
                                                             r.meta.universe))
                        : RiceCode::Choose(r.fps, r.meta.universe);
        r.meta.count = static_cast<uint32_t>(r.fps.size());
        r.meta.rice_k = static_cast<uint8_t>(code.k);
        r.meta.payload_bits = static_cast<uint32_t>(code.bits);
        r.meta.capacity = std::max(r.meta.capacity, r.meta.count);
        r.meta.weight = Weight(r.fps, r.meta.precision, r.meta.universe);
      }
      const RunMeta& m = r.meta;
      const bool spare = !m.open && m.capacity != m.count;
      // A copied run (src) keeps count, U, k, weight and payload bits, so
      // its differences are the decoded ones.
      const bool same = r.src != nullptr && m.decoded;
      const uint64_t zk =
          same
              ? m.z_k
              : ZigZag(int64_t{m.rice_k} - CanonicalRiceK(m.count, m.universe));
      const uint64_t zw =
          m.open ? 0
          : same ? m.z_weight
                 : ZigZag(static_cast<int64_t>(m.weight) -
                          ExpectedWeight(m.count, m.precision, m.universe));
      const uint64_t zb =
          same ? m.z_bits
               : ZigZag(int64_t{m.payload_bits} -
                        ExpectedRiceBits(m.count, m.universe, m.rice_k));
      const bool wide = !m.open && (zw >= 16 || zb >= 16);
      PutVarint(&tables, m.count);
      PutVarint(&tables,
                uint64_t{m.precision - 1u} | (m.open ? kRunOpen : 0) |
                    (m.tail ? kRunTail : 0) |
                    (zk << 3 | (spare ? kRunSpare : 0) | (wide ? kRunWide : 0))
                        << kRunRestShift);
      if (m.open || spare) PutVarint(&tables, m.capacity - m.count);
      if (!m.open) {
        PutVarint(&tables, m.universe % (uint64_t{1} << kUniverseShift) == 0
                               ? (m.universe >> kUniverseShift) << 1
                               : (m.universe - 1) << 1 | 1);
      }
      if (!m.open && !wide) {
        tables.push_back(static_cast<char>(zw | zb << 4));
      } else {
        if (!m.open) PutVarint(&tables, zw);
        PutVarint(&tables, zb);
      }
      total_bits += m.payload_bits;
    }
  }
  const size_t payload_bytes = (total_bits + 7) / 8;
  const bool long_key = key.size() >= kLongKey;
  const size_t key_bytes = key.size() + (long_key ? 4 : 0);
  const size_t body = BodyBytes(payload_bytes, key_bytes, tables.size());
  // The tables stay far below 64 KiB (a live filter has <= 9 slices of a
  // few runs); a u32 payload holds 2^32 bytes.
  static_assert(sizeof(Header) % 8 == 0 &&
                    alignof(Header) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                "the payload after the header must be word-aligned");
  char* alloc = static_cast<char*>(::operator new(sizeof(Header) + body));
  char* base = alloc + sizeof(Header);  // word-aligned: the payload
  std::memset(base, 0, body);
  auto* words = reinterpret_cast<uint64_t*>(base);
  uint64_t offset = 0;
  for (SlicePlan& s : plan) {
    for (RunPlan& r : s.runs) {
      if (r.src != nullptr) {
        FingerprintRunView(r.src, r.meta.bit_offset, r.meta.count,
                           r.meta.universe, r.meta.precision, r.meta.rice_k,
                           r.meta.payload_bits)
            .CopyPayloadTo(words, offset);
      } else if (r.splice) {
        r.splice->Write(words, offset);
      } else {
        RiceCode code;
        code.k = r.meta.rice_k;
        code.bits = r.meta.payload_bits;
        code.Write(r.fps, words, offset);
      }
      offset += r.meta.payload_bits;
    }
  }
  // The key may live in the old allocation: copy it before freeing that.
  char* key_at = base + payload_bytes;
  if (long_key) {
    const uint32_t len = static_cast<uint32_t>(key.size());
    std::memcpy(key_at, &len, 4);
    key_at += 4;
  }
  // An empty key's data() may be null, which memcpy must not get (UBSan).
  if (!key.empty()) std::memcpy(key_at, key.data(), key.size());
  std::memcpy(key_at + key.size(), tables.data(), tables.size());
  auto* h = reinterpret_cast<Header*>(alloc);
  new (h) Header{static_cast<uint32_t>(payload_bytes),
                 long_key ? kLongKey : static_cast<uint16_t>(key.size()),
                 static_cast<uint16_t>(tables.size()),
                 {last_active_ms()}};
  Free(h_);
  h_ = h;
}

bool UserFilter::empty() const {
  if (h_ == nullptr) return true;
  const TablesHead head = ReadHead();
  return head.slices == 0 && head.legacy == nullptr;
}

const BloomSlices* UserFilter::legacy() const {
  const Legacy* l = ReadHead().legacy;
  return l == nullptr ? nullptr : &l->slices;
}

uint64_t UserFilter::tail_items() const {
  uint64_t n = 0;
  for (const RunMeta& r : Decode().runs) {
    if (r.tail) n += r.count;
  }
  return n;
}

void UserFilter::SetKey(absl::string_view key) {
  const std::string copy(key);
  Tables t = Decode();
  std::vector<SlicePlan> plan = Plan(t);
  Rebuild(plan, t.legacy, copy);
}

size_t UserFilter::MemoryBytes() const {
  if (h_ == nullptr) return 0;
  size_t bytes = AllocBytes(h_);
  if (const Legacy* l = ReadHead().legacy) {
    bytes += sizeof(Legacy) + l->slices.MemoryBytes();
  }
  return bytes;
}

// --- Writes ------------------------------------------------------------------

uint64_t UserFilter::Weight(const std::vector<uint32_t>& fps, int b,
                            uint64_t u) {
  const uint64_t full = uint64_t{1} << b;
  if (u == full) return fps.size();
  // Prefixes x in [0, 2^b) with floor(x u / 2^b) = f: x from ceil(f 2^b / u)
  // to ceil((f + 1) 2^b / u) - 1. f < u <= 2^32 and 2^b <= 2^32: no overflow.
  uint64_t w = 0;
  for (uint32_t f : fps) {
    w += ((uint64_t{f} + 1) * full + u - 1) / u -
         (uint64_t{f} * full + u - 1) / u;
  }
  return w;
}

std::vector<uint32_t> UserFilter::RemapRuns(const UserFilter& f,
                                            const std::vector<RunPlan>& runs,
                                            int b, uint64_t u) {
  std::vector<uint32_t> out, fps;
  for (const RunPlan& r : runs) {
    fps = f.Fingerprints(r);
    const bool same = r.meta.precision == b && r.meta.universe == u;
    if (!same) {
      // A prefix run (U = 2^b_r, b_r >= b): its fingerprint is prefix_b_r(h);
      // prefix_b(h) = that >> (b_r - b), and fp = (prefix_b(h) * u) >> b
      // exactly as FingerprintRun::Fingerprint(h, b, u). Monotone: stays
      // sorted.
      const int shift = r.meta.precision - b;
      for (uint32_t& x : fps) {
        x = static_cast<uint32_t>((uint64_t{x >> shift} * u) >> b);
      }
    }
    out.insert(out.end(), fps.begin(), fps.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint32_t> UserFilter::Fingerprints(const RunPlan& r) const {
  if (r.splice) {
    std::vector<uint32_t> fps;
    r.splice->run().AppendFingerprints(&fps);
    return Union(fps, r.splice->added());
  }
  if (r.src == nullptr) return r.fps;
  std::vector<uint32_t> fps;
  View(r.meta).AppendFingerprints(&fps);
  return fps;
}

std::vector<uint32_t> UserFilter::Union(const std::vector<uint32_t>& a,
                                        const std::vector<uint32_t>& b) {
  std::vector<uint32_t> all;
  all.reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(),
                 std::back_inserter(all));
  return all;
}

void UserFilter::SetFingerprints(RunPlan& r, std::vector<uint32_t> fps) {
  // Open runs are prefix runs: weight = count (RunMeta::weight). Kept
  // current so that SealQuiet, later in the same write, sums the true F.
  r.src = nullptr;
  r.splice.reset();
  r.meta.count = static_cast<uint32_t>(fps.size());
  r.meta.weight = r.meta.count;
  r.fps = std::move(fps);
}

void UserFilter::AddToOpen(RunPlan& r, std::vector<uint32_t> add,
                           std::vector<SplicePoint> at) const {
  const uint64_t n = r.meta.count + add.size();
  // Splice while the union's canonical k is the run's: k moves about once
  // per doubling of n (2^k ~ U ln(phi) / n), then one full re-encode.
  if (r.src != nullptr && CanonicalRiceK(n, r.meta.universe) == r.meta.rice_k) {
    RunSplice splice =
        at.size() == add.size()
            ? RunSplice(View(r.meta), std::move(add), std::move(at))
            : RunSplice(View(r.meta), std::move(add));
    r.src = nullptr;
    r.meta.count = static_cast<uint32_t>(n);
    r.meta.weight = n;  // a prefix run
    r.meta.payload_bits = static_cast<uint32_t>(splice.bits());
    r.splice = std::move(splice);
    return;
  }
  SetFingerprints(r, Union(Fingerprints(r), add));
}

bool UserFilter::JoinOpen(SlicePlan& slice, size_t open,
                          std::vector<uint32_t> add, double fp, double budget,
                          uint64_t* added, std::vector<SplicePoint> at) const {
  RunPlan& main = slice.runs[open];
  RunPlan* tail = open + 1 < slice.runs.size() && slice.runs[open + 1].meta.tail
                      ? &slice.runs[open + 1]
                      : nullptr;
  const uint64_t tail_count = tail == nullptr ? 0 : tail->meta.count;
  // Record passes only items no run of the slice claims, so `add` is
  // disjoint from the main run and its tail: the run grows by add.size()
  // and F by add.size() / 2^b.
  const uint64_t n_new = add.size();
  if (main.meta.count + tail_count + n_new > main.meta.capacity) return false;
  if (fp + std::ldexp(static_cast<double>(n_new), -main.meta.precision) >
      budget) {
    return false;
  }
  *added = n_new;
  if (tail == nullptr && main.meta.count < kTailFromItems) {
    AddToOpen(main, std::move(add), std::move(at));
    return true;
  }
  if (tail_count + n_new >
      std::max<uint64_t>(kTailMinItems, main.meta.count / kTailFraction)) {
    // Merge: re-encodes main + tail, at most kTailFraction + 1 codes per
    // item the tail took since the last merge.
    std::vector<uint32_t> tail_fps = Union(
        tail == nullptr ? std::vector<uint32_t>{} : Fingerprints(*tail), add);
    SetFingerprints(main, Union(Fingerprints(main), tail_fps));
    if (tail != nullptr) SetFingerprints(*tail, {});  // Rebuild drops it
    return true;
  }
  if (tail != nullptr) {
    AddToOpen(*tail, std::move(add));
    tail->meta.capacity = 0;  // = count (Rebuild)
    return true;
  }
  RunPlan t;
  t.meta.precision = main.meta.precision;
  t.meta.universe = main.meta.universe;
  t.meta.open = true;
  t.meta.tail = true;
  SetFingerprints(t, std::move(add));
  slice.runs.insert(slice.runs.begin() + open + 1, std::move(t));
  return true;
}

void UserFilter::MergeTail(SlicePlan& slice, size_t open) const {
  if (open + 1 >= slice.runs.size() || !slice.runs[open + 1].meta.tail) return;
  RunPlan& tail = slice.runs[open + 1];
  RunPlan& main = slice.runs[open];
  SetFingerprints(main, Union(Fingerprints(main), Fingerprints(tail)));
  SetFingerprints(tail, {});  // Rebuild drops it
}

void UserFilter::SealQuiet(const FilterPolicy& policy,
                           std::vector<SlicePlan>& plan, double budget,
                           bool idle, bool newest_ended) const {
  if (!(idle && newest_ended) && plan.size() < 2) return;
  double fp_all = 0;
  uint64_t live_items = 0;
  for (const SlicePlan& s : plan) {
    for (const RunPlan& r : s.runs) {
      fp_all += r.meta.fp();
      live_items += r.meta.count;
    }
  }
  // The proportional share counts the L + 1 slices the window holds while
  // a slice fills (L spans plus the partial newest): a steady user's 29
  // days cover 7 slice indices, and at L the older slices' seals left the
  // last ones half of a thin rest (docs/format2-design.md, "Where it
  // loses" 6). Its spare F goes to the newest slice (LowerNewestRun).
  const int window = std::max(1, policy.max_live_slices());
  // An idle user's newest slice is sealed too once its span has ended: its
  // open run's share (half of what was left) and spare precision are then
  // paid for nothing. Before that, a seal at the count of its first sessions
  // fragments it (SealIdle).
  const size_t last = idle && newest_ended ? plan.size() : plan.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    SlicePlan& s = plan[i];
    if (!idle && s.meta.quiet < RunSizing::kQuietWrites) continue;
    std::vector<RunPlan> prefix;
    RunPlan* sealed = nullptr;
    double fp_slice = 0;
    for (RunPlan& r : s.runs) {
      fp_slice += r.meta.fp();
      if (!r.meta.open && sealed == nullptr) sealed = &r;
    }
    uint64_t n_pre = 0;
    int b_low = RunSizing::kMaxPrecision;
    bool any_open = false;
    for (const RunPlan& r : s.runs) {
      if (&r == sealed) continue;
      if (!r.meta.open) continue;  // a second sealed run stays as it is
      any_open = true;
      n_pre += r.meta.count;
      b_low = std::min<int>(b_low, r.meta.precision);
    }
    if (!any_open) continue;
    const double fp_others = fp_all - fp_slice;
    const std::vector<RunPlan> original = s.runs;  // if the seal is refused
    std::vector<RunPlan> keep;
    for (RunPlan& r : s.runs) {
      if (r.meta.open) {
        prefix.push_back(std::move(r));
      } else {
        keep.push_back(std::move(r));
      }
    }
    sealed = keep.empty() ? nullptr : &keep.front();
    double fp_kept = 0;
    for (const RunPlan& r : keep) fp_kept += r.meta.fp();
    // Only the sealed run's meta and codes until it is kept: a RunPlan here
    // (its optional<RunSplice> never engaged) trips GCC 12's
    // -Wmaybe-uninitialized at -O1 (the sanitizer builds).
    RunMeta merged;
    std::vector<uint32_t> merged_fps;
    if (sealed != nullptr && sealed->meta.precision <= b_low &&
        RunSizing::JoinsSealed(budget, fp_others + fp_kept,
                               sealed->meta.universe, sealed->meta.count, n_pre,
                               live_items, window)) {
      // Late items join the slice's sealed run at its universe.
      prefix.push_back(std::move(*sealed));
      merged = prefix.back().meta;
      keep.erase(keep.begin());
      fp_kept -= merged.fp();
    } else if (sealed == nullptr) {
      const uint64_t u = RunSizing::SealedUniverse(
          budget, fp_others, n_pre, live_items, window, b_low,
          idle ? RunSizing::kIdleShareOfLeft : RunSizing::kQuietShareOfLeft);
      const bool defer =
          !idle && RunSizing::DefersSeal(u,
                                         RunSizing::ProportionalUniverse(
                                             budget, n_pre, live_items, window),
                                         b_low);
      if (u == 0 || defer) {
        for (RunPlan& r : prefix) keep.push_back(std::move(r));
        s.runs = std::move(keep);
        continue;
      }
      merged.precision = static_cast<uint8_t>(b_low);
      merged.universe = u;
    } else {
      // Late items that may not join the sealed run stay in their own runs.
      for (RunPlan& r : prefix) keep.push_back(std::move(r));
      s.runs = std::move(keep);
      continue;
    }
    if (idle) {
      // The sweeper retries every pass, so first a cheap estimate: each item
      // of an open run drops b_r - log2(U) bits of precision (the Rice code
      // costs ~log2(U / n) + 1.5 bits per item). Only a promising seal is
      // re-encoded, O(items), and checked exactly below.
      double gain = 0;
      for (const RunPlan& r : prefix) {
        if (!r.meta.open) continue;
        gain += static_cast<double>(r.meta.count) *
                (r.meta.precision -
                 std::log2(static_cast<double>(merged.universe)));
      }
      if (gain < static_cast<double>(RunSizing::kIdleSealMinGainBits)) {
        s.runs = original;
        continue;
      }
    }
    merged.open = false;
    merged_fps = RemapRuns(*this, prefix, merged.precision, merged.universe);
    merged.count = static_cast<uint32_t>(merged_fps.size());
    merged.capacity = merged.count;
    merged.weight = Weight(merged_fps, merged.precision, merged.universe);
    // The exact rate of the sealed run (its weight), not n / U, decides.
    if (fp_others + fp_kept + merged.fp() > budget) {
      s.runs = original;
      continue;
    }
    if (idle) {
      // Sealing for memory only: kept only if the codes shrink by more than
      // a sealed run's extra table bytes (U - 1, weight - count).
      uint64_t old_bits = 0;
      for (const RunPlan& r : prefix) old_bits += r.meta.payload_bits;
      const uint64_t new_bits =
          RiceCode::Choose(merged_fps, merged.universe).bits;
      if (new_bits + RunSizing::kIdleSealMinGainBits > old_bits) {
        s.runs = original;
        continue;
      }
    }
    fp_all = fp_all - fp_slice + fp_kept + merged.fp();
    RunPlan sealed_plan;
    sealed_plan.meta = merged;
    sealed_plan.fps = std::move(merged_fps);
    keep.insert(keep.begin(), std::move(sealed_plan));
    s.runs = std::move(keep);
  }
}

namespace {
// Whether no slice but the newest holds an open run (`Plan`: a vector of
// UserFilter::SlicePlan, a private type deduced here).
template <typename Plan>
bool OlderSlicesSealed(const Plan& plan) {
  for (size_t i = 0; i + 1 < plan.size(); ++i) {
    for (const auto& r : plan[i].runs) {
      if (r.meta.open) return false;
    }
  }
  return true;
}
// The earliest event of any slice that holds runs, `event_ms` if later.
template <typename Plan>
int64_t FirstLiveEventMs(const Plan& plan, int64_t event_ms) {
  int64_t first_ms = event_ms;
  for (const auto& s : plan) {
    if (!s.runs.empty()) first_ms = std::min(first_ms, s.meta.min_event_ms);
  }
  return first_ms;
}
}  // namespace

void UserFilter::LowerNewestRun(const FilterPolicy& policy,
                                std::vector<SlicePlan>& plan, double budget,
                                int64_t event_ms) const {
  if (!OlderSlicesSealed(plan)) return;  // an older slice still fills
  SlicePlan& newest = plan.back();
  size_t open = newest.runs.size();
  uint64_t slice_items = 0;
  for (size_t j = 0; j < newest.runs.size(); ++j) {
    const RunMeta& r = newest.runs[j].meta;
    slice_items += r.count;
    if (r.tail) continue;
    // One open run (and its tail): a sealed run or a second open run means
    // late items or a ladder, which this does not size.
    if (!r.open || open < newest.runs.size()) return;
    open = j;
  }
  if (open == newest.runs.size()) return;
  double fp = 0;
  uint64_t items = 0;
  const int64_t first_ms = FirstLiveEventMs(plan, event_ms);
  for (const SlicePlan& s : plan) {
    for (const RunPlan& r : s.runs) {
      fp += r.meta.fp();
      items += r.meta.count;
    }
  }
  const int b = newest.runs[open].meta.precision;
  const double predicted = RunSizing::RateExpectedItems(
      slice_items, items, event_ms - first_ms,
      policy.SliceEndMs(newest.meta.index) - event_ms, policy.slice_span_ms());
  // The open run and its tail are prefix runs at b: F = their count / 2^b.
  const double fp_others =
      fp - std::ldexp(static_cast<double>(slice_items), -b);
  const OpenRunShape shape = RunSizing::LoweredNewestRun(
      budget, fp_others, slice_items, items, predicted,
      std::max(1, policy.max_live_slices() - 1), b);
  if (shape.precision == 0 || shape.capacity < slice_items) return;
  MergeTail(newest, open);
  RunPlan& r = newest.runs[open];
  // prefix_b'(h) = prefix_b(h) >> (b - b'): every item stays claimed, and
  // items sharing the shorter prefix become one fingerprint.
  std::vector<uint32_t> fps = Fingerprints(r);
  for (uint32_t& x : fps) x >>= (b - shape.precision);
  fps.erase(std::unique(fps.begin(), fps.end()), fps.end());
  r.meta.precision = static_cast<uint8_t>(shape.precision);
  r.meta.universe = shape.universe;
  SetFingerprints(r, std::move(fps));
  r.meta.capacity = shape.capacity;
}

bool UserFilter::SealIdle(const FilterPolicy& policy, int64_t now_ms,
                          int64_t active_now_ms) {
  if (h_ == nullptr ||
      active_now_ms - last_active_ms() < RunSizing::kIdleSealMs) {
    return false;
  }
  Tables t = Decode();
  if (t.slices.empty()) return false;
  const bool newest_ended = policy.SliceEndMs(t.slices.back().index) <= now_ms;
  // Open runs the seal may take (runs are stored slice by slice): none is
  // the sweeper's common case, checked without planning.
  bool any_open = false;
  size_t run = 0;
  for (size_t i = 0; i < t.slices.size(); ++i) {
    const bool may_seal = i + 1 < t.slices.size() || newest_ended;
    for (int32_t j = 0; j < t.slices[i].num_runs; ++j, ++run) {
      any_open |= may_seal && t.runs[run].open;
    }
  }
  if (!any_open) return false;
  std::vector<SlicePlan> plan = Plan(t);
  const double budget =
      RunSizing::AdmissionBudget(policy.fp_rate(), t.legacy ? t.legacy->fp : 0);
  SealQuiet(policy, plan, budget, /*idle=*/true, newest_ended);
  bool changed = false;
  for (const SlicePlan& s : plan) {
    for (const RunPlan& r : s.runs) changed |= r.src == nullptr;
  }
  if (!changed) return false;
  Rebuild(plan, t.legacy, key());
  return true;
}

uint64_t UserFilter::Record(const FilterPolicy& policy,
                            absl::Span<const uint64_t> hashes,
                            int64_t event_ms) {
  if (hashes.empty()) return 0;
  Tables t = Decode();
  const BloomSlices* old = t.legacy == nullptr ? nullptr : &t.legacy->slices;
  int64_t index = policy.SliceIndexOf(event_ms);
  // At most max_live_slices slices exist once the aged ones are dropped
  // (the caller drops them first), unless the wall clock stepped back:
  // slices written before the step are then "in the future". The event
  // goes into the nearest newer slice, which outlives its own: remembered a
  // little longer, never shorter (docs/reliability.md).
  {
    std::vector<int64_t> indices;
    for (const SliceMeta& s : t.slices) indices.push_back(s.index);
    if (old != nullptr) {
      for (const BloomSlices::Slice& s : old->slices()) {
        indices.push_back(s.index);
      }
    }
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    if (!std::binary_search(indices.begin(), indices.end(), index) &&
        static_cast<int>(indices.size()) >= policy.max_live_slices()) {
      auto newer = std::upper_bound(indices.begin(), indices.end(), index);
      if (newer != indices.end()) index = *newer;
    }
  }
  std::vector<SlicePlan> plan = Plan(t);
  size_t pos = 0;
  while (pos < plan.size() && plan[pos].meta.index < index) ++pos;
  if (pos == plan.size() || plan[pos].meta.index != index) {
    SlicePlan s;
    s.meta.index = index;
    s.meta.min_event_ms = event_ms;
    s.meta.max_event_ms = event_ms;
    plan.insert(plan.begin() + pos, std::move(s));
  }
  // A slice is quiet once the user's writes have left it behind: a write
  // into the newest slice ages the older ones, but a write into an older
  // slice (a backfill, or a late event) shows the user still writes behind
  // the newest, in no order: every slice's count restarts, since any of them
  // may be written next (a backfill's slices are written in turn, and one
  // sealed early at a low universe could not take its later items).
  const bool behind = pos + 1 < plan.size();
  for (SlicePlan& s : plan) {
    if (behind) {
      s.meta.quiet = 0;
    } else if (s.meta.quiet < 255) {
      ++s.meta.quiet;
    }
  }
  SlicePlan& slice = plan[pos];
  slice.meta.quiet = 0;
  slice.meta.min_event_ms = std::min(slice.meta.min_event_ms, event_ms);
  slice.meta.max_event_ms = std::max(slice.meta.max_event_ms, event_ms);

  // The items the slice does not claim yet: one sort, one merge per run.
  WriteScratch ws;
  // The loops below index raw pointers: an InlinedVector's operator[]
  // checks where its elements live on every access.
  auto& keys = ws.keys;
  keys.resize(hashes.size());
  uint64_t* key_at = keys.data();
  for (size_t i = 0; i < hashes.size(); ++i) {
    key_at[i] = FingerprintRun::SortKey(hashes[i], static_cast<uint32_t>(i));
  }
  std::vector<uint64_t> sort_buffer;
  SortKeysByHashPrefix(absl::MakeSpan(keys), keys.size() <= kWriteInlineItems
                                                 ? ThreadSortScratch()
                                                 : sort_buffer);
  auto& fresh = ws.fresh;
  fresh.assign(hashes.size(), 1);
  uint8_t* fresh_at = fresh.data();
  // The newest open run (a tail follows its main run) is where fresh items
  // go: its walk both checks the keys and finds where each would be
  // spliced in (LocateInRun), so a write walks that run once.
  size_t open = slice.runs.size();
  for (size_t j = 0; j < slice.runs.size(); ++j) {
    if (slice.runs[j].meta.open && !slice.runs[j].meta.tail) open = j;
  }
  auto& open_fps = ws.open_fps;  // the keys' fingerprints in the open run
  auto& open_at = ws.open_at;
  // Every run of the slice: LocateInRun's walk (a tight decode merge, or
  // whole words of codes at a time for few keys against a long run), its
  // points kept for the open run.
  for (size_t j = 0; j < slice.runs.size(); ++j) {
    const RunMeta& r = slice.runs[j].meta;
    auto& fps = j == open ? open_fps : ws.run_fps;
    auto& at = j == open ? open_at : ws.run_at;
    fps.resize(keys.size());
    at.resize(keys.size());
    uint32_t* fp = fps.data();
    SplicePoint* point = at.data();
    for (size_t i = 0; i < keys.size(); ++i) {
      fp[i] = FingerprintRun::Fingerprint(key_at[i], r.precision, r.universe);
    }
    LocateInRun(View(r), absl::MakeConstSpan(fp, keys.size()), point);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (point[i].Claims(r.count, fp[i])) {
        fresh_at[static_cast<uint32_t>(key_at[i])] = 0;
      }
    }
  }
  if (old != nullptr) {
    for (const BloomSlices::Slice& s : old->slices()) {
      if (s.index != index) continue;
      for (size_t i = 0; i < hashes.size(); ++i) {
        if (fresh[i] && LegacySliceClaims(s, hashes[i])) fresh[i] = 0;
      }
    }
  }
  auto& incoming = ws.incoming;  // ascending by top 32 bits
  // The fresh items' distinct fingerprints in the open run and where they
  // go: what JoinOpen adds to it (the same values as `fingerprints` below).
  std::vector<uint32_t> open_add;
  std::vector<SplicePoint> open_add_at;
  const bool has_open = open < slice.runs.size();
  for (size_t j = 0; j < keys.size(); ++j) {
    const uint32_t i = static_cast<uint32_t>(key_at[j]);
    if (!fresh_at[i]) continue;
    if (incoming.empty() && has_open) {  // the first fresh item: size once
      open_add.reserve(keys.size() - j);
      open_add_at.reserve(keys.size() - j);
    }
    incoming.push_back(hashes[i]);
    if (has_open && (open_add.empty() || open_add.back() != open_fps[j])) {
      open_add.push_back(open_fps[j]);
      open_add_at.push_back(open_at[j]);
    }
  }

  uint64_t added = 0;
  if (!incoming.empty()) {
    const double budget = RunSizing::AdmissionBudget(
        policy.fp_rate(), t.legacy ? t.legacy->fp : 0);
    double fp = 0;
    uint64_t items = 0;
    for (const SlicePlan& s : plan) {
      for (const RunPlan& r : s.runs) {
        fp += r.meta.fp();
        items += r.meta.count;
      }
    }
    const uint64_t m = incoming.size();
    const int window = std::max(1, policy.max_live_slices() - 1);
    // Fingerprints of `incoming` at (b, u), ascending distinct.
    auto fingerprints = [&](int b, uint64_t u) {
      std::vector<uint32_t> f(m);
      for (size_t i = 0; i < m; ++i) {
        f[i] = FingerprintRun::Fingerprint(incoming[i], b, u);
      }
      f.erase(std::unique(f.begin(), f.end()), f.end());
      return f;
    };
    // The first sealed run (`open`, an index into slice.runs, which
    // JoinOpen may grow, is above).
    RunPlan* sealed = nullptr;
    for (RunPlan& r : slice.runs) {
      if (!r.meta.open) {
        sealed = &r;
        break;
      }
    }
    // Joins the sealed run if it stays within budget (it has no capacity:
    // JoinsSealed decided the share).
    auto join_sealed = [&](RunPlan* target) {
      std::vector<uint32_t> add =
          fingerprints(target->meta.precision, target->meta.universe);
      std::vector<uint32_t> all = Union(Fingerprints(*target), add);
      const uint64_t n_new = all.size() - target->meta.count;
      const uint64_t weight =
          Weight(all, target->meta.precision, target->meta.universe);
      if (fp - target->meta.fp() +
              std::ldexp(static_cast<double>(weight), -target->meta.precision) >
          budget) {
        return false;
      }
      target->src = nullptr;
      target->meta.count = static_cast<uint32_t>(all.size());
      target->meta.weight = weight;
      target->meta.capacity = 0;  // = count (Rebuild)
      target->fps = std::move(all);
      added = n_new;
      return true;
    };
    bool done = false;
    if (open < slice.runs.size()) {
      done = JoinOpen(slice, open, std::move(open_add), fp, budget, &added,
                      std::move(open_add_at));
    }
    if (!done && sealed != nullptr &&
        RunSizing::JoinsSealed(budget, fp, sealed->meta.universe,
                               sealed->meta.count, m, items + m, window)) {
      done = join_sealed(sealed);
    }
    // At the cap (kMaxRunsPerSlice), the overflow run: the slice's most
    // precise open run if it is at b = 32, else a new one at b = 32 (the
    // slice's one run past the cap: later writes join it).
    bool overflow_run = false;
    if (!done && slice.runs.size() >= kMaxRunsPerSlice) {
      // The items join the overflow run past its capacity: no false
      // negative, F grows by m / 2^32, which the overflow reserve covers
      // (RunSizing::kReservedItems). Every overflow item costs exactly
      // 2^-32: a less precise run would spend the reserve faster than the
      // bound R * 2^32 items assumes.
      size_t best = slice.runs.size();
      for (size_t i = 0; i < slice.runs.size(); ++i) {
        const RunMeta& r = slice.runs[i].meta;
        if (r.open && !r.tail &&
            (best == slice.runs.size() ||
             r.precision > slice.runs[best].meta.precision)) {
          best = i;
        }
      }
      if (best < slice.runs.size() &&
          slice.runs[best].meta.precision == RunSizing::kMaxPrecision) {
        slice.runs[best].meta.capacity = std::numeric_limits<uint32_t>::max();
        const RunMeta& o = slice.runs[best].meta;
        done = JoinOpen(slice, best, fingerprints(o.precision, o.universe), fp,
                        std::numeric_limits<double>::infinity(), &added);
        // JoinOpen may have inserted a tail after it (no reference kept
        // across that); the run's capacity covers it and its tail exactly.
        uint32_t held = slice.runs[best].meta.count;
        if (best + 1 < slice.runs.size() && slice.runs[best + 1].meta.tail) {
          held += slice.runs[best + 1].meta.count;
        }
        slice.runs[best].meta.capacity = held;
      } else {
        overflow_run = true;
      }
    }
    if (!done) {
      // The slice outgrew its open run: the run keeps its items, its tail
      // with them (only the newest open run has one).
      if (open < slice.runs.size()) MergeTail(slice, open);
      uint64_t slice_items = 0;
      for (const RunPlan& r : slice.runs) slice_items += r.meta.count;
      // The newest slice: its final count from the user's rate over its
      // live history (RunSizing::RateExpectedItems); its run may take more
      // of what is left once no older slice is open.
      double rate_expected = 0;
      const bool older_sealed = OlderSlicesSealed(plan);
      if (items > 0 && pos + 1 == plan.size()) {
        const int64_t first_ms = FirstLiveEventMs(plan, event_ms);
        rate_expected = RunSizing::RateExpectedItems(
            slice_items + m, items + m, event_ms - first_ms,
            policy.SliceEndMs(index) - event_ms, policy.slice_span_ms());
      }
      OpenRunShape shape = RunSizing::NewOpenRun(
          budget, fp, slice_items + m, items + m, window,
          /*first_run=*/items == 0, rate_expected, older_sealed);
      if (overflow_run && shape.precision < RunSizing::kMaxPrecision) {
        // Its admitted share stays half of what is left; past that, the
        // reserve pays 2^-32 per item.
        shape.precision = RunSizing::kMaxPrecision;
        shape.universe = uint64_t{1} << RunSizing::kMaxPrecision;
        shape.capacity = static_cast<uint32_t>(
            std::min<double>(std::floor(std::max(0.0, (budget - fp) / 2) *
                                        static_cast<double>(shape.universe)),
                             static_cast<double>(UINT32_MAX)));
      }
      RunPlan r;
      r.meta.precision = static_cast<uint8_t>(shape.precision);
      r.meta.universe = shape.universe;
      r.meta.open = true;
      r.fps = fingerprints(shape.precision, shape.universe);
      r.meta.count = static_cast<uint32_t>(r.fps.size());
      r.meta.weight = r.meta.count;  // a prefix run
      // capacity >= m unless the admission budget is spent even at b = 32:
      // recording must not lose items, so the rest exceed it at 2^-32 each
      // (the overflow reserve, RunSizing::kReservedItems). Rebuild raises
      // capacity to the count.
      r.meta.capacity = shape.capacity;
      added = r.fps.size();
      slice.runs.push_back(std::move(r));
    }
    SealQuiet(policy, plan, budget, /*idle=*/false);
    if (pos + 1 == plan.size()) LowerNewestRun(policy, plan, budget, event_ms);
  }
  Rebuild(plan, t.legacy, key());
  return added;
}

// --- Reads -------------------------------------------------------------------

void UserFilter::RemoveExposed(const FilterPolicy& policy, int64_t now_ms,
                               absl::Span<const uint64_t> hashes,
                               uint8_t* keep) const {
  if (h_ == nullptr || hashes.empty()) return;
  const Tables t = Decode();
  if (t.legacy != nullptr) {
    t.legacy->slices.RemoveExposed(policy, now_ms, hashes, keep);
  }
  if (t.runs.empty()) return;
  // The live runs' codes against the candidates: a hash join built on the
  // codes (ClaimIndex), or the other direction where it refuses.
  thread_local std::vector<FingerprintRunView> live;
  live.clear();
  size_t r = 0;
  for (const SliceMeta& s : t.slices) {
    const bool live_slice = policy.SliceLive(s.index, now_ms);
    for (int j = 0; j < s.num_runs; ++j, ++r) {
      if (live_slice) live.push_back(View(t.runs[r]));
    }
  }
  RemoveClaimedByRuns(live, hashes, keep);
}

bool UserFilter::MayContain(const FilterPolicy& policy, int64_t now_ms,
                            uint64_t item_hash) const {
  std::vector<int64_t> claiming;
  ClaimingSlices(policy, now_ms, item_hash, &claiming);
  return !claiming.empty();
}

void UserFilter::ClaimingSlices(const FilterPolicy& policy, int64_t now_ms,
                                uint64_t item_hash,
                                std::vector<int64_t>* slice_indices) const {
  if (h_ == nullptr) return;
  const Tables t = Decode();
  std::vector<int64_t> found;
  if (t.legacy != nullptr) {
    t.legacy->slices.ClaimingSlices(policy, now_ms, item_hash, &found);
  }
  size_t r = 0;
  for (const SliceMeta& s : t.slices) {
    bool claims = false;
    for (int j = 0; j < s.num_runs; ++j, ++r) {
      if (!claims && policy.SliceLive(s.index, now_ms)) {
        claims = View(t.runs[r]).Contains(item_hash);
      }
    }
    if (claims) found.push_back(s.index);
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  slice_indices->insert(slice_indices->end(), found.begin(), found.end());
}

int UserFilter::DropExpired(const FilterPolicy& policy, int64_t now_ms) {
  if (h_ == nullptr) return 0;
  // The store calls this before every write, which mostly finds nothing to
  // drop: the slices are in ascending index order (Rebuild keeps Plan's
  // order; FromParts requires it) and SliceLive is monotone in the index,
  // so a live oldest slice means a live filter, read from the first slice's
  // head instead of decoding every run's entry (the model's expm1 each).
  if (const TablesHead head = ReadHead(); head.legacy == nullptr) {
    const unsigned char* p = head.first_slice;
    if (head.slices == 0 ||
        policy.SliceLive(ReadSliceHead(p, -1, 0).index, now_ms)) {
      return 0;
    }
  }
  Tables t = Decode();
  std::vector<int64_t> dropped;
  for (const SliceMeta& s : t.slices) {
    if (!policy.SliceLive(s.index, now_ms)) dropped.push_back(s.index);
  }
  Legacy* legacy = t.legacy;
  bool legacy_changed = false;
  if (legacy != nullptr) {
    for (const BloomSlices::Slice& s : legacy->slices.slices()) {
      if (!policy.SliceLive(s.index, now_ms)) dropped.push_back(s.index);
    }
    if (legacy->slices.DropExpired(policy, now_ms) > 0) {
      legacy_changed = true;
      if (legacy->slices.slices().empty()) {
        delete legacy;
        legacy = nullptr;
      } else {
        legacy->fp = LegacyFpRate(legacy->slices);
      }
    }
  }
  std::sort(dropped.begin(), dropped.end());
  dropped.erase(std::unique(dropped.begin(), dropped.end()), dropped.end());
  if (dropped.empty() && !legacy_changed) return 0;
  std::vector<SlicePlan> plan = Plan(t);
  plan.erase(std::remove_if(plan.begin(), plan.end(),
                            [&](const SlicePlan& s) {
                              return !policy.SliceLive(s.meta.index, now_ms);
                            }),
             plan.end());
  Rebuild(plan, legacy, key());
  return static_cast<int>(dropped.size());
}

bool UserFilter::HasLiveSlices(const FilterPolicy& policy,
                               int64_t now_ms) const {
  if (h_ == nullptr) return false;
  const Tables t = Decode();
  if (!t.slices.empty() && policy.SliceLive(t.slices.back().index, now_ms)) {
    return true;
  }
  return t.legacy != nullptr && t.legacy->slices.HasLiveSlices(policy, now_ms);
}

double UserFilter::FpBound(const FilterPolicy& policy, int64_t now_ms) const {
  return Stats(policy, now_ms).estimated_fp_rate;
}

UserFilterStats UserFilter::Stats(const FilterPolicy& policy,
                                  int64_t now_ms) const {
  UserFilterStats st;
  st.bytes = MemoryBytes();
  if (h_ == nullptr) return st;
  const Tables t = Decode();
  struct Row {
    int64_t index;
    SliceStats s;
    int64_t min_ms, max_ms;
  };
  std::vector<Row> rows;
  auto row = [&](int64_t index) -> Row& {
    for (Row& r : rows) {
      if (r.index == index) return r;
    }
    Row r{index,
          {},
          std::numeric_limits<int64_t>::max(),
          std::numeric_limits<int64_t>::min()};
    r.s.start_ms = policy.SliceStartMs(index);
    r.s.end_ms = policy.SliceEndMs(index);
    rows.push_back(r);
    return rows.back();
  };
  double legacy_clean = 1.0;
  double runs_fp = 0;
  if (t.legacy != nullptr) {
    for (const BloomSlices::Slice& s : t.legacy->slices.slices()) {
      if (!policy.SliceLive(s.index, now_ms)) continue;
      Row& r = row(s.index);
      const double clean = LegacySliceClean(s);
      legacy_clean *= clean;
      r.s.estimated_fp_rate += 1.0 - clean;
      for (const BloomSlices::Segment& seg : s.segments) {
        r.s.items += seg.count();
        r.s.capacity += seg.capacity();
        r.s.bytes += seg.bit_bytes();
        ++r.s.segments;
      }
      r.min_ms = std::min(r.min_ms, s.min_event_ms);
      r.max_ms = std::max(r.max_ms, s.max_event_ms);
    }
  }
  size_t k = 0;
  for (const SliceMeta& s : t.slices) {
    const bool live = policy.SliceLive(s.index, now_ms);
    for (int j = 0; j < s.num_runs; ++j, ++k) {
      if (!live) continue;
      const RunMeta& run = t.runs[k];
      Row& r = row(s.index);
      r.s.items += run.count;
      // A tail's items are within its main run's capacity.
      if (!run.tail) r.s.capacity += run.capacity;
      r.s.bytes += (run.payload_bits + 7) / 8;
      ++r.s.segments;
      r.s.estimated_fp_rate += run.fp();
      runs_fp += run.fp();
      r.min_ms = std::min(r.min_ms, s.min_event_ms);
      r.max_ms = std::max(r.max_ms, s.max_event_ms);
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.index < b.index; });
  // F: the runs' union bound plus the legacy slices' rate.
  st.estimated_fp_rate = 1.0 - legacy_clean + runs_fp;
  for (const Row& r : rows) {
    if (st.slices == 0) {
      st.oldest_exposure_ms = r.min_ms;
      st.expires_at_ms = r.s.end_ms + policy.retention_ms();
    }
    st.newest_exposure_ms = std::max(st.newest_exposure_ms, r.max_ms);
    st.items += r.s.items;
    st.segments += r.s.segments;
    ++st.slices;
    st.slice_stats.push_back(r.s);
  }
  return st;
}

// --- Parts -------------------------------------------------------------------

FilterParts UserFilter::ToParts() const {
  FilterParts parts;
  if (h_ == nullptr) return parts;
  const Tables t = Decode();
  auto part = [&](int64_t index) -> SlicePart& {
    for (SlicePart& p : parts.slices) {
      if (p.index == index) return p;
    }
    parts.slices.emplace_back();
    parts.slices.back().index = index;
    parts.slices.back().min_event_ms = std::numeric_limits<int64_t>::max();
    parts.slices.back().max_event_ms = std::numeric_limits<int64_t>::min();
    return parts.slices.back();
  };
  if (t.legacy != nullptr) {
    for (const BloomSlices::Slice& s : t.legacy->slices.slices()) {
      SlicePart& p = part(s.index);
      p.min_event_ms = std::min(p.min_event_ms, s.min_event_ms);
      p.max_event_ms = std::max(p.max_event_ms, s.max_event_ms);
      for (const BloomSlices::Segment& seg : s.segments) {
        BloomSegment b(seg.num_blocks(), seg.k(), seg.capacity());
        b.Assign(seg.words(), seg.count());
        p.bloom_segments.push_back(std::move(b));
      }
    }
  }
  size_t k = 0;
  for (const SliceMeta& s : t.slices) {
    SlicePart& p = part(s.index);
    p.min_event_ms = std::min(p.min_event_ms, s.min_event_ms);
    p.max_event_ms = std::max(p.max_event_ms, s.max_event_ms);
    for (int j = 0; j < s.num_runs; ++j, ++k) {
      const RunMeta& r = t.runs[k];
      RunPart rp;
      if (j + 1 < s.num_runs && t.runs[k + 1].tail) {
        // A tail is how writes are stored, not part of the filter: parts
        // (snapshots, GetFilter) hold it merged into its main run, which
        // has the pair's capacity.
        std::vector<uint32_t> a, b;
        View(r).AppendFingerprints(&a);
        View(t.runs[k + 1]).AppendFingerprints(&b);
        // Same (b, U) and fingerprints < U: FromFingerprints cannot fail.
        rp.run = *FingerprintRun::FromFingerprints(Union(a, b), r.precision,
                                                   r.universe);
        ++j;
        ++k;
      } else {
        // CopyOf only fails for shapes Rebuild never stores.
        rp.run = *FingerprintRun::CopyOf(View(r));
      }
      rp.capacity = std::max(r.capacity, rp.run.count());
      rp.open = r.open;
      p.runs.push_back(std::move(rp));
    }
  }
  std::sort(
      parts.slices.begin(), parts.slices.end(),
      [](const SlicePart& a, const SlicePart& b) { return a.index < b.index; });
  return parts;
}

UserFilter::LiveSlices UserFilter::Live(const FilterPolicy& policy,
                                        int64_t now_ms) const {
  LiveSlices live;
  if (h_ == nullptr) return live;
  const Tables t = Decode();
  // The same slice may hold legacy segments and runs (ToParts's part()).
  auto slice = [&](int64_t index) -> LiveSlice& {
    for (LiveSlice& s : live) {
      if (s.index == index) return s;
    }
    live.emplace_back();
    live.back().index = index;
    return live.back();
  };
  if (t.legacy != nullptr) {
    for (const BloomSlices::Slice& s : t.legacy->slices.slices()) {
      if (!policy.SliceLive(s.index, now_ms)) continue;
      LiveSlice& l = slice(s.index);
      for (const BloomSlices::Segment& seg : s.segments) {
        l.bloom_segments.push_back(seg);
      }
    }
  }
  size_t k = 0;
  for (const SliceMeta& s : t.slices) {
    if (!policy.SliceLive(s.index, now_ms)) {
      k += s.num_runs;
      continue;
    }
    LiveSlice& l = slice(s.index);
    for (int j = 0; j < s.num_runs; ++j, ++k) {
      LiveRun run{View(t.runs[k]), {}};
      if (j + 1 < s.num_runs && t.runs[k + 1].tail) {
        run.tail = View(t.runs[k + 1]);
        ++j;
        ++k;
      }
      l.runs.push_back(run);
    }
  }
  std::sort(
      live.begin(), live.end(),
      [](const LiveSlice& a, const LiveSlice& b) { return a.index < b.index; });
  return live;
}

absl::StatusOr<UserFilter> UserFilter::FromParts(const FilterPolicy& policy,
                                                 FilterParts parts,
                                                 absl::string_view key) {
  constexpr uint32_t kMaxBlocks = uint32_t{1} << 26;  // the format's limit
  if (parts.slices.size() > kMaxPartsSlices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("filter parts hold %d slices, at most %d allowed",
                        parts.slices.size(), kMaxPartsSlices));
  }
  auto legacy = std::make_unique<Legacy>();
  std::vector<SlicePlan> plan;
  double runs_fp = 0;
  uint64_t runs_items = 0;
  for (size_t i = 0; i < parts.slices.size(); ++i) {
    SlicePart& sp = parts.slices[i];
    if (i > 0 && sp.index <= parts.slices[i - 1].index) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slice %d: index %d does not follow %d (ascending, distinct)", i,
          sp.index, parts.slices[i - 1].index));
    }
    if (sp.min_event_ms > sp.max_event_ms) {
      return absl::InvalidArgumentError(
          absl::StrFormat("slice %d: min_event_ms %d after max_event_ms %d", i,
                          sp.min_event_ms, sp.max_event_ms));
    }
    if (sp.bloom_segments.empty() && sp.runs.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slice %d: neither bloom_segments nor runs (an empty slice)", i));
    }
    if (sp.bloom_segments.size() > FilterPolicy::kMaxSegmentsPerSlice) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slice %d: bloom_segments holds %d segments, at most %d", i,
          sp.bloom_segments.size(), FilterPolicy::kMaxSegmentsPerSlice));
    }
    // Record keeps a slice within kMaxRunsPerSlice; a snapshot is read up
    // to the wire format's limit, so anything GetFilter could serve loads.
    if (sp.runs.size() > format::kMaxRunsPerSlice) {
      return absl::InvalidArgumentError(
          absl::StrFormat("slice %d: %d runs, at most %d", i, sp.runs.size(),
                          format::kMaxRunsPerSlice));
    }
    for (size_t j = 0; j < sp.bloom_segments.size(); ++j) {
      const BloomSegment& seg = sp.bloom_segments[j];
      if (seg.num_blocks() == 0 || seg.num_blocks() > kMaxBlocks ||
          seg.k() < 1 || seg.k() > 16 || seg.capacity() == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice %d segment %d: num_blocks %d (1..2^26), k %d (1..16), "
            "capacity %d (>= 1)",
            i, j, seg.num_blocks(), seg.k(), seg.capacity()));
      }
    }
    SlicePlan s;
    s.meta.index = sp.index;
    s.meta.min_event_ms = sp.min_event_ms;
    s.meta.max_event_ms = sp.max_event_ms;
    // A loaded slice counts as quiet: it may be sealed by the next write.
    s.meta.quiet = RunSizing::kQuietWrites;
    for (size_t j = 0; j < sp.runs.size(); ++j) {
      const RunPart& rp = sp.runs[j];
      const FingerprintRun& run = rp.run;
      if (run.count() == 0 || rp.capacity < run.count() ||
          rp.capacity > run.universe()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice %d run %d: count %d, capacity %d, universe %d (need 1 <= "
            "count <= capacity <= universe)",
            i, j, run.count(), rp.capacity, run.universe()));
      }
      if (rp.open && run.universe() != uint64_t{1} << run.precision()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice %d run %d: open but universe %d is not 2^%d (open runs "
            "are prefix runs)",
            i, j, run.universe(), run.precision()));
      }
      RunPlan r;
      r.meta.count = run.count();
      r.meta.capacity = rp.capacity;
      r.meta.universe = run.universe();
      r.meta.precision = static_cast<uint8_t>(run.precision());
      r.meta.rice_k = static_cast<uint8_t>(run.rice_k());
      r.meta.payload_bits = run.payload_bits();
      r.meta.open = rp.open;
      r.fps = run.Fingerprints();
      r.meta.weight = Weight(r.fps, r.meta.precision, r.meta.universe);
      runs_fp += r.meta.fp();
      runs_items += r.meta.count;
      s.runs.push_back(std::move(r));
    }
    if (!sp.runs.empty()) plan.push_back(std::move(s));
    if (!sp.bloom_segments.empty()) {
      BloomSlices::SliceData data;
      data.index = sp.index;
      data.min_event_ms = sp.min_event_ms;
      data.max_event_ms = sp.max_event_ms;
      data.segments = std::move(sp.bloom_segments);
      if (!legacy->slices.AppendSlice(std::move(data))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("slice %d: the Bloom tables cannot hold it", i));
      }
    }
  }
  Legacy* kept = nullptr;
  if (!legacy->slices.slices().empty()) {
    legacy->fp = LegacyFpRate(legacy->slices);
    kept = legacy.get();
  }
  // A legacy-only filter was valid under format 1's own budget; runs must
  // fit what RunSizing leaves them: the budget, or for a user past
  // RunSizing::GuaranteedItems what Record keeps, A + N * 2^-32 (the
  // overflow reserve's bound). Refusing it would refuse the whole snapshot
  // (a restart must lose nothing); every item costs >= 2^-32, so a run set
  // that spends more than that per item beyond A is still refused.
  const double legacy_fp = kept ? kept->fp : 0;
  const double budget =
      std::max(RunSizing::Budget(policy.fp_rate(), legacy_fp),
               RunSizing::AdmissionBudget(policy.fp_rate(), legacy_fp) +
                   std::ldexp(static_cast<double>(runs_items),
                              -RunSizing::kMaxPrecision));
  if (runs_fp > budget * (1 + 1e-9)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "runs' union bound %.6g exceeds the FP budget %.6g (delta %g)", runs_fp,
        budget, policy.fp_rate()));
  }
  UserFilter f;
  f.Rebuild(plan, kept, key);
  if (kept != nullptr) legacy.release();  // the filter owns it now
  return f;
}

}  // namespace exposure_filter
