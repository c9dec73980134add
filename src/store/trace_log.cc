#include "src/store/trace_log.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace exposure_filter {
namespace {

// Export format, all integers little-endian:
//   "EFTR" u32 version(=1) u32 user_count
//   user_count x { str user_id, i64 traced_since_ms, u64 entries_dropped,
//                  u32 entry_count,
//                  entry_count x { str surface, i64 event_ms,
//                                  i64 expires_at_ms, u8 is_key,
//                                  is_key ? str key : u64 id } }
// with str = u32 length + bytes. Integrity (checksums, atomic replacement)
// is the snapshot file's job; Import only refuses bytes that do not parse.
constexpr char kMagic[4] = {'E', 'F', 'T', 'R'};
constexpr uint32_t kFormatVersion = 1;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutStr(std::string* out, absl::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) {
      *v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[i]))
            << (8 * i);
    }
    in_.remove_prefix(8);
    return true;
  }
  bool U32(uint32_t* v) {
    if (in_.size() < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      *v |= static_cast<uint32_t>(static_cast<unsigned char>(in_[i]))
            << (8 * i);
    }
    in_.remove_prefix(4);
    return true;
  }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool U8(uint8_t* v) {
    if (in_.empty()) return false;
    *v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n;
    if (!U32(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool Bytes(size_t n, absl::string_view* s) {
    if (in_.size() < n) return false;
    *s = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  absl::string_view in_;
};

// Heap bytes of a string beyond the small-string buffer (libstdc++: 15).
uint64_t HeapBytes(const std::string& s) {
  return s.capacity() > 15 ? s.capacity() + 1 : 0;
}

}  // namespace

uint64_t TraceLog::EntryBytes(const Entry& e) {
  return sizeof(Entry) + HeapBytes(e.surface) + HeapBytes(e.item_key);
}

absl::StatusOr<size_t> TraceLog::Add(absl::Span<const std::string> user_ids,
                                     int64_t now_ms) {
  WriterLock lock(&mu_);
  absl::flat_hash_set<absl::string_view> fresh;
  for (const std::string& id : user_ids) {
    if (!users_.contains(id)) fresh.insert(id);
  }
  if (users_.size() + fresh.size() > limits_.max_users) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "user_ids: tracing ", fresh.size(), " more users would exceed ",
        "--trace_max_users=", limits_.max_users,
        " (traced now: ", users_.size(), "); nothing was added"));
  }
  for (absl::string_view id : fresh) {
    users_[id].traced_since_ms = now_ms;
  }
  count_.store(users_.size(), std::memory_order_release);
  if (journal_ != nullptr && !fresh.empty()) {
    const std::vector<absl::string_view> ids(fresh.begin(), fresh.end());
    journal_->OnTraceAdd(ids, now_ms);
  }
  return fresh.size();
}

size_t TraceLog::Remove(absl::Span<const std::string> user_ids) {
  WriterLock lock(&mu_);
  std::vector<absl::string_view> removed;
  for (const std::string& id : user_ids) {
    if (users_.erase(id) > 0) removed.push_back(id);
  }
  count_.store(users_.size(), std::memory_order_release);
  if (journal_ != nullptr && !removed.empty()) journal_->OnTraceRemove(removed);
  return removed.size();
}

std::vector<TracedUserInfo> TraceLog::List() const {
  std::vector<TracedUserInfo> out;
  {
    ReaderLock lock(&mu_);
    out.reserve(users_.size());
    for (const auto& [id, user] : users_) {
      out.push_back(TracedUserInfo{id, user.traced_since_ms,
                                   user.entries.size(), user.entries_dropped,
                                   user.bytes});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const TracedUserInfo& a, const TracedUserInfo& b) {
              return a.user_id < b.user_id;
            });
  return out;
}

bool TraceLog::IsTraced(absl::string_view user_id) const {
  if (size() == 0) return false;
  ReaderLock lock(&mu_);
  return users_.contains(user_id);
}

void TraceLog::AppendLocked(TracedUser& user, Entry entry) {
  if (limits_.max_entries_per_user == 0) {
    ++user.entries_dropped;
    return;
  }
  while (user.entries.size() >= limits_.max_entries_per_user) {
    user.bytes -= EntryBytes(user.entries.front());
    user.entries.pop_front();
    ++user.entries_dropped;
  }
  user.bytes += EntryBytes(entry);
  user.entries.push_back(std::move(entry));
}

