// ParseRequest / SerializeResponse: the protobuf side of the raw-bytes RPC
// edge (exposure_filter_service.h). gRPC's generated callback handlers parse
// the request themselves and, when that fails, answer UNIMPLEMENTED with an
// empty message (gRPC 1.51 drops the parse status), so a client sending a
// non-UTF-8 string is told the method does not exist. The service receives
// the bytes instead and parses them here: the same zero-copy parse over the
// received slices that gRPC does (grpc::ProtoBufferReader), into the same
// messages (pooled arenas for the hot RPCs), and on failure INVALID_ARGUMENT
// naming the request type and the defect (malformed_message.h):
//   "exposure.v1.FilterRecalledRequest: not a valid protobuf message:
//    candidate_keys[0]: invalid UTF-8 in a string field (...)"
// The fuzzers (fuzz/rpc_fuzz_fixture.h) feed their bytes through this too.
#ifndef EXPOSURE_FILTER_SRC_SERVER_REQUEST_PARSER_H_
#define EXPOSURE_FILTER_SRC_SERVER_REQUEST_PARSER_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"

namespace exposure_filter {

// Parses `wire` into `request` (cleared first) and releases `wire`'s slices,
// as gRPC's own deserializer does. On failure, INVALID_ARGUMENT whose
// message starts with the request's full type name.
absl::Status ParseRequest(grpc::ByteBuffer* wire,
                          google::protobuf::Message* request);

// Serializes `response` into `wire` (gRPC's own serializer: one slice sized
// from the message, no intermediate copy).
absl::Status SerializeResponse(const google::protobuf::Message& response,
                               grpc::ByteBuffer* wire);

}  // namespace exposure_filter

#endif  // EXPOSURE_FILTER_SRC_SERVER_REQUEST_PARSER_H_
