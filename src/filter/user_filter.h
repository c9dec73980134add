// UserFilter: one user's exposure history on one surface, filter format 2
// (docs/format2-design.md).
//
// Events are cut into time slices on the policy's grid (filter_policy.h:
// remembered >= retention, <= retention + one span). Each slice holds one or
// more runs of Golomb-Rice coded fingerprints (fingerprint_run.h), sized by
// RunSizing (run_sizing.h) so that the union bound
//     F = sum over live runs of n_r / U_r  (+ legacy Bloom slices' rate)
// stays <= delta after every write: FP <= delta at every moment, and no
// false negatives (a recorded item's fingerprint is in its slice's run).
//
// Legacy data. A user loaded from a format-1 snapshot keeps its Bloom slices
// (BloomSlices, read-only) until they age out; new writes always go to runs,
// whose budget is then delta minus the legacy slices' measured rate.
//
// Memory layout. Most users are small, so per-user overhead matters (a
// 20-item user must stay under 100 bytes all-in). The filter is ONE heap
// allocation and the object is one pointer:
//
//   [header][run payloads, bit-packed][key][tables]
//   ^ the object points here (operator new: 16-aligned, so the payload
//     after the 16-byte header is word-aligned; no padding at the end)
//
// Every run's codes are packed back to back in one bitstream (run r starts
// at the sum of the earlier runs' payload bits) and read in place through a
// FingerprintRunView. The tables (slices and runs, user_filter_layout.cc) are a
// byte stream of fixed-length event-time fields and varints, most of them
// differences to what the fields' neighbours predict: a slice costs ~9
// bytes, a sealed run ~7, an open run ~5. The decoder's read of one word
// past the payload lands in key or tables (the allocation reaches that far,
// BodyBytes), never in the header's atomic last-active time, which precedes
// the payload: concurrent readers and Touch() do not race.
//
// Writes. A write joins the slice's newest open run. While that run is
// small its new codes are SPLICED into it (run_splice.h): each new
// fingerprint splits the gap it lands in into two codes, and the codes
// between insertion points are copied as shifted words, so no code is
// decoded and re-encoded one by one. Open runs are coded at the model's k
// (CanonicalRiceK(n, U), rice_model.h), which the splice keeps; when the
// union's canonical k differs from the run's (about once per doubling of
// n) the run is re-encoded whole at the new k. Sealing re-encodes at
// RiceCode::Choose's exactly shortest k, as before. Where the new codes go
// comes from the same walk as the write's "already claimed?" check of that
// run (LocateInRun), so a write walks the open run once. Once the run
// holds kTailFromItems, new items go to a TAIL run instead: a second prefix
// run of the same precision b right after it, spliced into alone. Same
// universe, so F = sum n / 2^b is unchanged by the split (the two hold
// disjoint fingerprints: Record only adds what no run of the slice claims).
// The tail is merged into its main run when it passes max(kTailMinItems,
// main / kTailFraction) items (geometric: each merge re-encodes <=
// kTailFraction + 1 codes per item the tail took, amortized), before the
// slice opens a new run, when the slice is sealed (every open run is merged
// into the sealed one) and in ToParts (snapshots and GetFilter never see a
// tail). Unchanged runs before the changed one are copied word by word.
// Still O(run) per write: finding which items are new walks every run of
// the slice (LocateInRun: a tight decode, or, from 32 codes per item, a
// word of codes at a time, decoding only up to each item's point), and the
// allocation is rebuilt (a copy). The feed loop's writes (20 items into a
// slice of ~300-1,900 codes in two open runs) walk ~1,075 codes and cost
// ~60,000 instructions each, the walk ~41% of them (docs/performance.md,
// "RecordExposure": filter_bench BM_RecordFeedWrites under callgrind).
//
// Thread-compatibility: const methods may run concurrently; mutation needs
// exclusive access (the store's shard lock provides it). Touch() is the one
// const method that writes (an atomic), so readers under a shared lock may
// call it.
#ifndef EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_H_
#define EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_H_

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/casts.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/filter/bloom_slices.h"
#include "src/filter/filter_parts.h"
#include "src/filter/filter_policy.h"
#include "src/filter/filter_stats.h"
#include "src/filter/fingerprint_run.h"
#include "src/filter/run_splice.h"

