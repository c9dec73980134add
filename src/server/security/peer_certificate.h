// The typed identities a client certificate proves, read from the
// certificate itself (the PEM gRPC puts in the AuthContext as
// x509_pem_cert) with OpenSSL, in the form AuthorizationPolicy grants roles
// to:
//   dns:<name>    each DNS subjectAltName, in ASCII lowercase
//   uri:<uri>     each URI subjectAltName
//   email:<addr>  each e-mail (rfc822Name) subjectAltName
//   ip:<addr>     each IP address subjectAltName, as inet_ntop writes it
//   cn:<name>     the subject common name
// subjectAltNames in certificate order, then the common name. gRPC's own
// x509_subject_alternative_name property is not used: it lists every SAN as
// an untyped string, so an e-mail SAN could not be told from a DNS SAN of
// the same spelling.
#ifndef EXPOSURE_FILTER_SRC_SERVER_SECURITY_PEER_CERTIFICATE_H_
#define EXPOSURE_FILTER_SRC_SERVER_SECURITY_PEER_CERTIFICATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace exposure_filter {

// The identities of the first certificate in `pem`. A certificate that does
// not parse, or carries a name that cannot be read as exactly one identity
// (a subjectAltName extension that does not decode or appears twice, a
// name with a control byte or a NUL, an IP address that is neither 4 nor 16
// bytes, more than one common name), is an error: it proves no identity at
// all, so a malformed name can never be read as a granted one. Other
// subjectAltName types (otherName, directoryName, ...) prove nothing and are
// skipped.
absl::StatusOr<std::vector<std::string>> CertificateIdentities(
    absl::string_view pem);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_SECURITY_PEER_CERTIFICATE_H_
