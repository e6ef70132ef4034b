"""DESIGN section 2's layering: runtime/ and kernels/ know nothing of the
compiler.  A stage binary links hetrt and the kernels alone; the node
interpreter (interp/) and the compiler folders may use the runtime, never
the other way round.

    test_layering.py SRC_DIR [LIB ...]

Three checks, each able to fail (a self-test feeds each a planted
violation first):
  1. includes: no file under runtime/ or kernels/ includes a header that
     lives only in a compiler folder (ir/, passes/, codegen/, frontend/,
     interp/, driver/);
  2. CMake: no CMakeLists.txt under runtime/ or kernels/ links a compiler
     library or adds a compiler folder to an include path;
  3. archives (LIB: the built runtime libraries, e.g. libhetrt.a,
     libhetrt_stage.a): none of their undefined symbols is defined by a
     compiler library (the LIBs after `--compiler`: libhetc_ir.a, ...);
     weak references (the interpreter hooks of stage_interp.h) aside.
"""
import os
import re
import subprocess
import sys

COMPILER_DIRS = ["ir", "passes", "codegen", "frontend", "interp", "driver"]
RUNTIME_DIRS = ["runtime", "kernels"]
COMPILER_LIBS = ["hetc_ir", "hetc_hostexec", "hetc_codegen", "hetc_passes", "hetc_frontend",
                 "hetc_planner", "hetrt_interp", "hetrt_interp_cuda", "hetc_cudaexec",
                 "hetc_cudaprof"]
SRC_EXT = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def files_under(src, dirs, pred):
    for d in dirs:
        for root, _, names in os.walk(os.path.join(src, d)):
            for n in names:
                if pred(n):
                    yield os.path.join(root, n)


def header_owners(src):
    """basename -> set of top folders holding a header of that name."""
    own = {}
    for top in os.listdir(src):
        if top in ("build", ".git", "tests", "bench", "fuzz") or top.startswith("build"):
            continue
        for p in files_under(src, [top], lambda n: n.endswith((".h", ".cuh"))):
            own.setdefault(os.path.basename(p), set()).add(top)
    return own


def include_violations(src, texts, own):
    """texts: {path: text} of runtime/kernels files."""
    bad = []
    for path, text in texts.items():
        for inc in INCLUDE_RE.findall(text):
            tops = own.get(os.path.basename(inc), set())
            # a header the runtime side (or common/) has is its own
            if tops and not tops & set(RUNTIME_DIRS + ["common"]) and tops & set(COMPILER_DIRS):
                bad.append("%s includes \"%s\" (from %s/)" % (path, inc, "/, ".join(sorted(tops))))
    return bad


def cmake_violations(texts):
    bad = []
    lib_re = re.compile(r"\b(%s)\b" % "|".join(COMPILER_LIBS))
    dir_re = re.compile(r"\$\{(?:PROJECT|CMAKE)_SOURCE_DIR\}/(%s)\b" % "|".join(COMPILER_DIRS))
    for path, text in texts.items():
        # only the commands that make an edge, comments stripped
        body = re.sub(r"#[^\n]*", "", text)
        for m in re.finditer(r"(target_link_libraries|target_include_directories|"
                             r"include_directories|link_libraries)\s*\(([^)]*)\)", body):
            for hit in lib_re.findall(m.group(2)) + dir_re.findall(m.group(2)):
                bad.append("%s: %s(... %s ...)" % (path, m.group(1), hit))
    return bad


def nm_symbols(lib, defined):
    out = subprocess.run(["nm", "-g", "--defined-only" if defined else "--undefined-only", lib],
                         capture_output=True, text=True, check=True).stdout
    syms = set()
    for line in out.splitlines():
        f = line.split()
        # weak undefined references ('w': the runtime's hooks for the node
        # interpreter, stage_interp.h) make no link edge: they resolve to
        # NULL when the library is absent
        if len(f) >= 2 and not line.endswith(":") and (defined or f[-2] == "U"):
            syms.add(f[-1])
    return syms


def archive_violations(runtime_libs, compiler_libs):
    defined = {}
    for lib in compiler_libs:
        for s in nm_symbols(lib, True):
            defined.setdefault(s, os.path.basename(lib))
    bad = []
    for lib in runtime_libs:
        for s in sorted(nm_symbols(lib, False)):
            if s in defined:
                bad.append("%s needs %s (defined in %s)" % (os.path.basename(lib), s, defined[s]))
    return bad


def main():
    src = os.path.abspath(sys.argv[1])
    args = sys.argv[2:]
    split = args.index("--compiler") if "--compiler" in args else len(args)
    runtime_libs, compiler_libs = args[:split], args[split + 1:]
    own = header_owners(src)
    failures = []

    # self-tests: a planted violation of each kind is found
    if not include_violations(src, {"runtime/x.c": '#include "ir.h"\n'}, own):
        failures.append("self-test: a runtime file including ir.h was not caught")
    if not cmake_violations({"runtime/CMakeLists.txt":
                             "target_link_libraries(hetrt PUBLIC hetc_ir m)\n"}):
        failures.append("self-test: a runtime library linking hetc_ir was not caught")
    if not cmake_violations({"runtime/CMakeLists.txt": "target_include_directories(x PUBLIC "
                             "${PROJECT_SOURCE_DIR}/codegen)\n"}):
        failures.append("self-test: a runtime include path into codegen/ was not caught")

    texts = {os.path.relpath(p, src): open(p, errors="replace").read()
             for p in files_under(src, RUNTIME_DIRS, lambda n: n.endswith(SRC_EXT))}
    nfiles = len(texts)
    failures += include_violations(src, texts, own)
    cm = {os.path.relpath(p, src): open(p).read()
          for p in files_under(src, RUNTIME_DIRS, lambda n: n == "CMakeLists.txt")}
    failures += cmake_violations(cm)
    if runtime_libs:
        # the planted case: the interpreter library does need the IR parser
        interp = [l for l in compiler_libs if os.path.basename(l) == "libhetrt_interp.a"]
        if interp and not archive_violations(interp, [l for l in compiler_libs if l not in interp]):
            failures.append("self-test: libhetrt_interp.a's use of the IR parser was not caught")
        failures += archive_violations(runtime_libs, compiler_libs)
    print("layering: %d runtime/kernels sources, %d CMakeLists, %d runtime archives checked"
          % (nfiles, len(cm), len(runtime_libs)))
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
