#include "src/server/security/admin_audit.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "src/server/security/caller_identity.h"

namespace exposure_filter {
namespace {

// 16 hex digits = 64 bits: no collisions in practice among the users one
// service holds (birthday bound ~4e9 ids), short enough to read.
constexpr int kHashHexDigits = 16;

std::string Sha256Prefix(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(),
                 nullptr) != 1) {
    return "sha256:error";
  }
  std::string hex = "sha256:";
  for (int i = 0; i < kHashHexDigits / 2; ++i) {
    absl::StrAppendFormat(&hex, "%02x", digest[i]);
  }
  return hex;
}

}  // namespace

AdminAudit::AdminAudit(bool hash_user_ids)
    : hash_user_ids_(hash_user_ids),
      // Same sinks and line format as the server's log (main.cc), own level.
      logger_(spdlog::default_logger()->clone("audit")) {
  logger_->set_level(spdlog::level::info);
}

std::string AdminAudit::UserField(absl::string_view user_id) const {
  return hash_user_ids_ ? Sha256Prefix(user_id) : LogEscaped(user_id, ",");
}

std::string AdminAudit::Detail(const AdminAuditRecord& r) const {
  if (!hash_user_ids_) return r.detail;
  // A status message can name a user ("user_id: user \"alice\" is in
  // partition 7 ..."): with hashing on, every id of the request is written
  // as its pseudonym there too, or the detail would put back into log
  // storage what the users field keeps out. One pass, longest id first, so
  // an id inside another id or inside a pseudonym is never replaced twice.
  std::vector<std::pair<absl::string_view, std::string>> pseudonyms;
  for (const std::string& user : r.users) {
    if (!user.empty()) pseudonyms.emplace_back(user, Sha256Prefix(user));
  }
  std::sort(pseudonyms.begin(), pseudonyms.end(),
            [](const auto& a, const auto& b) {
              return a.first.size() > b.first.size();
            });
  return absl::StrReplaceAll(r.detail, pseudonyms);
}

std::string AdminAudit::Format(const AdminAuditRecord& r) const {
  std::string users;
  for (const std::string& user : r.users) {
    if (!users.empty()) users.push_back(',');
    users += UserField(user);
  }
  std::string line = absl::StrCat(
      "event=audit rpc=", r.rpc, " identity=", LogQuoted(r.identity),
      " peer=", r.peer.empty() ? "-" : LogQuoted(r.peer),
      " surface=", r.has_surface ? LogQuoted(r.surface) : "-",
      " users=", r.users.empty() ? "-" : absl::StrCat("\"", users, "\""),
      " outcome=",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(r.code)));
  if (r.code != 0) absl::StrAppend(&line, " detail=", LogQuoted(Detail(r)));
  return line;
}

void AdminAudit::Record(const AdminAuditRecord& record) const {
  logger_->info("{}", Format(record));
}

}  // namespace exposure_filter
