// Certificates for the server tests, made at test time with Debian's
// openssl (as the e2e tests make theirs): self-signed EC P-256 key pairs in
// a temporary directory that lives as long as the test process.
#ifndef EXPOSURE_FILTER_TESTS_SERVER_TEST_CERTIFICATES_H_
#define EXPOSURE_FILTER_TESTS_SERVER_TEST_CERTIFICATES_H_

#include <string>

#include "absl/status/statusor.h"

namespace exposure_filter {

// The directory: made on first use, removed when the process exits (not
// per suite: --gtest_repeat runs a suite again on the same files). An error
// if it cannot be made.
absl::StatusOr<std::string> TestCertificateDir();

// Writes <dir>/<name>.pem and <dir>/<name>.key: a certificate for
// `subject` ("/CN=a") valid for 2 days, with the extension `extension` if
// not empty, in openssl -addext syntax ("subjectAltName=DNS:a.example", or
// raw DER: "2.5.29.17=DER:3005..."). Returns the certificate's PEM, or an
// error naming the failed command. Values must not contain a single quote.
absl::StatusOr<std::string> MakeSelfSignedCertificate(
    const std::string& name, const std::string& subject,
    const std::string& extension = "");

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_TESTS_SERVER_TEST_CERTIFICATES_H_
