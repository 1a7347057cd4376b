// A variant's element functions (mask and score) and its mask's analyses (tile classes, kv
// ranges) as host code: native code compiled by LLVM (ORC LLJIT, compiler/codegen/llvm/) when
// flexjit is built with LLVM, otherwise the IR evaluator and MaskAnalysis behind the same
// interface. The CPU attention backend and the host tools that
// evaluate masks element by element (brute-force exactness, BlockMask from visible pairs) call
// this instead of evaluate_mask. docs/codegen.md describes what is compiled and how.
//
// Semantics: exactly those of evaluate_mask / evaluate_score (mask.h), which are those of the
// emitted CUDA (templates/fj_ops.cuh): 32-bit wrap-around, floor division and modulo, division
// by zero yields 0, out-of-range array reads yield 0 (and are reported through
// fj::ArrayParam::bad_index when the caller asks), float32 arithmetic never contracted into a
// fused multiply-add, the same library functions for tanh, exp, exp2, log, log2 and sigmoid.
// Results are bit-identical to the evaluator's, a NaN's payload aside.
//
// Builds without LLVM headers: the LLVM implementation lives in compiler/codegen/llvm/. The
// compile definition FLEXJIT_WITH_LLVM (1 or 0, set for every target that links
// flexjit_codegen_llvm) says which implementation make_host_code prefers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "fj_ops.cuh"
#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/result.h"

namespace flexjit {

// A variant's element functions. Immutable once built and safe to call from several threads at
// once (bad_index reports aside: like the evaluator's, they are not atomic on the host).
//
// Row functions evaluate one query row against `n` consecutive keys: element i is the key
// position kv0 + i (wrapping around at INT_MAX like the language's `+`). `params` may be null:
// every scalar then reads 0 and every array read yields 0, as with EvalPoint. n <= 0 does
// nothing. The output must not overlap the parameter block or the arrays it points to.
class HostCode {
 public:
  virtual ~HostCode() = default;

  // out[i] = mask(b, h, q, kv0 + i) as 0 or 1, for i in [0, n).
  virtual void mask_row(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv0,
                        int32_t n, uint8_t* out) const = 0;

  // scores[i] = the score modifier applied to scores[i] at (b, h, q, kv0 + i), for i in [0, n);
  // leaves the scores as they are when the variant has no score.
  virtual void score_row(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv0,
                         int32_t n, float* scores) const = 0;

  // The mask at one point (mask_row of one key).
  bool mask(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv) const;

  // The score modifier at one point (score_row of one key); `score` itself without a score.
  float score(const fj::MaskParams* params, float score, int32_t b, int32_t h, int32_t q,
              int32_t kv) const;

  // MaskAnalysis::classify of the mask, with its exact results: natively, the mask's interval
  // program (what MaskAnalysis interprets) compiled by LLVM.
  virtual TileClass classify(const Tile& tile, const fj::MaskParams* params) const = 0;

  // MaskAnalysis::kv_range of the mask, with its exact results, compiled likewise.
  virtual KvRange kv_range(int32_t b, int32_t h, int32_t q0, int32_t q1,
                           const fj::MaskParams* params) const = 0;

  // True when the functions are LLVM-compiled native code, false for the evaluator and
  // MaskAnalysis.
  virtual bool native() const = 0;
};

// Where compiled host code is kept between processes: an object file per key. The compiler asks
// and offers; the runtime's disk cache implements it (runtime/jit/host_code_store.h), so that the
// compiler does not depend on the runtime (docs/cache.md, "Host code").
class HostCodeStore {
 public:
  virtual ~HostCodeStore() = default;

  // The object file stored under `key` (32 hex digits; `name` names it for people), or, on a
  // miss, the one `build` makes, which is then stored. Only `build`'s errors are returned: a
  // store that cannot read or write costs a build, never a failure. Thread-safe.
  virtual Result<std::string> object(std::string_view name, std::string_view key,
                                     const std::function<Result<std::string>()>& build) = 0;
};

// The store make_host_code uses unless told otherwise: none until a tool or the runtime installs
// one (the CLI installs the disk cache the environment names). Thread-safe.
void set_default_host_code_store(std::shared_ptr<HostCodeStore> store);
std::shared_ptr<HostCodeStore> default_host_code_store();

// Host code for `variant` (a copy of what it needs is kept: the variant may go away). With
// `prefer_native` and flexjit built with LLVM, compiles the mask and the score to native code,
// or loads the object file `store` holds for them (host_code_key); a failure to compile (no
// usable host target, an LLVM error) is returned as an error, never a crash. Without LLVM, or
// with `prefer_native = false` (tests, benchmarks, the differential baseline), the IR
// evaluator. `store` may be null: compiled in this process. Thread-safe: variants may be
// compiled concurrently.
Result<std::shared_ptr<const HostCode>> make_host_code(
    const Variant& variant, bool prefer_native = true,
    const std::shared_ptr<HostCodeStore>& store = default_host_code_store());

// The variant's IR as the host code key hashes it: every field that the generated code depends
// on (mask, score, scalar and array params with their types and dimensions, constants), in a
// fixed order, integers little-endian, strings length-prefixed, each IR node once (a DAG in
// post-order, operands by index). Pinned by tests/compiler/golden/.
std::string host_code_ir_bytes(const Variant& variant);

}  // namespace flexjit
