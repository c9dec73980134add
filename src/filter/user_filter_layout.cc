// UserFilter's allocation (user_filter.h, "Memory layout"): the header, the
// bit-packed run payloads, the key and the tables, and the tables' byte
// codec; Decode reads them, Plan turns them into a plan of the current runs
// and Rebuild writes a plan back as a new allocation.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "src/filter/rice_model.h"
#include "src/filter/run_entry_model.h"
#include "src/filter/user_filter.h"
#include "src/filter/user_filter_internal.h"

namespace exposure_filter {

namespace {

// Header::key_len of a key of >= 65535 bytes, whose u32 length then sits in
// the 4 bytes before the header.
constexpr uint16_t kLongKey = 0xffff;
constexpr uint8_t kHasLegacy = 1;

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// --- Varint tables ---------------------------------------------------------

// The tables as Rebuild writes them, before they are copied into the new
// allocation: into a buffer of the plan's bound (Rebuild), on the stack up
// to 2 KiB of bound (~25 runs; a 2,000-item user holds ~7), so a write
// allocates only the new allocation (a std::string here was one malloc and a
// capacity check per byte).
class TableWriter {
 public:
  // A u64 varint's bytes: 64 bits in 7-bit groups.
  static constexpr size_t kMaxVarint = 10;
  explicit TableWriter(size_t bound)
      : heap_(bound > sizeof(stack_) ? new unsigned char[bound] : nullptr),
        begin_(heap_ != nullptr ? heap_.get() : stack_),
        p_(begin_) {}
  TableWriter(const TableWriter&) = delete;
  TableWriter& operator=(const TableWriter&) = delete;

  void Varint(uint64_t v) {
    while (v >= 0x80) {
      *p_++ = static_cast<unsigned char>(v | 0x80);
      v >>= 7;
    }
    *p_++ = static_cast<unsigned char>(v);
  }
  // Little-endian, `bytes` <= 8.
  void Fixed(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      *p_++ = static_cast<unsigned char>(v >> 8 * i);
    }
  }
  void Byte(uint64_t v) { *p_++ = static_cast<unsigned char>(v); }
  void Bytes(const void* data, size_t n) {
    std::memcpy(p_, data, n);
    p_ += n;
  }
  const unsigned char* data() const { return begin_; }
  size_t size() const { return static_cast<size_t>(p_ - begin_); }

 private:
  unsigned char stack_[2048];
  std::unique_ptr<unsigned char[]> heap_;
  unsigned char* const begin_;
  unsigned char* p_;
};
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
  RunEntryModelMemo& models = RunEntryModelMemo::ThisThread();
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
      const RunEntryModel model =
          models.Get(r.count, r.universe, r.precision, UnZigZag(rest >> 3));
      r.rice_k = static_cast<uint8_t>(model.rice_k);
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
        r.weight = static_cast<uint64_t>(model.weight + UnZigZag(zw));
      }
      r.payload_bits = static_cast<uint32_t>(model.rice_bits + UnZigZag(zb));
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
    SlicePlan& sp = plan.emplace_back();
    sp.meta = s;
    sp.runs.resize(s.num_runs);
    for (RunPlan& rp : sp.runs) {
      rp.meta = t.runs[r++];
      rp.src = payload();
    }
  }
  return plan;
}

void UserFilter::Rebuild(std::vector<SlicePlan>& plan, Legacy* legacy,
                         absl::string_view key) {
  // Runs to encode get their code; empty runs and slices are dropped.
  uint64_t total_bits = 0;
  RunEntryModelMemo& models = RunEntryModelMemo::ThisThread();
  size_t live_slices = 0, live_runs = 0;
  for (SlicePlan& s : plan) {
    s.runs.erase(std::remove_if(s.runs.begin(), s.runs.end(),
                                [](const RunPlan& r) {
                                  return r.src == nullptr && !r.splice
                                             ? r.fps.empty()
                                             : r.meta.count == 0;
                                }),
                 s.runs.end());
    if (!s.runs.empty()) ++live_slices;
    live_runs += s.runs.size();
  }
  // The most the entries below take: the head's varint and pointer; per
  // slice the u16 head, two varints and two fixed fields of <= 8 bytes;
  // per run at most six varints.
  constexpr size_t kV = TableWriter::kMaxVarint;
  TableWriter tables(kV + sizeof(legacy) + live_slices * (2 + 2 * kV + 16) +
                     live_runs * 6 * kV);
  // Head: slice count and the legacy flag, then the legacy pointer.
  tables.Varint(live_slices << 1 | (legacy != nullptr ? kHasLegacy : 0));
  if (legacy != nullptr) tables.Bytes(&legacy, sizeof(legacy));
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
    tables.Fixed(uint64_t{std::min<uint8_t>(s.meta.quiet, 15)} |
                     std::min<uint64_t>(runs, kHeadManyRuns) << kHeadRunsShift |
                     uint64_t(min_code) << kHeadMinLenShift |
                     uint64_t(span_code) << kHeadSpanLenShift |
                     (negative ? kHeadMinNegative : 0) |
                     (jump ? kHeadIndexJump : 0),
                 2);
    if (runs >= kHeadManyRuns) tables.Varint(runs - kHeadManyRuns);
    if (jump) tables.Varint(ZigZag(s.meta.index - prev_index));
    tables.Fixed(dmin, CodeBytes(min_code));
    tables.Fixed(span, CodeBytes(span_code));
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
      uint64_t zk = m.z_k, zw = m.z_weight, zb = m.z_bits;
      if (r.src == nullptr || !m.decoded) {
        // Through the memo: the next Decode of these tables looks the new
        // entry up.
        const int64_t k_delta =
            int64_t{m.rice_k} - CanonicalRiceK(m.count, m.universe);
        const RunEntryModel model =
            models.Get(m.count, m.universe, m.precision, k_delta);
        zk = ZigZag(k_delta);
        zw = ZigZag(static_cast<int64_t>(m.weight) - model.weight);
        zb = ZigZag(int64_t{m.payload_bits} - model.rice_bits);
      }
      if (m.open) zw = 0;
      const bool wide = !m.open && (zw >= 16 || zb >= 16);
      tables.Varint(m.count);
      tables.Varint(uint64_t{m.precision - 1u} | (m.open ? kRunOpen : 0) |
                    (m.tail ? kRunTail : 0) |
                    (zk << 3 | (spare ? kRunSpare : 0) | (wide ? kRunWide : 0))
                        << kRunRestShift);
      if (m.open || spare) tables.Varint(m.capacity - m.count);
      if (!m.open) {
        tables.Varint(m.universe % (uint64_t{1} << kUniverseShift) == 0
                          ? (m.universe >> kUniverseShift) << 1
                          : (m.universe - 1) << 1 | 1);
      }
      if (!m.open && !wide) {
        tables.Byte(zw | zb << 4);
      } else {
        if (!m.open) tables.Varint(zw);
        tables.Varint(zb);
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

}  // namespace exposure_filter
