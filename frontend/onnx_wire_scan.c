/* Iterative depth check of protobuf wire bytes; see onnx_wire_scan.h.
 *
 * The walk keeps an explicit stack of (end offset, descriptor) frames, one
 * per open message, so its own stack use is constant.  Each byte is visited
 * once.  A length-delimited field descends only when the descriptor says the
 * field is a message; strings, bytes and packed scalars are skipped whole.
 *
 * Malformed framing stops the walk with success: protobuf-c scans every
 * field header of a message before it recurses into any child, and unpacks
 * children in wire order, so it fails at that same point without recursing
 * into anything the walk has not already bounded.
 */
#include "onnx_wire_scan.h"

#include "onnx.pb-c.h"

#include <stdint.h>

typedef struct WireFrame {
    size_t end; /* offset one past this message's bytes */
    const ProtobufCMessageDescriptor *desc;
} WireFrame;

/* Base-128 varint at *pos (below end); 0 on success. */
static int read_varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && *pos < end; shift += 7) {
        uint8_t b = p[(*pos)++];
        if (shift < 64) x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static const char *short_name(const ProtobufCMessageDescriptor *d) {
    return d && d->short_name ? d->short_name : "?";
}

int onnx_wire_check_nesting(const void *buf, size_t len, const ProtobufCMessageDescriptor *desc,
                            const char *file, IrError *err) {
    const uint8_t *p = buf;
    const ProtobufCMessageDescriptor *graph = &onnx__graph_proto__descriptor;
    WireFrame st[ONNX_WIRE_MAX_MESSAGE_DEPTH];
    int top = 0, graphs = desc == graph;
    st[0] = (WireFrame){len, desc};
    size_t pos = 0;
    while (top >= 0) {
        WireFrame *f = &st[top];
        if (pos >= f->end) {
            graphs -= f->desc == graph;
            top--;
            continue;
        }
        uint64_t tag, n;
        if (read_varint(p, f->end, &pos, &tag)) return 0;
        switch (tag & 7) {
        case 0: /* varint */
            if (read_varint(p, f->end, &pos, &n)) return 0;
            break;
        case 1: /* fixed64 */
            if (f->end - pos < 8) return 0;
            pos += 8;
            break;
        case 5: /* fixed32 */
            if (f->end - pos < 4) return 0;
            pos += 4;
            break;
        case 2: { /* length-delimited */
            if (read_varint(p, f->end, &pos, &n) || n > f->end - pos) return 0;
            uint64_t num = tag >> 3;
            const ProtobufCFieldDescriptor *fd =
                num <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(f->desc, (unsigned)num)
                                  : NULL;
            if (!fd || fd->type != PROTOBUF_C_TYPE_MESSAGE) {
                pos += (size_t)n;
                break;
            }
            const ProtobufCMessageDescriptor *sub = fd->descriptor;
            if (sub == graph && graphs + 1 > ONNX_WIRE_MAX_SUBGRAPH_DEPTH)
                return ir_errorf(err,
                                 "%s: subgraphs nested more than %d deep (If/Loop/Scan bodies "
                                 "inside bodies; '%s.%s' at byte %zu); hetc accepts at most %d",
                                 file, ONNX_WIRE_MAX_SUBGRAPH_DEPTH, short_name(f->desc),
                                 fd->name, pos, ONNX_WIRE_MAX_SUBGRAPH_DEPTH);
            if (top + 1 >= ONNX_WIRE_MAX_MESSAGE_DEPTH)
                return ir_errorf(err,
                                 "%s: protobuf messages nested more than %d deep ('%s.%s' at "
                                 "byte %zu); hetc accepts at most %d",
                                 file, ONNX_WIRE_MAX_MESSAGE_DEPTH, short_name(f->desc), fd->name,
                                 pos, ONNX_WIRE_MAX_MESSAGE_DEPTH);
            graphs += sub == graph;
            st[++top] = (WireFrame){pos + (size_t)n, sub};
            break;
        }
        default: /* groups (3, 4) and 6, 7: protobuf-c rejects them */
            return 0;
        }
    }
    return 0;
}
