// Structure-aware libFuzzer harness: the fuzz bytes choose (through
// FuzzedDataProvider) a sequence of well-formed RPCs with extreme values on
// ONE service instance (rpc_fuzz_fixture.h), interleaved with clock moves
// (forward by up to 60 days, back by up to 45) and sweeps, and a model of
// what must hold is checked after every step:
//
//   - No false negatives: an item recorded at (effective) event time e on a
//     surface with retention R, and not deleted since, is filtered while
//     e >= max(now, latest clock any sweep or write ran at) - R (the window
//     is at least R; aging happens only at sweeps and writes, by the clock
//     then, and reads judge by the clock now).
//   - Validation: each request carries at most one deliberate defect (empty
//     or one-byte-too-long ids, bad surface names, negative or too-far-
//     future times, unknown result modes, every per-request limit + 1); a
//     defective request must fail with INVALID_ARGUMENT whose message starts
//     with exactly the defective field's path, and change nothing; a clean
//     one (including every limit exactly) must succeed (the fixture's
//     surface registry is shared by all inputs and never full, see
//     rpc_fuzz_fixture.h).
//   - Accounting: users and bytes add up over shards and surfaces and never
//     wrap negative (RpcFuzzFixture::CheckedUsage).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exposure_filter/filter_view.h"
#include "fuzz/rpc_fuzz_fixture.h"

namespace exposure_filter {
namespace fuzz {
namespace {

constexpr int64_t kDayMs = 86'400'000;
constexpr size_t kMaxModelItemsPerUser = 256;

// An item as the API names it: a numeric id or a string key.
struct Item {
  bool is_key = false;
  uint64_t id = 0;
  std::string key;
  bool operator<(const Item& o) const {
    return std::tie(is_key, id, key) < std::tie(o.is_key, o.id, o.key);
  }
};

struct Recorded {
  Item item;
  int64_t event_ms;
};

class SequenceRun {
 public:
  explicit SequenceRun(const uint8_t* data, size_t size)
      : in_(data, size), limits_(FuzzLimits()) {
    for (const std::string& s : PreloadedSurfaces()) {
      for (uint64_t id : kPreloadedIds) {
        Remember(s, kPreloadedUser, Item{false, id, ""},
                 kFuzzNowMs - 3'600'000);
      }
      Remember(s, kPreloadedUser, Item{true, 0, kPreloadedKey},
               kFuzzNowMs - 3'600'000);
    }
    last_aging_ms_ = kFuzzNowMs;
  }

  void Run() {
    for (int step = 0; step < 64 && in_.remaining_bytes() > 0; ++step) {
      switch (in_.ConsumeIntegralInRange<int>(0, 10)) {
        case 0:
        case 1:
          Record();
          break;
        case 2:
          Filter();
          break;
        case 3:
          Pull();
          break;
        case 4:
          Delete();
          break;
        case 5:
          ExplainItems();
          break;
        case 6:
          Stats();
          break;
        case 7:
          Trace();
          break;
        case 8:
          MoveClock();
          break;
        case 9:
          fx_.store().DropExpired();
          last_aging_ms_ = std::max(last_aging_ms_, Now());
          break;
        case 10: {
          exposure::v1::GetServerStatsResponse st;
          Require(fx_.handlers().GetServerStats({}, &st).ok(), "stats");
          break;
        }
      }
      fx_.CheckedUsage();
      CheckNoFalseNegatives();
    }
  }

 private:
  int64_t Now() { return fx_.clock().NowMs(); }
  static int64_t RetentionMs(const std::string& surface) {
    return surface == "short" ? kDayMs : 30 * kDayMs;
  }

