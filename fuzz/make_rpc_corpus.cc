// Writes the checked-in seed corpora of the RPC fuzzers (fuzz/corpus/
// rpc_*_fuzzer/): a few dozen small serialized requests per RPC, valid ones
// (the preloaded user, every limit exactly, extreme times and ids) and ones
// one step past a limit, so each fuzzer starts from both sides of every
// check. The sequence fuzzer gets pseudo-random byte strings (any bytes
// drive FuzzedDataProvider), and so does the session fuzzer. Deterministic:
// rerunning rewrites the same files. Usage (after scripts/fuzz.sh built it):
//   build-fuzz/fuzz/make_rpc_corpus fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exposure/v1/exposure_filter.pb.h"
#include "fuzz/rpc_fuzz_fixture.h"

namespace {

namespace v1 = exposure::v1;
using exposure_filter::fuzz::FuzzLimits;
using exposure_filter::fuzz::kFuzzNowMs;

const exposure_filter::RequestLimits kLimits = FuzzLimits();
const std::string kMaxId(kLimits.max_id_bytes, 'u');
const std::string kLongId(kLimits.max_id_bytes + 1, 'u');
const std::string kMaxSurface(64, 's');

void Write(const std::filesystem::path& dir, const std::string& target,
           const std::vector<std::string>& seeds) {
  const std::filesystem::path d = dir / target;
  std::filesystem::create_directories(d);
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(d / absl::StrCat("seed-", i < 10 ? "0" : "", i),
                  std::ios::binary)
        << seeds[i];
  }
  std::printf("%s: %zu seeds\n", target.c_str(), seeds.size());
}