void TraceLog::Record(absl::string_view surface,
                      absl::Span<const TracedExposure> batch) {
  if (size() == 0) return;
  WriterLock lock(&mu_);
  for (const TracedExposure& e : batch) {
    auto it = users_.find(e.user_id);
    if (it == users_.end()) continue;
    if (e.item_ids.empty() && e.item_keys.empty()) continue;
    if (journal_ != nullptr) journal_->OnTraceRecord(surface, e);
    TracedUser& user = it->second;
    for (uint64_t id : e.item_ids) {
      Entry entry;
      entry.surface = std::string(surface);
      entry.item_id = id;
      entry.event_ms = e.event_ms;
      entry.expires_at_ms = e.expires_at_ms;
      AppendLocked(user, std::move(entry));
    }
    for (absl::string_view key : e.item_keys) {
      Entry entry;
      entry.surface = std::string(surface);
      entry.item_key = std::string(key);
      entry.is_key = true;
      entry.event_ms = e.event_ms;
      entry.expires_at_ms = e.expires_at_ms;
      AppendLocked(user, std::move(entry));
    }
  }
}

bool TraceLog::Lookup(absl::string_view surface, absl::string_view user_id,
                      absl::Span<const uint64_t> item_ids,
                      absl::Span<const absl::string_view> item_keys,
                      int64_t now_ms, TraceLookup* out) const {
  // Index the queried items once, so the scan is O(entries + items).
  absl::flat_hash_map<uint64_t, std::vector<size_t>> id_slots;
  absl::flat_hash_map<absl::string_view, std::vector<size_t>> key_slots;
  for (size_t i = 0; i < item_ids.size(); ++i)
    id_slots[item_ids[i]].push_back(i);
  for (size_t i = 0; i < item_keys.size(); ++i) {
    key_slots[item_keys[i]].push_back(item_ids.size() + i);
  }
  out->exposure_times_ms.assign(item_ids.size() + item_keys.size(), {});
  {
    ReaderLock lock(&mu_);
    auto it = users_.find(user_id);
    if (it == users_.end()) return false;
    const TracedUser& user = it->second;
    out->traced_since_ms = user.traced_since_ms;
    out->entries_dropped = user.entries_dropped;
    for (const Entry& e : user.entries) {
      if (e.surface != surface || e.expires_at_ms <= now_ms) continue;
      const std::vector<size_t>* slots = nullptr;
      if (e.is_key) {
        auto k = key_slots.find(e.item_key);
        if (k != key_slots.end()) slots = &k->second;
      } else {
        auto k = id_slots.find(e.item_id);
        if (k != id_slots.end()) slots = &k->second;
      }
      if (slots == nullptr) continue;
      for (size_t slot : *slots)
        out->exposure_times_ms[slot].push_back(e.event_ms);
    }
  }
  for (std::vector<int64_t>& times : out->exposure_times_ms) {
    std::sort(times.begin(), times.end());
  }
  return true;
}

void TraceLog::DropUserEntries(absl::string_view surface,
                               absl::string_view user_id) {
  if (size() == 0) return;
  WriterLock lock(&mu_);
  auto it = users_.find(user_id);
  if (it == users_.end()) return;
  TracedUser& user = it->second;
  auto end =
      std::remove_if(user.entries.begin(), user.entries.end(),
                     [&](const Entry& e) { return e.surface == surface; });
  for (auto e = end; e != user.entries.end(); ++e) user.bytes -= EntryBytes(*e);
  user.entries.erase(end, user.entries.end());
  if (journal_ != nullptr) journal_->OnTraceDropUser(surface, user_id);
}

uint64_t TraceLog::DropExpired(int64_t now_ms) {
  if (size() == 0) return 0;
  WriterLock lock(&mu_);
  uint64_t dropped = 0;
  for (auto& [id, user] : users_) {
    auto end = std::remove_if(
        user.entries.begin(), user.entries.end(),
        [&](const Entry& e) { return e.expires_at_ms <= now_ms; });
    for (auto e = end; e != user.entries.end(); ++e) {
      user.bytes -= EntryBytes(*e);
      ++dropped;
    }
    user.entries.erase(end, user.entries.end());
  }
  return dropped;
}

std::string TraceLog::Export() const {
  ReaderLock lock(&mu_);
  return ExportLocked();
}

absl::StatusOr<std::string> TraceLog::ExportAtCut(
    absl::FunctionRef<absl::Status()> cut) {
  // Shared is enough: every change (and its journal call) needs it
  // exclusively.
  ReaderLock lock(&mu_);
  if (absl::Status s = cut(); !s.ok()) return s;
  return ExportLocked();
}