namespace exposure_filter {

class UserFilter {
 public:
  // Most runs a slice holds (open prefix runs of a fast-growing slice, a
  // sealed run, late-item runs, a tail). The growth ladder climbs about one
  // bit of precision per run (b <= 32), so a slice reaches this many only
  // once the budget is spent and every new run takes half of what is left
  // at b = 32 (a slice of tens of thousands of items); from then on a write
  // that would open one more joins the slice's open run at b = 32 past its
  // capacity instead (one more run, at b = 32, is opened if the slice has
  // none: at most kMaxRunsPerSlice + 1), adding m / 2^32 to F, which the
  // overflow reserve pays (RunSizing::kReservedItems). FromParts accepts up
  // to the wire format's limit (format::kMaxRunsPerSlice = 255).
  static constexpr int kMaxRunsPerSlice = 64;
  // Most slices FromParts accepts (a live filter holds at most
  // FilterPolicy::kMaxLiveSlices + 1).
  static constexpr int kMaxPartsSlices = 64;
  // Tail runs (see "Writes" above). Below kTailFromItems in the main open
  // run, writes splice into it (O(run) word copies). Above it, a tail costs
  // memory while it exists: splitting n items of one universe into n_t and
  // n - n_t costs about n H(n_t / n) bits more than one run (which items
  // are in which run), <= 0.33 bit/item at n_t = n / 17, against ~10
  // bits/item: paid only by users whose open slice holds thousands of
  // items, never by memory_bench's arrival patterns (docs/performance.md).
  static constexpr uint32_t kTailFromItems = 4096;
  static constexpr uint32_t kTailMinItems = 64;
  static constexpr uint32_t kTailFraction = 16;

