#include "src/server/request_parser.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/server/malformed_message.h"

namespace exposure_filter {
namespace {

// The received bytes in one piece, for the error path only.
std::string Flatten(const grpc::ByteBuffer& wire) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  if (!wire.Dump(&slices).ok()) return flat;
  flat.reserve(wire.Length());
  for (const grpc::Slice& s : slices) {
    flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return flat;
}

}  // namespace

absl::Status ParseRequest(grpc::ByteBuffer* wire,
                          google::protobuf::Message* request) {
  if (!wire->Valid()) {
    // A unary call half-closed without sending its one message.
    return absl::InvalidArgumentError(absl::StrCat(
        request->GetDescriptor()->full_name(), ": no request message"));
  }
  bool parsed = false;
  {
    grpc::ProtoBufferReader reader(wire);
    parsed = reader.status().ok() && request->ParseFromZeroCopyStream(&reader);
  }
  if (parsed) {
    wire->Clear();  // the handler works on the message, not the bytes
    return absl::OkStatus();
  }
  const std::string defect =
      DescribeMalformedMessage(Flatten(*wire), *request->GetDescriptor());
  wire->Clear();
  return absl::InvalidArgumentError(absl::StrCat(
      request->GetDescriptor()->full_name(), ": not a valid protobuf message",
      defect.empty() ? "" : ": ", defect));
}

absl::Status SerializeResponse(const google::protobuf::Message& response,
                               grpc::ByteBuffer* wire) {
  bool own_buffer = false;
  const grpc::Status s =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(
          response, wire, &own_buffer);
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cannot serialize ",
                                          response.GetDescriptor()->full_name(),
                                          ": ", s.error_message()));
}

}  // namespace exposure_filter