  // --- Values ------------------------------------------------------------
  std::string Surface() {
    static const char* const kNames[] = {"",   "homefeed", "short", "s3",
                                         "s4", "s5",       "s6",    "s7"};
    if (in_.ConsumeIntegralInRange<int>(0, 15) == 0) {
      return std::string(SurfaceRegistry::kMaxNameBytes, 'x');  // exactly max
    }
    return kNames[in_.ConsumeIntegralInRange<int>(0, 7)];
  }
  std::string UserId() {
    switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        return std::string(limits_.max_id_bytes, 'u');  // exactly max
      case 1:
        return std::string("\0u", 2);  // embedded NUL is a valid id
      default:
        return absl::StrCat("u", in_.ConsumeIntegralInRange<int>(0, 3));
    }
  }
  Item RandomItem() {
    Item it;
    it.is_key = in_.ConsumeBool();
    if (!it.is_key) {
      switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
        case 0:
          it.id = 0;
          break;
        case 1:
          it.id = std::numeric_limits<uint64_t>::max();
          break;
        default:
          it.id = in_.ConsumeIntegralInRange<uint64_t>(0, 40);
      }
    } else if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) {
      it.key = std::string(limits_.max_id_bytes, 'k');  // exactly max
    } else {
      it.key = absl::StrCat("k", in_.ConsumeIntegralInRange<int>(0, 40));
    }
    return it;
  }
  // Valid event times, extremes included.
  int64_t EventTime() {
    const int64_t now = Now();
    const int64_t skew = absl::ToInt64Milliseconds(limits_.max_future_skew);
    switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        return 0;  // now
      case 1:
        return now + skew;  // the latest accepted
      case 2:
        return 1;  // 1970: expired
      case 3:
        return now - 30 * kDayMs;  // the window's edge (default surfaces)
      case 4:
        return now - kDayMs;  // the edge of "short"
      case 5:
        return now - in_.ConsumeIntegralInRange<int64_t>(0, 40 * kDayMs);
      default:
        return now - in_.ConsumeIntegralInRange<int64_t>(0, 3'600'000);
    }
  }

  // --- Model ---------------------------------------------------------------
  void Remember(const std::string& surface, const std::string& user,
                const Item& item, int64_t event_ms) {
    std::vector<Recorded>& v = model_[{surface, user}];
    if (v.size() < kMaxModelItemsPerUser) v.push_back({item, event_ms});
  }
  // Items of (surface, user) that must be filtered now.
  std::vector<Item> MustBeFiltered(const std::string& surface,
                                   const std::string& user) {
    std::vector<Item> out;
    auto it = model_.find({surface, user});
    if (it == model_.end()) return out;
    const int64_t horizon =
        std::max(Now(), last_aging_ms_) - RetentionMs(surface);
    std::set<Item> seen;
    for (const Recorded& r : it->second) {
      if (r.event_ms >= horizon && seen.insert(r.item).second) {
        out.push_back(r.item);
      }
    }
    return out;
  }
  static void AddCandidates(const std::vector<Item>& items,
                            exposure::v1::FilterRecalledRequest* req) {
    for (const Item& it : items) {
      if (it.is_key) {
        req->add_candidate_keys(it.key);
      } else {
        req->add_candidate_ids(it.id);
      }
    }
  }

  void CheckNoFalseNegatives() {
    for (const auto& entry : model_) {
      const std::pair<std::string, std::string>& su = entry.first;
      std::vector<Item> must = MustBeFiltered(su.first, su.second);
      if (must.empty()) continue;
      must.resize(std::min(must.size(), limits_.max_candidates_per_request));
      exposure::v1::FilterRecalledRequest req;
      req.set_surface(su.first);
      req.set_user_id(su.second);
      AddCandidates(must, &req);
      exposure::v1::FilterRecalledResponse resp;
      Require(fx_.handlers().FilterRecalled(req, &resp).ok(), "filter model");
      if (resp.kept_ids_size() + resp.kept_keys_size() != 0) {
        std::fprintf(stderr,
                     "surface \"%s\" user \"%s\" now %lld: %d ids, "
                     "%d keys kept\n",
                     su.first.c_str(), su.second.c_str(),
                     static_cast<long long>(Now()), resp.kept_ids_size(),
                     resp.kept_keys_size());
      }
      Require(resp.kept_ids_size() + resp.kept_keys_size() == 0,
              "no false negatives within the window");
    }
  }

  // Expects `s` to be INVALID_ARGUMENT at `field` when defect_field is
  // non-empty, else OK (or RESOURCE_EXHAUSTED if `may_exhaust`: the trace
  // cap).
  static void Expect(const absl::Status& s, const std::string& defect_field,
                     bool may_exhaust = false) {
    if (!defect_field.empty()) {
      if (s.code() != absl::StatusCode::kInvalidArgument ||
          !absl::StartsWith(s.message(), defect_field + ": ")) {
        std::fprintf(stderr, "expected %s, got %s\n", defect_field.c_str(),
                     s.ToString().c_str());
        Require(false, "a defective request names its field");
      }
      return;
    }
    if (may_exhaust && s.code() == absl::StatusCode::kResourceExhausted) return;
    if (!s.ok()) std::fprintf(stderr, "got %s\n", s.ToString().c_str());
    Require(s.ok(), "a clean request succeeds");
  }

  // --- Steps -------------------------------------------------------------
  void Record() {
    exposure::v1::RecordExposureRequest req;
    std::string surface = Surface();
    req.set_surface(surface);
    const size_t n = in_.ConsumeBool()
                         ? limits_.max_exposures_per_request
                         : in_.ConsumeIntegralInRange<size_t>(0, 4);
    size_t items = 0;
    for (size_t i = 0; i < n; ++i) {
      exposure::v1::Exposure* e = req.add_exposures();
      e->set_user_id(UserId());
      e->set_event_time_ms(EventTime());
      const size_t k = in_.ConsumeIntegralInRange<size_t>(
          0, std::min<size_t>(8, limits_.max_items_per_request - items));
      for (size_t j = 0; j < k; ++j) {
        Item it = RandomItem();
        if (it.is_key) {
          e->add_item_keys(it.key);
        } else {
          e->add_item_ids(it.id);
        }
      }
      items += k;
    }
    // At most one defect.
    std::string defect;
    const int kind = in_.ConsumeIntegralInRange<int>(0, 15);
    const int i = n == 0 ? -1 : in_.ConsumeIntegralInRange<int>(0, n - 1);
    auto* e = i < 0 ? nullptr : req.mutable_exposures(i);
    const std::string at = absl::StrCat("exposures[", i, "]");
    switch (kind) {
      case 1:
        req.set_surface("Home");
        defect = "surface";
        break;
      case 2:
        req.set_surface(std::string(SurfaceRegistry::kMaxNameBytes + 1, 'x'));
        defect = "surface";
        break;
      case 3:
        while (static_cast<size_t>(req.exposures_size()) <=
               limits_.max_exposures_per_request) {
          req.add_exposures()->set_user_id("u0");
        }
        defect = "exposures";
        break;
      case 4:
        if (e == nullptr) break;
        e->set_user_id(in_.ConsumeBool()
                           ? ""
                           : std::string(limits_.max_id_bytes + 1, 'u'));
        defect = at + ".user_id";
        break;
      case 5:
        if (e == nullptr) break;
        e->set_event_time_ms(
            in_.ConsumeBool() ? -1 : std::numeric_limits<int64_t>::min());
        defect = at + ".event_time_ms";
        break;
      case 6:
        if (e == nullptr) break;
        e->set_event_time_ms(
            in_.ConsumeBool()
                ? Now() + absl::ToInt64Milliseconds(limits_.max_future_skew) + 1
                : std::numeric_limits<int64_t>::max());
        defect = at + ".event_time_ms";
        break;
      case 7:
        if (e == nullptr) break;
        // One item past the per-request total, added to exposure i.
        while (items <= limits_.max_items_per_request) {
          e->add_item_ids(items++);
        }
        defect = "exposures";
        break;
      case 8:
        // The key counts toward the items limit before it is checked.
        if (e == nullptr || items >= limits_.max_items_per_request) break;
        e->add_item_keys(in_.ConsumeBool()
                             ? ""
                             : std::string(limits_.max_id_bytes + 1, 'k'));
        defect = absl::StrCat(at, ".item_keys[", e->item_keys_size() - 1, "]");
        break;
      default:
        break;
    }
    // Items in earlier exposures than a per-exposure defect may push the
    // total over the limit first: only exposure i's own checks are certain.
    if (!defect.empty() && defect != "surface" && defect != "exposures" &&
        items > limits_.max_items_per_request) {
      return;
    }
    const auto before = fx_.CheckedUsage();
    const int64_t now = Now();
    exposure::v1::RecordExposureResponse resp;
    const absl::Status s = fx_.handlers().RecordExposure(req, &resp);
    Expect(s, defect);
    if (!s.ok()) {
      Require(fx_.CheckedUsage() == before, "rejected record changes nothing");
      return;
    }
    last_aging_ms_ = std::max(last_aging_ms_, now);
    for (const exposure::v1::Exposure& x : req.exposures()) {
      const int64_t event =
          x.event_time_ms() == 0 ? now : std::min(x.event_time_ms(), now);
      if (event < now - RetentionMs(req.surface())) continue;  // expired
      for (uint64_t id : x.item_ids()) {
        Remember(req.surface(), x.user_id(), Item{false, id, ""}, event);
      }
      for (const std::string& k : x.item_keys()) {
        Remember(req.surface(), x.user_id(), Item{true, 0, k}, event);
      }
    }
  }

  void Filter() {
    exposure::v1::FilterRecalledRequest req;
    req.set_surface(Surface());
    req.set_user_id(UserId());
    const std::vector<Item> must = MustBeFiltered(req.surface(), req.user_id());
    const size_t extra = in_.ConsumeIntegralInRange<size_t>(0, 8);
    std::vector<Item> cands = must;
    for (size_t i = 0; i < extra; ++i) cands.push_back(RandomItem());
    if (in_.ConsumeBool()) {  // exactly the limit
      while (cands.size() < limits_.max_candidates_per_request) {
        cands.push_back(Item{false, cands.size() * 7919, ""});
      }
    }
    cands.resize(std::min(cands.size(), limits_.max_candidates_per_request));
    AddCandidates(cands, &req);
    req.set_mode(in_.ConsumeBool() ? exposure::v1::KEEP_MASK
                                   : exposure::v1::KEPT_IDS);
    std::string defect;
    switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
      case 1:
        req.set_mode(static_cast<exposure::v1::ResultMode>(
            in_.PickValueInArray<int>({2, -1, 1 << 30})));
        defect = "mode";
        break;
      case 2:
        while (static_cast<size_t>(req.candidate_ids_size() +
                                   req.candidate_keys_size()) <=
               limits_.max_candidates_per_request) {
          req.add_candidate_ids(0);
        }
        defect = "candidate_ids";
        break;
      case 3:
        req.set_user_id(in_.ConsumeBool()
                            ? ""
                            : std::string(limits_.max_id_bytes + 1, 'u'));
        defect = "user_id";
        break;
      case 4:
        if (static_cast<size_t>(req.candidate_ids_size() +
                                req.candidate_keys_size()) >=
            limits_.max_candidates_per_request) {
          break;
        }
        req.add_candidate_keys("");
        defect =
            absl::StrCat("candidate_keys[", req.candidate_keys_size() - 1, "]");
        break;
      case 5:
        req.set_surface("no spaces");
        defect = "surface";
        break;
      default:
        break;
    }
    exposure::v1::FilterRecalledResponse resp;
    const absl::Status s = fx_.handlers().FilterRecalled(req, &resp);
    Expect(s, defect);
    if (!s.ok() || req.mode() == exposure::v1::KEEP_MASK) return;
    std::set<uint64_t> kept_ids(resp.kept_ids().begin(), resp.kept_ids().end());
    std::set<std::string> kept_keys(resp.kept_keys().begin(),
                                    resp.kept_keys().end());
    for (const Item& it : must) {
      Require(it.is_key ? !kept_keys.count(it.key) : !kept_ids.count(it.id),
              "no false negatives (filter step)");
    }
  }

  void Pull() {
    exposure::v1::GetFilterRequest req;
    req.set_surface(Surface());
    req.set_user_id(UserId());
    std::string defect;
    switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
      case 1:
        req.set_if_version(std::string(65, 'v'));
        defect = "if_version";
        break;
      case 2:
        req.set_if_version(std::string(64, '0'));  // longest accepted
        break;
      case 3:
        req.set_user_id("");
        defect = "user_id";
        break;
      default:
        break;
    }
    exposure::v1::GetFilterResponse resp;
    const absl::Status s = fx_.handlers().GetFilter(req, &resp);
    Expect(s, defect);
    if (!s.ok()) return;
    Require(!resp.not_modified() || resp.version() == req.if_version(),
            "not_modified only for the current version");
    if (resp.not_modified()) return;
    absl::StatusOr<FilterView> view = FilterView::Parse(resp.filter());
    Require(view.ok(), "the served filter parses");
    for (const Item& it : MustBeFiltered(req.surface(), req.user_id())) {
      Require(it.is_key ? view->MayContainKey(it.key).value_or(false)
                        : view->MayContainId(it.id),
              "no false negatives (pulled filter)");
    }
  }

  void Delete() {
    exposure::v1::DeleteUserRequest req;
    req.set_surface(Surface());
    req.set_user_id(UserId());
    exposure::v1::DeleteUserResponse resp;
    const absl::Status s = fx_.handlers().DeleteUser(req, &resp);
    Expect(s, "");
    model_.erase({req.surface(), req.user_id()});
    exposure::v1::GetUserStatsRequest q;
    q.set_surface(req.surface());
    q.set_user_id(req.user_id());
    exposure::v1::GetUserStatsResponse st;
    Require(fx_.handlers().GetUserStats(q, &st).ok() && !st.exists(),
            "deleted user has no stats");
  }

  void ExplainItems() {
    exposure::v1::ExplainRequest req;
    req.set_surface(Surface());
    req.set_user_id(UserId());
    const std::vector<Item> must = MustBeFiltered(req.surface(), req.user_id());
    for (const Item& it : must) {
      if (static_cast<size_t>(req.item_ids_size() + req.item_keys_size()) >=
          limits_.max_candidates_per_request) {
        break;
      }
      if (it.is_key) {
        req.add_item_keys(it.key);
      } else {
        req.add_item_ids(it.id);
      }
    }
    std::string defect;
    if (in_.ConsumeIntegralInRange<int>(0, 5) == 0) {
      req.set_user_id(std::string(limits_.max_id_bytes + 1, 'u'));
      defect = "user_id";
    }
    exposure::v1::ExplainResponse resp;
    const absl::Status s = fx_.handlers().Explain(req, &resp);
    Expect(s, defect);
    if (!s.ok()) return;
    Require(resp.items_size() == req.item_ids_size() + req.item_keys_size(),
            "one explanation per item");
    for (const auto& item : resp.items()) {
      Require(item.filtered(), "no false negatives (explain)");
    }
  }

  void Stats() {
    exposure::v1::GetUserStatsRequest req;
    req.set_surface(Surface());
    req.set_user_id(UserId());
    exposure::v1::GetUserStatsResponse st;
    Expect(fx_.handlers().GetUserStats(req, &st), "");
    if (!MustBeFiltered(req.surface(), req.user_id()).empty()) {
      Require(st.exists() && st.slices() > 0, "a user with history exists");
    }
  }

  void Trace() {
    const int op = in_.ConsumeIntegralInRange<int>(0, 2);
    if (op == 2) {
      exposure::v1::ListTracedUsersResponse list;
      Require(fx_.handlers().ListTracedUsers({}, &list).ok(), "list");
      Require(list.users_size() <= 4, "trace cap");
      return;
    }
    std::vector<std::string> ids;
    const size_t n = in_.ConsumeIntegralInRange<size_t>(0, 6);
    for (size_t i = 0; i < n; ++i) ids.push_back(UserId());
    std::string defect = ids.empty() ? "user_ids" : "";
    if (!ids.empty() && in_.ConsumeIntegralInRange<int>(0, 5) == 0) {
      ids.back() = "";
      defect = absl::StrCat("user_ids[", ids.size() - 1, "]");
    }
    absl::Status s;
    if (op == 0) {
      exposure::v1::AddTracedUsersRequest req;
      for (const std::string& id : ids) req.add_user_ids(id);
      exposure::v1::AddTracedUsersResponse resp;
      s = fx_.handlers().AddTracedUsers(req, &resp);
      Expect(s, defect, /*may_exhaust=*/true);  // the 4-user trace cap
    } else {
      exposure::v1::RemoveTracedUsersRequest req;
      for (const std::string& id : ids) req.add_user_ids(id);
      exposure::v1::RemoveTracedUsersResponse resp;
      s = fx_.handlers().RemoveTracedUsers(req, &resp);
      Expect(s, defect);
    }
  }

  void MoveClock() {
    ManualClock& c = fx_.clock();
    switch (in_.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        c.Advance(absl::Milliseconds(
            in_.ConsumeIntegralInRange<int64_t>(0, 3 * kDayMs)));
        break;
      case 1:  // the wall clock steps back, up to 45 days
        c.Set(Now() - in_.ConsumeIntegralInRange<int64_t>(0, 45 * kDayMs));
        break;
      case 2:
        c.Set(Now() + 60 * kDayMs);
        break;
      case 3:
        c.Set(Now() - 40 * kDayMs);
        break;
      default:
        c.Set(Now() - 3 * kDayMs);
        break;
    }
    // Event times are validated non-negative against this clock; keep it
    // in the present era.
    if (Now() < 365 * kDayMs) c.Set(kFuzzNowMs);
  }

  FuzzedDataProvider in_;
  const RequestLimits limits_;
  RpcFuzzFixture fx_;
  std::map<std::pair<std::string, std::string>, std::vector<Recorded>> model_;
  // The latest clock reading at which a sweep or a write (which ages the
  // written user) ran: nothing younger than it minus retention is dropped.
  int64_t last_aging_ms_ = 0;
};

}  // namespace
}  // namespace fuzz
}  // namespace exposure_filter

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exposure_filter::fuzz::SequenceRun run(data, size);
  run.Run();
  return 0;
}
