/* Bounded pre-scan of protobuf bytes before protobuf-c unpacks them.
 *
 * protobuf_c_message_unpack recurses once per nested message, so a small
 * file of If/Loop bodies nested thousands deep (or TypeProto sequences of
 * sequences) overflows the C stack.  onnx_wire_check_nesting walks the wire
 * format iteratively, guided by the generated descriptors, and refuses such
 * input with a clear error before unpack is called.
 */
#ifndef HETC_ONNX_WIRE_SCAN_H
#define HETC_ONNX_WIRE_SCAN_H

#include "ir.h"

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* Deepest chain of GraphProto inside GraphProto (subgraph attributes of
 * If/Loop/Scan nodes) accepted; real exports nest a handful deep. */
#define ONNX_WIRE_MAX_SUBGRAPH_DEPTH 64
/* Deepest chain of nested messages of any kind (each subgraph level costs
 * three: GraphProto > NodeProto > AttributeProto).  Bounds protobuf-c's
 * recursion to a few hundred frames, well inside an 8 MiB stack even under
 * ASan. */
#define ONNX_WIRE_MAX_MESSAGE_DEPTH 256

/* 0 if buf (len bytes, a `desc` message) nests within both limits; -1 with
 * err naming `file`, the depth and the limit otherwise.  Bytes that are not
 * well-formed protobuf are left for protobuf-c to reject (returns 0 there):
 * the scan only decides the depth. */
int onnx_wire_check_nesting(const void *buf, size_t len, const ProtobufCMessageDescriptor *desc,
                            const char *file, IrError *err);

#endif
