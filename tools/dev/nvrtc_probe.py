#!/usr/bin/env python3
"""ptxas's resources for emitted kernel sources, compiled by NVRTC against a templates folder.

The library embeds templates/ at build time, so `flexjit compile --resources` reports the
templates of the last build. This compiles the sources `flexjit emit` prints against any copy
of the templates, with the options the runtime gives NVRTC (runtime/jit/nvrtc_compiler.cpp), so a
template change can be weighed for spills and serialized wgmma without a rebuild:

  build/bin/flexjit emit dsl/lib/standard.mask --mask document --head-dim 256 --arch sm_90a >d.cu
  tools/dev/nvrtc_probe.py --arch sm_90a d.cu                      # the tree's templates
  tools/dev/nvrtc_probe.py --templates /tmp/t/templates --arch sm_90a d.cu
  tools/dev/nvrtc_probe.py --arch sm_90a --option=-DFJ_WGMMA_PRODUCER_KV_RANGE=1 d.cu  # a fallback
  tools/dev/nvrtc_probe.py --arch sm_80 --option=--ptxas-options=--register-usage-level=0 m.cu

nvcc's -Xptxas -v is no substitute: its PTX differs from NVRTC's, and so do the spills (a
generated mask's sm_80 kernel: 0 bytes under nvcc, 12 under NVRTC). Prints one line per source;
exits 1 when a compile fails.
"""
import argparse
import ctypes
import ctypes.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_nvrtc():
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidates = [os.path.join(cuda_home, "lib64", "libnvrtc.so")]
    found = ctypes.util.find_library("nvrtc")
    if found:
        candidates.append(found)
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    sys.exit("nvrtc_probe: libnvrtc not found (set CUDA_HOME)")


def compile_source(nvrtc, source, headers, arch, options):
    """NVRTC's log for `source` with `headers` ({name: text}); (ok, log)."""
    program = ctypes.c_void_p()
    names = list(headers)
    count = len(names)
    texts = (ctypes.c_char_p * count)(*[headers[n].encode() for n in names])
    header_names = (ctypes.c_char_p * count)(*[n.encode() for n in names])
    status = nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"kernel.cu", count,
                                      texts, header_names)
    if status != 0:
        return False, f"nvrtcCreateProgram failed ({status})"
    all_options = [f"--gpu-architecture={arch}", "-std=c++17", "--ptxas-options=-v"] + options
    option_array = (ctypes.c_char_p * len(all_options))(*[o.encode() for o in all_options])
    status = nvrtc.nvrtcCompileProgram(program, len(all_options), option_array)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return status == 0, log.value.decode(errors="replace")


def summary(log):
    """registers, spills, stack and serialized wgmma, as the runtime's parse_ptxas_resources."""
    def number(pattern):
        match = re.search(r"(\d+) " + pattern, log)
        return int(match.group(1)) if match else 0
    serialized = "wgmma.mma_async instructions are serialized" in log
    return (f"{number('registers')} registers, spills {number('bytes spill stores')} / "
            f"{number('bytes spill loads')} bytes, stack {number('bytes stack frame')}"
            + (", wgmma serialized" if serialized else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sources", nargs="+", help="kernel sources from `flexjit emit`")
    parser.add_argument("--templates", default=os.path.join(ROOT, "templates"),
                        help="the templates folder (default: the tree's)")
    parser.add_argument("--arch", default="sm_90a", help="NVRTC architecture (default sm_90a)")
    parser.add_argument("--option", action="append", default=[],
                        help="an NVRTC option more (repeatable; --option=VALUE), e.g. a "
                             "fallback build's")
    args = parser.parse_args()
    headers = {name: open(os.path.join(args.templates, name)).read()
               for name in sorted(os.listdir(args.templates)) if name.endswith((".cuh", ".h"))}
    nvrtc = load_nvrtc()
    failed = False
    for path in args.sources:
        ok, log = compile_source(nvrtc, open(path).read(), headers, args.arch, args.option)
        if ok:
            print(f"{path}: {summary(log)}")
        else:
            failed = True
            print(f"{path}: NVRTC failed\n{log}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
