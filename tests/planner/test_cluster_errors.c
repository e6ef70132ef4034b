/* cluster.yaml error messages: every broken snippet must fail (never crash)
 * with a message naming the file, the line of the offending node and the key,
 * and saying what was expected.  The expected line is where the snippet puts
 * the mistake; substrings are checked, not whole messages. */
#include <stdio.h>
#include <string.h>

#include "planner.h"

/* A valid two-mesh base the cases below break one line at a time. */
#define MESH_A "  - name: a\n    device: A100-40GB\n    nodes: 2\n    devices_per_node: 2\n" \
               "    intra_node: {bandwidth_gbps: 2400, latency_us: 5}\n" \
               "    inter_node: {bandwidth_gbps: 200, latency_us: 10}\n"
#define MESH_B "  - name: b\n    device: A10\n    nodes: 1\n    devices_per_node: 1\n"
#define LINK "links:\n  - {between: [a, b], bandwidth_gbps: 5, latency_us: 50}\n"

typedef struct Case {
    const char *what;
    const char *yaml;
    const char *want[6];   /* substrings the message must contain */
} Case;

static const Case CASES[] = {
    {"empty file", "", {"bad.yaml:1:", "empty file", "meshes"}},
    {"only a comment", "# nothing\n", {"empty file", "meshes"}},
    {"syntax error", "meshes:\n  - name: a\n    device: [A100\n", {"bad.yaml:", "YAML syntax error"}},
    {"tab indentation", "meshes:\n\t- name: a\n", {"bad.yaml:2:", "YAML syntax error"}},
    {"top level is a list", "- a\n- b\n", {"bad.yaml:1:", "expected a mapping"}},
    {"unknown top key", "mesh:\n" MESH_B, {"bad.yaml:1:", "unknown key 'mesh'", "meshes"}},
    {"missing meshes", "name: x\n", {"bad.yaml:1:", "missing required key 'meshes'"}},
    {"meshes not a list", "meshes: 3\n", {"bad.yaml:1:", "meshes", "expected a list"}},
    {"meshes empty", "meshes: []\n", {"bad.yaml:1:", "meshes", "list of 0"}},
    {"bad dtype", "dtype: fp8\nmeshes:\n" MESH_B, {"bad.yaml:1:", "dtype", "bf16, fp16, fp32", "'fp8'"}},
    {"mesh not a mapping", "meshes:\n  - a100\n", {"bad.yaml:2:", "meshes[0]", "expected a mapping"}},
    {"unknown mesh key", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 1\n"
     "    devics: 3\n", {"bad.yaml:6:", "meshes[0]", "unknown key 'devics'", "devices_per_node"}},
    {"missing nodes", "meshes:\n  - name: a\n    device: A10\n    devices_per_node: 1\n",
     {"bad.yaml:2:", "meshes[0]", "missing required key 'nodes'"}},
    {"missing name", "meshes:\n  - device: A10\n    nodes: 1\n    devices_per_node: 1\n",
     {"bad.yaml:2:", "missing required key 'name'"}},
    {"negative nodes", "meshes:\n  - name: a\n    device: A10\n    nodes: -2\n    devices_per_node: 1\n",
     {"bad.yaml:4:", "meshes[0].nodes", "positive integer", "'-2'"}},
    {"zero devices", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 0\n",
     {"bad.yaml:5:", "meshes[0].devices_per_node", "positive integer"}},
    {"fractional nodes", "meshes:\n  - name: a\n    device: A10\n    nodes: 1.5\n    devices_per_node: 1\n",
     {"bad.yaml:4:", "meshes[0].nodes", "positive integer", "'1.5'"}},
    {"nodes is a list", "meshes:\n  - name: a\n    device: A10\n    nodes: [1]\n    devices_per_node: 1\n",
     {"bad.yaml:4:", "meshes[0].nodes", "positive integer", "a list"}},
    {"huge nodes", "meshes:\n  - name: a\n    device: A10\n    nodes: 99999999999999999999\n    devices_per_node: 1\n",
     {"bad.yaml:4:", "meshes[0].nodes", "positive integer"}},
    {"too many devices", "meshes:\n  - name: a\n    device: A10\n    nodes: 100000\n    devices_per_node: 100000\n"
     "    intra_node: {bandwidth_gbps: 1}\n    inter_node: {bandwidth_gbps: 1}\n",
     {"bad.yaml:2:", "meshes[0]", "exceeds"}},
    {"unknown device", "meshes:\n  - name: a\n    device: A200\n    nodes: 1\n    devices_per_node: 1\n",
     {"bad.yaml:3:", "meshes[0].device", "unknown device 'A200'", "A100-40GB", "H100-SXM"}},
    {"unknown base", "meshes:\n  - name: a\n    device: {base: Z9}\n    nodes: 1\n    devices_per_node: 1\n",
     {"bad.yaml:3:", "meshes[0].device.base", "unknown device 'Z9'"}},
    {"bad override", "meshes:\n  - name: a\n    device: {base: A10, memory_gb: -1}\n    nodes: 1\n"
     "    devices_per_node: 1\n", {"bad.yaml:3:", "meshes[0].device.memory_gb", "positive number"}},
    {"unknown override key", "meshes:\n  - name: a\n    device: {base: A10, memory: 3}\n    nodes: 1\n"
     "    devices_per_node: 1\n", {"bad.yaml:3:", "meshes[0].device", "unknown key 'memory'", "memory_gb"}},
    {"custom device incomplete", "meshes:\n  - name: a\n    device: {name: X1, memory_gb: 3}\n    nodes: 1\n"
     "    devices_per_node: 1\n", {"bad.yaml:3:", "meshes[0].device", "missing required key 'tflops_fp32'"}},
    {"no bf16 on V100", "dtype: bf16\nmeshes:\n  - name: a\n    device: V100-32GB\n    nodes: 1\n"
     "    devices_per_node: 1\n", {"bad.yaml:4:", "meshes[0].device", "bf16", "dtype: fp16"}},
    {"missing intra_node", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 4\n",
     {"bad.yaml:2:", "meshes[0]", "missing required key 'intra_node'"}},
    {"missing inter_node", "meshes:\n  - name: a\n    device: A10\n    nodes: 2\n    devices_per_node: 1\n",
     {"bad.yaml:2:", "meshes[0]", "missing required key 'inter_node'"}},
    {"bandwidth missing", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 2\n"
     "    intra_node: {latency_us: 3}\n", {"bad.yaml:6:", "meshes[0].intra_node", "missing required key 'bandwidth_gbps'"}},
    {"bandwidth zero", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 2\n"
     "    intra_node:\n      bandwidth_gbps: 0\n", {"bad.yaml:7:", "meshes[0].intra_node.bandwidth_gbps", "positive number", "'0'"}},
    {"bandwidth text", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 2\n"
     "    intra_node: {bandwidth_gbps: fast}\n", {"bad.yaml:6:", "bandwidth_gbps", "positive number", "'fast'"}},
    {"latency negative", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 2\n"
     "    intra_node: {bandwidth_gbps: 1, latency_us: -1}\n", {"bad.yaml:6:", "latency_us", "non-negative"}},
    {"latency nan", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    devices_per_node: 2\n"
     "    intra_node: {bandwidth_gbps: 1, latency_us: .nan}\n", {"bad.yaml:6:", "latency_us", "non-negative"}},
    {"duplicate key", "meshes:\n  - name: a\n    device: A10\n    nodes: 1\n    nodes: 2\n    devices_per_node: 1\n",
     {"bad.yaml:5:", "meshes[0]", "duplicate key 'nodes'", "line 4"}},
    {"duplicate mesh", "meshes:\n" MESH_B "  - name: b\n    device: T4\n    nodes: 1\n    devices_per_node: 1\n"
     "dtype: fp16\n", {"bad.yaml:6:", "meshes[1].name", "duplicate mesh name 'b'"}},
    {"link to unknown mesh", "meshes:\n" MESH_A MESH_B "links:\n  - {between: [a, c], bandwidth_gbps: 5}\n",
     {"bad.yaml:13:", "links[0].between", "unknown mesh 'c'", "meshes: a, b"}},
    {"link with one end", "meshes:\n" MESH_A MESH_B "links:\n  - {between: [a], bandwidth_gbps: 5}\n",
     {"bad.yaml:13:", "links[0].between", "two mesh names", "list of 1"}},
    {"link to itself", "meshes:\n" MESH_A MESH_B "links:\n  - {between: [a, a], bandwidth_gbps: 5}\n",
     {"bad.yaml:13:", "links[0].between", "two different meshes"}},
    {"link without between", "meshes:\n" MESH_A MESH_B "links:\n  - {bandwidth_gbps: 5}\n",
     {"bad.yaml:13:", "links[0]", "missing required key 'between'"}},
    {"link bad transport", "meshes:\n" MESH_A MESH_B "links:\n  - {between: [a, b], bandwidth_gbps: 5, transport: pigeon}\n",
     {"bad.yaml:13:", "links[0].transport", "device-direct", "cpu-mediated", "'pigeon'"}},
    {"link repeated", "meshes:\n" MESH_A MESH_B LINK "  - {between: [b, a], bandwidth_gbps: 1}\n",
     {"bad.yaml:14:", "links[1].between", "already linked"}},
    {"link unknown key", "meshes:\n" MESH_A MESH_B "links:\n  - {between: [a, b], bandwith_gbps: 5}\n",
     {"bad.yaml:13:", "links[0]", "unknown key 'bandwith_gbps'"}},
    {"no link, no default", "meshes:\n" MESH_A MESH_B,
     {"bad.yaml:1:", "links", "'a' and 'b' have no link", "default_link"}},
    {"default_link with between", "meshes:\n" MESH_A MESH_B "default_link: {between: [a, b], bandwidth_gbps: 5}\n",
     {"bad.yaml:12:", "default_link", "between"}},
    {"links not a list", "meshes:\n" MESH_A MESH_B "links: {between: [a, b]}\n",
     {"bad.yaml:12:", "links", "expected a list"}},
    {"two documents", "meshes:\n" MESH_B "---\nmeshes:\n" MESH_B,
     {"bad.yaml:7:", "one YAML document"}},
    {"key is a mapping", "meshes:\n" MESH_B "? {a: 1}\n: 3\n", {"bad.yaml:6:", "scalar keys"}},
};

