// AuthorizationOptions: who may call which RPC, and how admin
// calls are audited. Flags --authz_policy and --audit_hash_user_ids
// (server_flags.cc); docs/operations.md "Authorization".
#ifndef EXPOSURE_FILTER_SRC_SERVER_CONFIG_AUTHORIZATION_OPTIONS_H_
#define EXPOSURE_FILTER_SRC_SERVER_CONFIG_AUTHORIZATION_OPTIONS_H_

#include <string>

namespace exposure_filter {

struct AuthorizationOptions {
  // Path of the policy file ("<roles> <identity>" lines,
  // authorization_policy.h). Empty: authorization off, every client that
  // can connect may call every RPC (the quick start). Non-empty needs
  // mutual TLS: the server refuses to start without client certificates,
  // because a policy nobody can be checked against would only look safe.
  std::string policy_file;
  // Audit lines of admin RPCs carry sha256 pseudonyms instead of user ids.
  bool audit_hash_user_ids = false;

  bool enabled() const { return !policy_file.empty(); }
};

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_CONFIG_AUTHORIZATION_OPTIONS_H_
