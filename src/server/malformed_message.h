// DescribeMalformedMessage: what is wrong with bytes that protobuf refused to
// parse as a given message type, as "field path: problem", so a client told
// INVALID_ARGUMENT learns which field to fix ("exposures[2].item_keys[0]:
// invalid UTF-8 in a string field"). Protobuf's parser only answers
// true/false; this walks the wire format against the descriptor and reports
// the first defect it finds: a truncated or malformed field, an invalid wire
// type or tag, a packed field of the wrong length, invalid UTF-8 in a proto3
// string (the usual one: a C++ or Go client may put any bytes in a string).
//
// Only for the error path (request_parser.h): it walks the whole message
// again, which a valid request must never pay for.
#ifndef EXPOSURE_FILTER_SRC_SERVER_MALFORMED_MESSAGE_H_
#define EXPOSURE_FILTER_SRC_SERVER_MALFORMED_MESSAGE_H_

#include <google/protobuf/descriptor.h>

#include <string>

#include "absl/strings/string_view.h"

namespace exposure_filter {

// The first defect of `wire` as a serialized `type`, or "" if the walk finds
// none (protobuf may still reject it, e.g. nesting deeper than its limit).
std::string DescribeMalformedMessage(absl::string_view wire,
                                     const google::protobuf::Descriptor& type);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_MALFORMED_MESSAGE_H_