int main(void)
{
    int failures = 0;
    int n = (int)(sizeof CASES / sizeof CASES[0]);
    for (int t = 0; t < n; t++) {
        const Case *c = &CASES[t];
        ClusterSpec cl;
        IrError err = {{0}};
        int rc = cluster_load_yaml_string(c->yaml, "bad.yaml", &cl, &err);
        if (rc == 0) {
            printf("FAIL [%s]: loaded without error\n", c->what);
            cluster_free(&cl);
            failures++;
            continue;
        }
        if (cl.meshes || cl.links) {
            printf("FAIL [%s]: cluster not freed on error\n", c->what);
            failures++;
        }
        for (int j = 0; j < 6 && c->want[j]; j++)
            if (!strstr(err.msg, c->want[j])) {
                printf("FAIL [%s]: message lacks \"%s\":\n  %s\n", c->what, c->want[j], err.msg);
                failures++;
            }
        printf("ok   [%s] %s\n", c->what, err.msg);
    }
    /* Missing file */
    ClusterSpec cl;
    IrError err = {{0}};
    if (cluster_load_yaml("/nonexistent/cluster.yaml", &cl, &err) == 0 ||
        !strstr(err.msg, "/nonexistent/cluster.yaml") || !strstr(err.msg, "cannot open")) {
        printf("FAIL [missing file]: %s\n", err.msg);
        failures++;
    }
    /* The valid base loads (so the cases above fail for their one mistake). */
    if (cluster_load_yaml_string("meshes:\n" MESH_A MESH_B LINK, "good.yaml", &cl, &err)) {
        printf("FAIL [valid base]: %s\n", err.msg);
        failures++;
    } else {
        cluster_free(&cl);
    }
    /* Without a dtype key the cluster keys the best 16-bit peak every device
     * has: bf16 for A100 + A10, fp16 once a V100 joins (bf16 would refuse it,
     * which the default --precision fp32 never needs), fp32 for a device with
     * an fp32 figure only. */
    static const struct { const char *yaml, *want; } DEF[] = {
        {"meshes:\n" MESH_A MESH_B LINK, "bf16"},
        {"meshes:\n" MESH_B "  - {name: v, device: V100-32GB, nodes: 1, devices_per_node: 1}\n"
         "default_link: {bandwidth_gbps: 10, latency_us: 5}\n", "fp16"},
        {"meshes:\n  - {name: x, device: {name: X1, memory_gb: 8, tflops_fp32: 5, tflops_fp16: 0,"
         " hbm_gbytes_s: 100},"
         " nodes: 1, devices_per_node: 1}\n", "fp32"},
    };
    for (int t = 0; t < 3; t++) {
        if (cluster_load_yaml_string(DEF[t].yaml, "default.yaml", &cl, &err)) {
            printf("FAIL [default dtype %d]: %s\n", t, err.msg);
            failures++;
            continue;
        }
        if (strcmp(cl.dtype, DEF[t].want)) {
            printf("FAIL [default dtype %d]: got %s, expected %s\n", t, cl.dtype, DEF[t].want);
            failures++;
        } else {
            printf("ok   [default dtype %d] %s\n", t, cl.dtype);
        }
        cluster_free(&cl);
    }
    printf("%d cases, %d failures\n", n, failures);
    return failures != 0;
}
