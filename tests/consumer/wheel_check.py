"""Run from an environment the wheel was installed into (tests/consumer/wheel_check.sh), outside
the source tree: the package finds its own library, reads its standard masks, and a CPU-backend
varlen call (arch "cpu", host memory, no torch) matches a float64 attention computed here.
Prints PASS or FAIL lines; exits non-zero on failure."""

import ctypes
import importlib.metadata
import math
import pathlib
import random
import struct
import sys

import flexjit
from flexjit import _capi

HEADS, KV_HEADS, HEAD_DIM, SEQ_LENS = 4, 2, 64, (5, 11)


def check(ok, what):
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
    if not ok:
        sys.exit(1)


def to_bf16(value):
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def from_bf16(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


package = pathlib.Path(flexjit.__file__).resolve().parent
library = pathlib.Path(flexjit.library_path()).resolve()
check(library == package / "lib" / "libflexjit_runtime.so",
      f"the package loads its own library ({library})")
version = flexjit.runtime_version()
runtime = f"{version // 10000}.{version // 100 % 100}.{version % 100}"
installed = importlib.metadata.version("flexjit")
check(runtime == installed, f"the library's version {runtime} is the wheel's ({installed})")

ctx = flexjit.Context()
masks = package / "masks" / "standard.mask"
standard = ctx.program_from_file(masks)
ctx.kernel(standard, "gemma2_local", head_dim=128, dtype="bf16", page_size=16, arch="cpu")
check(True, f"compiled gemma2_local of {masks} for the CPU backend")

# A mask without runtime parameters, so that the call below needs no parameter slots.
prog = ctx.program("mask causal = q >= kv\n", name="wheel_check.mask")
kernel = ctx.kernel(prog, "causal", head_dim=HEAD_DIM, dtype="bf16", page_size=0, arch="cpu")

rng = random.Random(7)
cu = [0]
for n in SEQ_LENS:
    cu.append(cu[-1] + n)
tokens = cu[-1]


def buffer(count, values=True):
    data = (ctypes.c_uint16 * count)()
    if values:
        for i in range(count):
            data[i] = to_bf16(rng.uniform(-1.0, 1.0))
    return data


q = buffer(tokens * HEADS * HEAD_DIM)
k = buffer(tokens * KV_HEADS * HEAD_DIM)
v = buffer(tokens * KV_HEADS * HEAD_DIM)
out = buffer(tokens * HEADS * HEAD_DIM, values=False)
cu_seqlens = (ctypes.c_int32 * len(cu))(*cu)
addr = ctypes.addressof
args = _capi.VarlenAttentionArgs(
    struct_size=ctypes.sizeof(_capi.VarlenAttentionArgs), q=addr(q), k=addr(k), v=addr(v),
    out=addr(out), cu_seqlens=addr(cu_seqlens), num_tokens=tokens, num_seqs=len(SEQ_LENS),
    num_heads=HEADS, num_kv_heads=KV_HEADS, max_seq_len=max(SEQ_LENS),
    q_stride_token=HEADS * HEAD_DIM, q_stride_head=HEAD_DIM,
    k_stride_token=KV_HEADS * HEAD_DIM, k_stride_head=HEAD_DIM,
    v_stride_token=KV_HEADS * HEAD_DIM, v_stride_head=HEAD_DIM,
    out_stride_token=HEADS * HEAD_DIM, out_stride_head=HEAD_DIM)
status = _capi.library().fj_varlen_attention(kernel.handle, ctypes.byref(args), None)
check(status == 0, f"fj_varlen_attention on the CPU backend: {flexjit.Status(status).name} "
                   f"{ctx.last_error() if status else ''}")

worst = 0.0
for s, n in enumerate(SEQ_LENS):
    for qi in range(n):
        row = cu[s] + qi
        for h in range(HEADS):
            kvh = h // (HEADS // KV_HEADS)
            qv = [from_bf16(q[(row * HEADS + h) * HEAD_DIM + d]) for d in range(HEAD_DIM)]
            scores = []
            for ki in range(qi + 1):
                base = ((cu[s] + ki) * KV_HEADS + kvh) * HEAD_DIM
                scores.append(sum(qv[d] * from_bf16(k[base + d]) for d in range(HEAD_DIM)) /
                              math.sqrt(HEAD_DIM))
            top = max(scores)
            weights = [math.exp(x - top) for x in scores]
            total = sum(weights)
            for d in range(HEAD_DIM):
                want = sum(w / total * from_bf16(v[((cu[s] + ki) * KV_HEADS + kvh) * HEAD_DIM + d])
                           for ki, w in enumerate(weights))
                got = from_bf16(out[(row * HEADS + h) * HEAD_DIM + d])
                error = abs(got - want)
                worst = error if not error <= worst else worst
check(worst <= 1e-2, f"CPU causal attention, {tokens} tokens: max |out - float64| = {worst:.2e}")
