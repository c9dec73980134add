#include "exposure_filter/filter_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "exposure_filter/filter_format.h"
#include "src/filter/filter_encoder.h"

namespace exposure_filter {

absl::StatusOr<std::shared_ptr<const PulledFilter>> PulledFilter::Create(
    std::string bytes, std::string version) {
  std::shared_ptr<PulledFilter> f(
      new PulledFilter(std::move(bytes), std::move(version)));
  absl::StatusOr<FilterView> view = FilterView::Parse(f->bytes_);
  if (!view.ok()) {
    return absl::DataLossError(
        absl::StrCat("filter: ", view.status().message()));
  }
  // The version is the format's trailing checksum (docs/filter-format.md);
  // a mismatch means the bytes are not the filter the server described.
  if (FilterVersionString(view->checksum()) != f->version_) {
    return absl::DataLossError(
        absl::StrCat("filter: checksum ", FilterVersionString(view->checksum()),
                     " does not match version \"", f->version_, "\""));
  }
  f->view_ = *std::move(view);
  return std::shared_ptr<const PulledFilter>(std::move(f));
}

FilterCache::FilterCache(const ExposureFilterClient* client,
                         const FilterCacheOptions& options)
    : FilterCache(
          [client](const exposure::v1::GetFilterRequest& req) {
            return client->GetFilter(req);
          },
          options) {}

FilterCache::FilterCache(GetFilterCall get_filter,
                         const FilterCacheOptions& options)
    : get_filter_(std::move(get_filter)), options_(options) {}

namespace {

// Surface names cannot contain '/', so this key is unambiguous.
std::string CacheKey(absl::string_view surface, absl::string_view user_id) {
  return absl::StrCat(surface, "/", user_id);
}

}  // namespace

std::shared_ptr<const PulledFilter> FilterCache::Lookup(
    const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->filter;
}

void FilterCache::Store(const std::string& key,
                        std::shared_ptr<const PulledFilter> f) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->filter = std::move(f);
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(Entry{key, std::move(f)});
  index_[key] = lru_.begin();
  while (lru_.size() > options_.max_users) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

absl::StatusOr<std::shared_ptr<const PulledFilter>> FilterCache::Get(
    absl::string_view surface, absl::string_view user_id,
    exposure::v1::ReadStaleness* staleness) {
  if (staleness != nullptr) staleness->Clear();
  const std::string key = CacheKey(surface, user_id);
  std::shared_ptr<const PulledFilter> cached = Lookup(key);
  exposure::v1::GetFilterRequest req;
  req.set_surface(std::string(surface));
  req.set_user_id(std::string(user_id));
  if (cached != nullptr) req.set_if_version(cached->version());
  // The versions FilterView reads: a server that moves past them refuses
  // with FAILED_PRECONDITION instead of sending bytes it cannot parse.
  req.add_accepted_formats(format::kVersion1);
  req.add_accepted_formats(format::kVersion2);
  absl::StatusOr<exposure::v1::GetFilterResponse> resp = get_filter_(req);
  if (resp.ok() && resp->not_modified() &&
      (cached == nullptr || resp->version() != cached->version())) {
    resp = absl::DataLossError(
        absl::StrCat("GetFilter answered not_modified for version \"",
                     resp->version(), "\", which this cache does not hold"));
  }
  if (!resp.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.errors;
    return resp.status();
  }
  if (staleness != nullptr) *staleness = resp->staleness();
  const bool lagging = resp->staleness().lagging();
  if (resp->not_modified()) {
    absl::MutexLock lock(&mu_);
    ++stats_.not_modified;
    if (lagging) ++stats_.lagging_answers;
    return cached;
  }
  absl::StatusOr<std::shared_ptr<const PulledFilter>> pulled =
      PulledFilter::Create(std::move(*resp->mutable_filter()),
                           std::move(*resp->mutable_version()));
  if (!pulled.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.errors;
    return pulled.status();
  }
  Store(key, *pulled);
  absl::MutexLock lock(&mu_);
  ++stats_.full_pulls;
  if (lagging) ++stats_.lagging_answers;
  return pulled;
}

void FilterCache::Invalidate(absl::string_view surface,
                             absl::string_view user_id) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(CacheKey(surface, user_id));
  if (it == index_.end()) return;
  lru_.erase(it->second);
  index_.erase(it);
}

FilterCacheStats FilterCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

size_t FilterCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

}  // namespace exposure_filter