void TraceLog::SetJournal(TraceJournal* journal) {
  WriterLock lock(&mu_);
  journal_ = journal;
}

size_t TraceLog::ResetTracedSince(int64_t now_ms) {
  WriterLock lock(&mu_);
  for (auto& [id, user] : users_) {
    user.traced_since_ms = std::max(user.traced_since_ms, now_ms);
  }
  return users_.size();
}

std::string TraceLog::ExportLocked() const {
  std::string out(kMagic, sizeof(kMagic));
  PutU32(&out, kFormatVersion);
  PutU32(&out, static_cast<uint32_t>(users_.size()));
  for (const auto& [id, user] : users_) {
    PutStr(&out, id);
    PutU64(&out, static_cast<uint64_t>(user.traced_since_ms));
    PutU64(&out, user.entries_dropped);
    PutU32(&out, static_cast<uint32_t>(user.entries.size()));
    for (const Entry& e : user.entries) {
      PutStr(&out, e.surface);
      PutU64(&out, static_cast<uint64_t>(e.event_ms));
      PutU64(&out, static_cast<uint64_t>(e.expires_at_ms));
      out.push_back(e.is_key ? 1 : 0);
      if (e.is_key) {
        PutStr(&out, e.item_key);
      } else {
        PutU64(&out, e.item_id);
      }
    }
  }
  return out;
}

absl::StatusOr<TraceImportSummary> TraceLog::Import(absl::string_view bytes,
                                                    int64_t now_ms) {
  auto corrupt = [](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("trace log export: ", what, "; nothing restored"));
  };
  Reader r(bytes);
  absl::string_view magic;
  uint32_t version = 0, user_count = 0;
  if (!r.Bytes(sizeof(kMagic), &magic) ||
      std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("bad magic");
  }
  if (!r.U32(&version) || version != kFormatVersion) {
    return corrupt(absl::StrCat("unsupported version ", version));
  }
  if (!r.U32(&user_count)) return corrupt("truncated header");
  // Parse everything before touching the live state.
  absl::flat_hash_map<std::string, TracedUser> users;
  TraceImportSummary summary;
  for (uint32_t u = 0; u < user_count; ++u) {
    std::string id;
    TracedUser user;
    uint64_t dropped = 0;
    uint32_t entry_count = 0;
    if (!r.Str(&id) || !r.I64(&user.traced_since_ms) || !r.U64(&dropped) ||
        !r.U32(&entry_count)) {
      return corrupt(absl::StrCat("truncated user ", u));
    }
    user.entries_dropped = dropped;
    for (uint32_t i = 0; i < entry_count; ++i) {
      Entry e;
      uint8_t is_key = 0;
      if (!r.Str(&e.surface) || !r.I64(&e.event_ms) ||
          !r.I64(&e.expires_at_ms) || !r.U8(&is_key) || is_key > 1 ||
          !(is_key ? r.Str(&e.item_key) : r.U64(&e.item_id))) {
        return corrupt(absl::StrCat("bad entry ", i, " of user ", u));
      }
      e.is_key = is_key == 1;
      if (e.expires_at_ms <= now_ms) {
        ++summary.entries_dropped;
        continue;
      }
      user.entries.push_back(std::move(e));
    }
    if (users.contains(id)) return corrupt(absl::StrCat("duplicate user ", u));
    users.emplace(std::move(id), std::move(user));
  }
  if (!r.done()) return corrupt("trailing bytes");

  // Sorted, so which users a smaller --trace_max_users keeps is predictable.
  std::vector<std::string> ids;
  ids.reserve(users.size());
  for (const auto& [id, parsed] : users) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  WriterLock lock(&mu_);
  users_.clear();
  for (const std::string& id : ids) {
    TracedUser& parsed = users[id];
    if (users_.size() >= limits_.max_users) {
      ++summary.users_skipped;
      continue;
    }
    TracedUser& user = users_[id];
    user.traced_since_ms = parsed.traced_since_ms;
    user.entries_dropped = parsed.entries_dropped;
    const uint64_t before = user.entries_dropped;
    for (Entry& e : parsed.entries) AppendLocked(user, std::move(e));
    summary.entries_dropped += user.entries_dropped - before;
    summary.entries += user.entries.size();
    ++summary.users;
  }
  count_.store(users_.size(), std::memory_order_release);
  return summary;
}

}  // namespace exposure_filter