  UserFilter() = default;
  // An empty filter carrying `key` (the owner's map key).
  explicit UserFilter(absl::string_view key);
  ~UserFilter();
  UserFilter(UserFilter&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  UserFilter& operator=(UserFilter&& o) noexcept;
  UserFilter(const UserFilter&) = delete;
  UserFilter& operator=(const UserFilter&) = delete;

  // Records that the items with these hashes were shown at `event_ms` (which
  // the caller has checked is inside the retention window). Returns how many
  // were not already claimed by the event's slice (distinct fingerprints
  // added); re-recording an item is a no-op, which makes at-least-once
  // delivery harmless.
  uint64_t Record(const FilterPolicy& policy, absl::Span<const uint64_t> hashes,
                  int64_t event_ms);

  // Clears keep[i] for every hash the live slices claim. keep[i] == 0 on
  // entry is left alone. Files the live runs' codes by the hash prefixes
  // they claim and probes each candidate there (ClaimIndex): O(m + codes +
  // 4 codes buckets). Where tiny universes would file too much, groups the
  // candidates by their top bits instead and walks every live run against
  // them (FingerprintRunView::RemoveContained): same result.
  void RemoveExposed(const FilterPolicy& policy, int64_t now_ms,
                     absl::Span<const uint64_t> hashes, uint8_t* keep) const;
  bool MayContain(const FilterPolicy& policy, int64_t now_ms,
                  uint64_t item_hash) const;
  // For Explain: appends the index of every live slice that claims the item,
  // oldest first. Empty iff MayContain is false.
  void ClaimingSlices(const FilterPolicy& policy, int64_t now_ms,
                      uint64_t item_hash,
                      std::vector<int64_t>* slice_indices) const;

  // Memory only, for the store's sweeper (under the shard's exclusive
  // lock): if the user has been inactive for RunSizing::kIdleSealMs
  // (`active_now_ms` on the clock Touch is given: the store's MonotonicMs),
  // seals every slice whose open runs shrink when re-encoded at the slice's
  // proportional share (run_sizing.h). The newest slice only once `now_ms`
  // (the store's wall clock, the slices' grid) is past its span: until then
  // its writes may go on after the idle hour (a person's next session), and
  // a run sealed at the count of its first sessions cannot take them
  // (docs/format2-design.md, "Sizing policy", the idle seal; "Measured and
  // rejected", the idle seal never takes the newest slice). F stays within the
  // budget; later writes follow the late-item rules. Returns whether the
  // filter changed. Does not touch the LRU clock.
  bool SealIdle(const FilterPolicy& policy, int64_t now_ms,
                int64_t active_now_ms);

  // Drops slices that aged out; returns how many.
  int DropExpired(const FilterPolicy& policy, int64_t now_ms);
  bool HasLiveSlices(const FilterPolicy& policy, int64_t now_ms) const;
  // No slice at all (live or not).
  bool empty() const;

  // Heap bytes held for this user, all-in: the allocation (payloads, tables,
  // key, header) and legacy Bloom slices if any; excluding the owner's map
  // slot (sizeof(UserFilter)).
  size_t MemoryBytes() const;
  // `segments` counts runs (plus legacy Bloom segments); estimated_fp_rate
  // is the union bound F over the live slices.
  UserFilterStats Stats(const FilterPolicy& policy, int64_t now_ms) const;
  // F over the live slices (what Stats reports).
  double FpBound(const FilterPolicy& policy, int64_t now_ms) const;

  // Every slice (live or not: call DropExpired first to leave the aged ones
  // out) as plain parts (filter_parts.h). A slice that was legacy Bloom when
  // loaded and has had writes since holds both kinds.
  FilterParts ToParts() const;
  // GetFilter's zero-copy view of what ToParts would give for the slices
  // live at `now_ms`, ascending index: each slice's legacy Bloom segments
  // and its runs as views into this filter's allocation (valid until the
  // filter is next mutated or destroyed). A run stored with a tail (see
  // "Writes") comes with it in `tail`; ToParts's run is their union.
  struct LiveRun {
    FingerprintRunView main;
    FingerprintRunView tail;  // count() == 0: no tail
  };
  struct LiveSlice {
    int64_t index = 0;
    absl::InlinedVector<BloomSlices::Segment, 2> bloom_segments;
    absl::InlinedVector<LiveRun, 2> runs;
  };
  using LiveSlices = absl::InlinedVector<LiveSlice, 8>;
  LiveSlices Live(const FilterPolicy& policy, int64_t now_ms) const;

  // The filter `parts` describe, carrying `key`. InvalidArgument naming the
  // slice and field unless: at most kMaxPartsSlices slices in strictly
  // ascending index order; min_event_ms <= max_event_ms; every slice holds
  // some content, at most kMaxSegmentsPerSlice valid Bloom segments and
  // format::kMaxRunsPerSlice runs; every run non-empty with count <= capacity
  // <= U, open runs prefix runs (U = 2^b); and, when there are runs, their
  // union bound within the policy's budget beside the legacy slices
  // (RunSizing::Budget, + 1e-9 relative), or within what Record keeps for a
  // user past RunSizing::GuaranteedItems: AdmissionBudget + N * 2^-32.
  static absl::StatusOr<UserFilter> FromParts(const FilterPolicy& policy,
                                              FilterParts parts,
                                              absl::string_view key);

  // The owner's key ("" if none was given).
  absl::string_view key() const;
  // Replaces the key (a filter decoded from a snapshot joins the store).
  void SetKey(absl::string_view key);
  // When the owner last read or wrote this filter (its LRU clock); 0 for a
  // filter without allocation. Touch only moves it forward.
  int64_t last_active_ms() const {
    return h_ == nullptr ? 0
                         : h_->last_active_ms.load(std::memory_order_relaxed);
  }
  void Touch(int64_t now_ms) const {
    if (h_ != nullptr &&
        h_->last_active_ms.load(std::memory_order_relaxed) < now_ms) {
      h_->last_active_ms.store(now_ms, std::memory_order_relaxed);
    }
  }

  // Items held in tail runs (see "Writes"), 0 once merged: for tests.
  uint64_t tail_items() const;

  // Legacy Bloom slices (null if none): for tests and the interim encoders.
  const BloomSlices* legacy() const;

 private:
  // The header starts the allocation. Its first 8 bytes are written only
  // when the allocation is built (see the layout above).
  struct Header {
    uint32_t payload_bytes;  // ceil(payload bits / 8), at the allocation start
    uint16_t key_len;        // 0xffff: a u32 length precedes the key
    uint16_t table_bytes;
    std::atomic<int64_t> last_active_ms;
  };
  struct Legacy;  // BloomSlices and its measured FP rate

 public:
  // One run as the tables describe it.
  struct RunMeta {
    uint32_t count = 0;
    uint32_t capacity = 0;
    uint32_t payload_bits = 0;
    uint64_t universe = 2;
    uint8_t precision = 1;
    uint8_t rice_k = 0;
    bool open = false;
    // The tail of the open run before it (same precision, open, prefix);
    // its capacity is its count: the main run's capacity covers both.
    bool tail = false;
    uint64_t bit_offset = 0;  // derived: where its codes start
    // Prefixes (of 2^precision) whose fingerprint is in the run: a fresh
    // hash is claimed with probability exactly weight / 2^precision. Equal
    // to count for a prefix run (U = 2^b); for U < 2^b a fingerprint f
    // covers c_f = ceil((f+1) 2^b / U) - ceil(f 2^b / U) prefixes (1 or 2
    // when U > 2^(b-1)), and the stored f are the ones items landed on,
    // size-biased towards the wider ones: n / U underestimates the rate by
    // up to U / 2^b, so F uses the exact weight.
    uint64_t weight = 0;
    // weight * 2^-precision: std::ldexp's value (the power of two is exact
    // and normal, so is the product of it and an integer below 2^53),
    // built from its exponent bits instead of a libm call (F is summed over
    // every run several times per write).
    double fp() const {
      return static_cast<double>(weight) *
             absl::bit_cast<double>(uint64_t{1023u - precision} << 52);
    }
    // The tables' differences to the model as Decode read them (zigzag k,
    // weight and payload bits: user_filter_layout.cc): Rebuild writes them back
    // for a run it copies unchanged instead of evaluating the model again (an
    // expm1 and a pow per run and write).
    bool decoded = false;
    uint64_t z_k = 0, z_weight = 0, z_bits = 0;
  };
  struct SliceMeta {
    int64_t index = 0;
    int64_t min_event_ms = 0;
    int64_t max_event_ms = 0;
    uint8_t quiet = 0;     // user writes since this slice's last (saturates)
    int32_t num_runs = 0;  // not capped by Record: 256 seen
  };
  // The decoded tables.
  struct Tables {
    Legacy* legacy = nullptr;
    absl::InlinedVector<SliceMeta, 8> slices;
    absl::InlinedVector<RunMeta, 12> runs;  // slice by slice
  };

 private:
  // A run of a layout being assembled: its codes come from `src` (a run of
  // the current allocation, copied bit for bit) or are encoded from `fps`.
  struct RunPlan {
    RunMeta meta;
    const uint64_t* src = nullptr;  // null: `splice`, or encode `fps`
    std::vector<uint32_t> fps;      // sorted distinct, < universe
    // An open run of the current allocation with new fingerprints spliced
    // in (run_splice.h); `meta` is already the spliced run's.
    std::optional<RunSplice> splice;
  };
  // A slice's runs: most slices hold one, the one being written two (the
  // full open run and the one filling), so a write's plan allocates only
  // its slice list (one vector per slice was ~6 mallocs per write).
  using RunPlans = absl::InlinedVector<RunPlan, 2>;
  struct SlicePlan {
    SliceMeta meta;
    RunPlans runs;
  };

  // The tables' first entries, read without decoding the runs': the legacy
  // pointer, the slice count, and where the first slice's head starts.
  struct TablesHead {
    Legacy* legacy = nullptr;
    uint64_t slices = 0;
    const unsigned char* first_slice = nullptr;
  };
  TablesHead ReadHead() const;
  // The slice head at `p` (the slice before it: `prev_index`, its max event
  // time `prev_max`); advances `p` to the slice's first run entry.
  static SliceMeta ReadSliceHead(const unsigned char*& p, int64_t prev_index,
                                 uint64_t prev_max);
  Tables Decode() const;
  std::vector<SlicePlan> Plan(const Tables& t) const;
  FingerprintRunView View(const RunMeta& r) const;
  const uint64_t* payload() const {
    return reinterpret_cast<const uint64_t*>(h_ + 1);
  }
  // The allocation's size, header included.
  static size_t AllocBytes(const Header* h);
  // What follows the header: payload, key and tables, reaching at least
  // one word past the payload's last.
  static size_t BodyBytes(size_t payload_bytes, size_t key_bytes,
                          size_t table_bytes);
  // Replaces the allocation with one holding `plan`, `legacy` and `key`.
  void Rebuild(std::vector<SlicePlan>& plan, Legacy* legacy,
               absl::string_view key);
  static void Free(Header* h);
  // Sum of c_f over `fps` (see RunMeta::weight).
  static uint64_t Weight(const std::vector<uint32_t>& fps, int b, uint64_t u);
  // The runs' fingerprints, ascending distinct, re-mapped to (b, u) (b at
  // most each run's precision; u <= 2^b).
  static std::vector<uint32_t> RemapRuns(const UserFilter& f,
                                         const RunPlans& runs, int b,
                                         uint64_t u);
  // The run's fingerprints, ascending (decoded, or the planned ones).
  std::vector<uint32_t> Fingerprints(const RunPlan& r) const;
  static std::vector<uint32_t> Union(const std::vector<uint32_t>& a,
                                     const std::vector<uint32_t>& b);
  // Plans the prefix run `r` to hold `fps` (count and weight kept current).
  static void SetFingerprints(RunPlan& r, std::vector<uint32_t> fps);
  // Adds `add` (ascending distinct, claimed by no run of the slice) to the
  // open run `r`: spliced into its codes while the union's CanonicalRiceK
  // is the run's k (open runs are coded at it, see "Writes"), else
  // re-encoded.
  // `at`: where `add` lies in r's codes (LocateInRun), if known; else empty.
  void AddToOpen(RunPlan& r, std::vector<uint32_t> add,
                 std::vector<SplicePoint> at = {}) const;
  // Adds `add` (ascending distinct fingerprints at its precision, claimed by
  // no run of the slice) to slice.runs[open], the newest open run: the run
  // itself while small, else its tail (inserted after it if none), merged
  // into it when the tail passes max(kTailMinItems, main / kTailFraction).
  // False, changing nothing, if the pair would pass the run's capacity or
  // F (`fp` before) the budget; else *added = add.size(). `at`: where `add`
  // lies in the main run's codes, if known (Record's claimed-check).
  bool JoinOpen(SlicePlan& slice, size_t open, std::vector<uint32_t> add,
                double fp, double budget, uint64_t* added,
                std::vector<SplicePoint> at = {}) const;
  // Merges the tail of slice.runs[open], if any, into it.
  void MergeTail(SlicePlan& slice, size_t open) const;
  // Seals quiet slices (RunSizing) in `plan`; `idle`: every slice but the
  // newest where that shrinks the codes (SealIdle), the newest too if
  // `newest_ended`.
  void SealQuiet(const FilterPolicy& policy, std::vector<SlicePlan>& plan,
                 double budget, bool idle, bool newest_ended = false) const;
  // After a write at `event_ms` into the newest slice of `plan`: if every
  // older slice is sealed and the newest holds one open run, re-truncates
  // that run to RunSizing::LoweredNewestRun's precision.
  void LowerNewestRun(const FilterPolicy& policy, std::vector<SlicePlan>& plan,
                      double budget, int64_t event_ms) const;

  Header* h_ = nullptr;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_FILTER_USER_FILTER_H_
