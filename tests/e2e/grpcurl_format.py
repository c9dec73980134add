"""What grpcurl prints for a response or an error status, reproduced in
Python so the outputs shown in README.md and docs/ can be checked against a
real server without grpcurl (not packaged for Debian 12).

grpcurl (1.8.x) formats a response with jhump/protoreflect's dynamic message
JSON writer (dynamic/json.go) through golang/protobuf's jsonpb.Marshaler,
indented by two spaces:
  - field names: the descriptor's json_name if the descriptor carries one,
    else the proto field name. Descriptors from a C++ server's reflection
    carry none (FileDescriptor::CopyTo leaves json_name out), so grpcurl
    prints "items_recorded", not "itemsRecorded" (fullstorydev/grpcurl#132);
    the test checks that the reflected descriptors indeed carry none;
  - fields in field-number order, only those present (proto3 defaults are
    omitted; a set oneof member is printed even if zero);
  - int64/uint64/sint64/fixed64/sfixed64 as JSON strings, 32-bit integers as
    numbers, enums by value name, bytes as standard base64;
  - double/float with Go's strconv.FormatFloat(f, 'g', -1, bits): shortest
    round-trip digits, exponent form when the exponent is < -4 or >= 6
    ("1.67e-10", "0.0481", "1e+06"), NaN/Infinity as strings;
  - strings as Go's encoding/json writes them (UTF-8 kept, <, >, & escaped);
  - an empty message as "{}".
Errors go to stderr as "ERROR:\\n  Code: <Go code name>\\n  Message: <msg>".
"""

import base64
import decimal
import json
import math

from google.protobuf import descriptor as _d

_INT64 = {_d.FieldDescriptor.TYPE_INT64, _d.FieldDescriptor.TYPE_UINT64,
          _d.FieldDescriptor.TYPE_SINT64, _d.FieldDescriptor.TYPE_FIXED64,
          _d.FieldDescriptor.TYPE_SFIXED64}
_INT32 = {_d.FieldDescriptor.TYPE_INT32, _d.FieldDescriptor.TYPE_UINT32,
          _d.FieldDescriptor.TYPE_SINT32, _d.FieldDescriptor.TYPE_FIXED32,
          _d.FieldDescriptor.TYPE_SFIXED32}
_FLOATS = {_d.FieldDescriptor.TYPE_DOUBLE, _d.FieldDescriptor.TYPE_FLOAT}
_INDENT = "  "


def go_string(s):
    """encoding/json's string: HTML-safe escapes, UTF-8 kept."""
    out = json.dumps(s, ensure_ascii=False)
    return (out.replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026").replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029"))


def go_float(x):
    """strconv.FormatFloat(x, 'g', -1, 64); NaN/Infinity as jsonpb quotes."""
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    sign, digits, exp = decimal.Decimal(repr(x)).as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exp += 1
    ds = "".join(map(str, digits))
    nd = len(ds)
    dp = nd + exp  # digits before the decimal point
    e10 = dp - 1
    neg = "-" if sign else ""
    if e10 < -4 or e10 >= 6:  # Go: "shortest" decides with precision 6
        mant = ds[0] + ("." + ds[1:] if nd > 1 else "")
        return "%s%se%s%02d" % (neg, mant, "-" if e10 < 0 else "+", abs(e10))
    if dp <= 0:
        return neg + "0." + "0" * (-dp) + ds
    if dp >= nd:
        return neg + ds + "0" * (dp - nd)
    return neg + ds[:dp] + "." + ds[dp:]


def _value(field, v, depth):
    t = field.type
    if t in _INT64:
        return '"%d"' % v
    if t in _INT32:
        return "%d" % v
    if t == _d.FieldDescriptor.TYPE_BOOL:
        return "true" if v else "false"
    if t == _d.FieldDescriptor.TYPE_ENUM:
        value = field.enum_type.values_by_number.get(v)
        return go_string(value.name) if value is not None else "%d" % v
    if t in _FLOATS:
        return go_float(v)
    if t == _d.FieldDescriptor.TYPE_STRING:
        return go_string(v)
    if t == _d.FieldDescriptor.TYPE_BYTES:
        return go_string(base64.b64encode(v).decode("ascii"))
    return message_json(v, depth)


def message_json(msg, depth=0):
    """The response as grpcurl prints it (see the module comment)."""
    fields = sorted(msg.ListFields(), key=lambda fv: fv[0].number)
    if not fields:
        return "{}"
    inner = _INDENT * (depth + 1)
    lines = []
    for field, v in fields:
        if field.label == _d.FieldDescriptor.LABEL_REPEATED:
            items = [inner + _INDENT + _value(field, x, depth + 2) for x in v]
            text = "[\n" + ",\n".join(items) + "\n" + inner + "]"
        else:
            text = _value(field, v, depth + 1)
        lines.append(inner + go_string(field.name) + ": " + text)
    return "{\n" + ",\n".join(lines) + "\n" + _INDENT * depth + "}"


# grpc-go's codes.Code.String() where it differs from the CamelCase of
# grpcio's StatusCode name.
_GO_CODE_NAMES = {"CANCELLED": "Canceled", "OK": "OK"}


def go_code_name(status_code):
    name = status_code.name
    return _GO_CODE_NAMES.get(
        name, "".join(w.capitalize() for w in name.split("_")))


def error_text(status_code, message):
    return "ERROR:\n  Code: %s\n  Message: %s" % (go_code_name(status_code),
                                                  message)
