// FilterCache: pull mode for recall servers. Keeps each user's last pulled
// filter and revalidates it with GetFilter's `if_version`, so an unchanged
// filter costs one tiny round trip and no bytes, and a changed one is pulled
// whole (docs/filter-format.md). Candidates are then checked locally with
// exactly the server's answer:
//
//   FilterCache cache(client.get(), {.max_users = 100000});
//   absl::StatusOr<std::shared_ptr<const PulledFilter>> f =
//       cache.Get("homefeed", user_id);
//   if (f.ok() && !(*f)->view().MayContainId(item)) keep(item);
//
// Every Get revalidates (exposures must be visible within seconds); bytes
// that fail to parse, or whose checksum is not the announced version, are
// DATA_LOSS and never cached. A failed revalidation is an error: the copy
// held is never served in its place (it may miss the exposures the failed
// call would have shown). Bounded: the least recently used user is
// forgotten beyond max_users. Thread-safe.
//
// The GetFilter calls go to one server (an ExposureFilterClient) or through
// any GetFilterCall, e.g. a RoutingClient that fails over between the
// user's owners (RoutingFilterCache, routing_client.h).
#ifndef EXPOSURE_FILTER_FILTER_CACHE_H_
#define EXPOSURE_FILTER_FILTER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "exposure_filter/exposure_filter_client.h"
#include "exposure_filter/filter_view.h"

namespace exposure_filter {

// One pulled filter: its bytes, the view over them, and its version.
// Immutable and shared, so a recall request can keep using the filter it
// started with while the cache moves on.
class PulledFilter {
 public:
  // Parses `bytes` and checks they are what `version` announces.
  static absl::StatusOr<std::shared_ptr<const PulledFilter>> Create(
      std::string bytes, std::string version);

  const FilterView& view() const { return view_; }
  const std::string& version() const { return version_; }
  size_t size_bytes() const { return bytes_.size(); }

 private:
  PulledFilter(std::string bytes, std::string version)
      : bytes_(std::move(bytes)), version_(std::move(version)) {}

  const std::string bytes_;  // view_ points into these; never moved after
  const std::string version_;
  FilterView view_;
};

struct FilterCacheOptions {
  size_t max_users = 100000;
};

struct FilterCacheStats {
  uint64_t full_pulls = 0;    // answers that carried a filter
  uint64_t not_modified = 0;  // revalidations answered "not modified"
  uint64_t errors = 0;        // failed calls or rejected bytes
  // Answers (either kind) from a replicated copy lagging past its
  // --max_serving_lag, given because the request allowed lagging (a
  // router's last try): staleness.lagging in the answer.
  uint64_t lagging_answers = 0;
};

// One GetFilter call, as the cache makes it; must be thread-safe.
using GetFilterCall =
    std::function<absl::StatusOr<exposure::v1::GetFilterResponse>(
        const exposure::v1::GetFilterRequest&)>;

class FilterCache {
 public:
  // `client` must outlive the cache.
  FilterCache(const ExposureFilterClient* client,
              const FilterCacheOptions& options);
  // Over any GetFilter call (a router's, with failover).
  FilterCache(GetFilterCall get_filter, const FilterCacheOptions& options);

  // The user's current filter on `surface`. *staleness (if set): the
  // answer's (docs/scale-out.md "Least-stale reads"), the revalidation's for
  // a filter served from the cache; cleared when the server reports none
  // (not replicated: every acknowledged write is applied).
  absl::StatusOr<std::shared_ptr<const PulledFilter>> Get(
      absl::string_view surface, absl::string_view user_id,
      exposure::v1::ReadStaleness* staleness = nullptr);

  // Forgets the cached copy (e.g. after DeleteUser).
  void Invalidate(absl::string_view surface, absl::string_view user_id);

  FilterCacheStats stats() const;
  size_t size() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const PulledFilter> filter;
  };
  using Lru = std::list<Entry>;  // most recently used first

  std::shared_ptr<const PulledFilter> Lookup(const std::string& key);
  void Store(const std::string& key, std::shared_ptr<const PulledFilter> f);

  const GetFilterCall get_filter_;
  const FilterCacheOptions options_;
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  FilterCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_FILTER_CACHE_H_