template <typename M>
std::string Wire(const M& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

// Users and surfaces every read-style request is tried with.
const std::vector<std::string> kUsers = {"u1",   "u2",    "nobody",
                                         kMaxId, kLongId, ""};
const std::vector<std::string> kSurfaces = {"",    "homefeed",  "short",
                                            "new", kMaxSurface, "Bad!"};

std::vector<std::string> RecordSeeds() {
  std::vector<std::string> out;
  const int64_t skew = absl::ToInt64Milliseconds(kLimits.max_future_skew);
  const std::vector<int64_t> times = {0,
                                      1,
                                      -1,
                                      kFuzzNowMs,
                                      kFuzzNowMs + skew,
                                      kFuzzNowMs + skew + 1,
                                      kFuzzNowMs - 30LL * 86'400'000,
                                      kFuzzNowMs - 86'400'000,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min()};
  for (int64_t t : times) {
    v1::RecordExposureRequest r;
    r.set_surface("homefeed");
    v1::Exposure* e = r.add_exposures();
    e->set_user_id("u1");
    e->add_item_ids(42);
    e->add_item_keys("k42");
    e->set_event_time_ms(t);
    out.push_back(Wire(r));
  }
  for (const std::string& s : kSurfaces) {
    v1::RecordExposureRequest r;
    r.set_surface(s);
    v1::Exposure* e = r.add_exposures();
    e->set_user_id("u3");
    e->add_item_ids(1);
    out.push_back(Wire(r));
  }
  for (const std::string& u : kUsers) {
    v1::RecordExposureRequest r;
    v1::Exposure* e = r.add_exposures();
    e->set_user_id(u);
    e->add_item_keys(u.empty() ? "x" : u);
    out.push_back(Wire(r));
  }
  for (size_t n : {kLimits.max_exposures_per_request,
                   kLimits.max_exposures_per_request + 1}) {
    v1::RecordExposureRequest r;  // duplicate users, one item each
    for (size_t i = 0; i < n; ++i) {
      v1::Exposure* e = r.add_exposures();
      e->set_user_id("u1");
      e->add_item_ids(i);
    }
    out.push_back(Wire(r));
  }
  for (size_t n :
       {kLimits.max_items_per_request, kLimits.max_items_per_request + 1}) {
    v1::RecordExposureRequest r;
    v1::Exposure* e = r.add_exposures();
    e->set_user_id("u4");
    for (size_t i = 0; i < n; ++i) e->add_item_ids(i * 0x9e3779b97f4a7c15ull);
    out.push_back(Wire(r));
  }
  for (const std::string& k : {std::string(), kMaxId, kLongId}) {
    v1::RecordExposureRequest r;
    v1::Exposure* e = r.add_exposures();
    e->set_user_id("u5");
    e->add_item_keys(k);
    out.push_back(Wire(r));
  }
  out.push_back("");  // no exposures at all
  return out;
}

std::vector<std::string> FilterSeeds() {
  std::vector<std::string> out;
  for (const std::string& u : kUsers) {
    for (int mode : {0, 1}) {
      v1::FilterRecalledRequest r;
      r.set_user_id(u);
      r.set_surface("homefeed");
      for (uint64_t id : {1ull, 2ull, 5ull, ~0ull}) r.add_candidate_ids(id);
      r.add_candidate_keys("k");
      r.add_candidate_keys("other");
      r.set_mode(static_cast<v1::ResultMode>(mode));
      out.push_back(Wire(r));
    }
  }
  for (const std::string& s : kSurfaces) {
    v1::FilterRecalledRequest r;
    r.set_surface(s);
    r.set_user_id("u1");
    r.add_candidate_ids(1);
    out.push_back(Wire(r));
  }
  for (int mode : {2, -1, std::numeric_limits<int>::max()}) {
    v1::FilterRecalledRequest r;
    r.set_user_id("u1");
    r.set_mode(static_cast<v1::ResultMode>(mode));
    out.push_back(Wire(r));
  }
  for (size_t n : {kLimits.max_candidates_per_request,
                   kLimits.max_candidates_per_request + 1}) {
    v1::FilterRecalledRequest r;
    r.set_user_id("u1");
    r.set_mode(v1::KEEP_MASK);
    for (size_t i = 0; i < n; ++i) r.add_candidate_ids(i);
    out.push_back(Wire(r));
  }
  for (const std::string& k : {std::string(), kMaxId, kLongId}) {
    v1::FilterRecalledRequest r;
    r.set_user_id("u1");
    r.add_candidate_keys(k);
    out.push_back(Wire(r));
  }
  return out;
}

// (surface, user_id) requests: GetUserStats, DeleteUser, GetFilter, Explain.
template <typename Req>
std::vector<Req> SurfaceUserRequests() {
  std::vector<Req> out;
  for (const std::string& s : kSurfaces) {
    for (const std::string& u : kUsers) {
      Req r;
      r.set_surface(s);
      r.set_user_id(u);
      out.push_back(r);
    }
  }
  return out;
}

template <typename Req>
std::vector<std::string> Wires(const std::vector<Req>& reqs) {
  std::vector<std::string> out;
  for (const Req& r : reqs) out.push_back(Wire(r));
  return out;
}

std::vector<std::string> GetFilterSeeds() {
  std::vector<v1::GetFilterRequest> reqs =
      SurfaceUserRequests<v1::GetFilterRequest>();
  for (const std::string& v :
       {std::string("0"), std::string(64, 'f'), std::string(65, 'f')}) {
    v1::GetFilterRequest r;
    r.set_user_id("u1");
    r.set_if_version(v);
    reqs.push_back(r);
  }
  return Wires(reqs);
}

std::vector<std::string> ExplainSeeds() {
  std::vector<v1::ExplainRequest> reqs;
  for (v1::ExplainRequest r : SurfaceUserRequests<v1::ExplainRequest>()) {
    if (r.surface() != "" && r.surface() != "homefeed" && r.user_id() != "u1") {
      continue;  // keep the corpus small
    }
    for (uint64_t id : {1ull, 9ull, ~0ull}) r.add_item_ids(id);
    r.add_item_keys("k");
    reqs.push_back(r);
  }
  v1::ExplainRequest big;
  big.set_user_id("u1");
  for (size_t i = 0; i <= kLimits.max_candidates_per_request; ++i) {
    big.add_item_ids(i);
  }
  reqs.push_back(big);
  return Wires(reqs);
}

template <typename Req>
std::vector<std::string> TraceSeeds() {
  std::vector<std::string> out;
  const std::vector<std::vector<std::string>> lists = {
      {},
      {"u1"},
      {"u2"},
      {"u2", "u2"},
      {"u2", "u3", "u4"},
      {"u2", "u3", "u4", "u5"},
      {"u2", "u3", "u4", "u5", "u6"},
      {""},
      {kMaxId},
      {kLongId},
      {"u1", "u2", ""}};
  for (const auto& list : lists) {
    Req r;
    for (const std::string& u : list) r.add_user_ids(u);
    out.push_back(Wire(r));
  }
  return out;
}

// Messages without fields: empty, and unknown fields of every wire type.
std::vector<std::string> NoFieldSeeds() {
  return {"",
          std::string("\x08\x01", 2),  // varint field 1
          std::string("\x12\x03"
                      "abc",
                      5),  // length-delimited
          std::string("\x19"
                      "01234567",
                      9),  // fixed64
          std::string("\x25"
                      "0123",
                      5),                               // fixed32
          std::string("\xf8\xff\xff\xff\x0f\x00", 6)};  // max field number
}

std::vector<std::string> SequenceSeeds() {
  std::mt19937_64 rng(20261123);
  std::vector<std::string> out;
  for (size_t len :
       {16, 32, 64, 64, 128, 128, 256, 256, 512, 512, 1024, 2048}) {
    for (int copy = 0; copy < 2; ++copy) {
      std::string s(len, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      out.push_back(s);
    }
  }
  return out;
}

// The session fuzzer reads its steps through FuzzedDataProvider too; its
// seeds are longer, so that the first runs already reach a stopped reader,
// a burst of writes and an overflow (a step costs a few bytes). A seed is
// a byte string, so a different generator seed keeps them apart from the
// sequence fuzzer's.
std::vector<std::string> SessionSeeds() {
  std::mt19937_64 rng(20261128);
  std::vector<std::string> out;
  for (size_t len : {64, 128, 256, 256, 512, 512, 1024, 1024, 2048, 4096}) {
    for (int copy = 0; copy < 2; ++copy) {
      std::string s(len, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  Write(dir, "rpc_record_exposure_fuzzer", RecordSeeds());
  Write(dir, "rpc_filter_recalled_fuzzer", FilterSeeds());
  Write(dir, "rpc_get_filter_fuzzer", GetFilterSeeds());
  Write(dir, "rpc_get_user_stats_fuzzer",
        Wires(SurfaceUserRequests<v1::GetUserStatsRequest>()));
  Write(dir, "rpc_delete_user_fuzzer",
        Wires(SurfaceUserRequests<v1::DeleteUserRequest>()));
  Write(dir, "rpc_get_server_stats_fuzzer", NoFieldSeeds());
  Write(dir, "rpc_explain_fuzzer", ExplainSeeds());
  Write(dir, "rpc_add_traced_users_fuzzer",
        TraceSeeds<v1::AddTracedUsersRequest>());
  Write(dir, "rpc_remove_traced_users_fuzzer",
        TraceSeeds<v1::RemoveTracedUsersRequest>());
  Write(dir, "rpc_list_traced_users_fuzzer", NoFieldSeeds());
  Write(dir, "rpc_sequence_fuzzer", SequenceSeeds());
  Write(dir, "session_stream_fuzzer", SessionSeeds());
  return 0;
}
