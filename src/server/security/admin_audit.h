// AdminAudit: one structured log line per admin RPC (the ones
// rpc_roles.h gives role admin: DeleteUser, Add/Remove/ListTracedUsers,
// GetServerStats), allowed or denied, whether or not authorization is on:
//
//   event=audit rpc=DeleteUser identity="uri:spiffe://example.org/ops"
//     peer="ipv4:10.0.0.7:51234" surface="homefeed" users="u42" outcome=OK
//
// Fields, always in this order: rpc; identity (the certificate identity
// that granted the call, else the caller's first, else -); peer (the
// address, - when the call was refused before it was read); surface (-
// when the RPC has none or was refused unread); users (the request's user
// ids comma-separated, - when none); outcome (the gRPC status code name);
// detail (the status message, only when outcome is not OK). Strings are
// double-quoted with '"', '\\', ',' (in users) and non-printable bytes as
// \xHH. With hash_user_ids, each user id is written as sha256:<first 16 hex
// digits of SHA-256(id)>: stable pseudonyms that keep ids out of log
// storage (anyone holding a candidate id can still check it), in the users
// field and wherever the detail names one of them.
//
// Written through a logger of its own at info, whatever --log_level says:
// admin calls are rare, and an audit that a log level can silence is not
// one.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_ADMIN_AUDIT_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_ADMIN_AUDIT_H_

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace exposure_filter {

struct AdminAuditRecord {
  absl::string_view rpc;
  std::string identity = "-";
  std::string peer;  // "" = unknown
  bool has_surface = false;
  std::string surface;
  std::vector<std::string> users;
  int code = 0;  // gRPC status code
  std::string detail;
};

class AdminAudit {
 public:
  explicit AdminAudit(bool hash_user_ids);

  // Writes the record's line.
  void Record(const AdminAuditRecord& record) const;
  // The line Record writes, without the timestamp and level.
  std::string Format(const AdminAuditRecord& record) const;

 private:
  std::string UserField(absl::string_view user_id) const;
  // The status message, with the request's user ids as pseudonyms when
  // hashing is on.
  std::string Detail(const AdminAuditRecord& record) const;

  const bool hash_user_ids_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_ADMIN_AUDIT_H_
