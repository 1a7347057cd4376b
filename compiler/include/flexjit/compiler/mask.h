// The compiler's public face: a checked variant (a mask and an optional score) lowered to IR,
// and what is derived from it (evaluation, tile classes, CUDA hooks). Stages downstream
// (runtime, CLI) use only this.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fj_ops.cuh"
#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/result.h"
#include "flexjit/dsl/ast.h"

namespace flexjit {

// Runtime parameters live in fixed slots of the kernel's parameter block (fj::MaskParams):
// scalar slot i holds the module's i-th scalar `param`, array slot i its i-th array `param`,
// in declaration order, so one numbering serves every mask and score of a file.
inline constexpr int kMaxScalarParams = fj::kMaxScalarParams;
inline constexpr int kMaxArrayParams = fj::kMaxArrayParams;

struct RuntimeParam {
  std::string name;
  dsl::Type type = dsl::Type::Int;  // the scalar's type, or the array's element type
  int slot = 0;                     // among scalars, or among arrays
  std::vector<std::string> dims;    // empty for a scalar; an array's dimension names
  bool is_array() const { return !dims.empty(); }
};

// A compile-time constant as the variant was compiled: its value after any override.
struct ConstantValue {
  std::string name;
  dsl::Type type = dsl::Type::Int;
  std::string value;  // canonical text: `30`, `50.0`, `true`
  bool overridden = false;
};

// What to lower: a mask or a variant by name, optionally a score to pair with a mask, and
// overrides of compile-time constants (`-D cap=30`).
struct VariantSelection {
  std::string name;   // a `mask` or a `variant`
  std::string score;  // a `score`, or empty; only with a mask (a variant names its own)
  std::vector<std::pair<std::string, std::string>> defines;  // const name -> literal text
  bool optimize = true;  // run the IR passes (off: the IR as lowered, for `ir --passes`)
};

// A variant ready for analysis and code generation. `mask` is a Bool IR expression over
// b, h, q, kv and the module's runtime parameters; `score` a Float one that also reads
// Var(Score), undefined when the variant has no score. Referenced masks, scores and constants
// are inlined.
struct Variant {
  std::string name;        // the variant's name, or `mask` / `mask_score` when chosen so
  std::string mask_name;   // the mask it uses
  std::string score_name;  // the score it uses, empty when none
  ir::Expr mask;
  ir::Expr score;
  std::vector<RuntimeParam> scalars;     // every scalar param of the module, by slot
  std::vector<RuntimeParam> arrays;      // every array param of the module, by slot
  std::vector<ConstantValue> constants;  // every const of the module, in declaration order
  bool uses_head = false;  // the mask reads `h`: tile classes may differ between heads

  bool has_score() const { return score.defined(); }
};

// Lowers a selection from a checked module (no errors) to IR and runs the IR passes. Fails
// with a message when a name is unknown or of the wrong kind, a score is given with a
// variant, a define names no const or its text is not a literal of the const's type, or the
// module has errors.
Result<Variant> lower_variant(const dsl::Module& module, const VariantSelection& selection);

// lower_variant of mask or variant `name` with no score and no overrides.
Result<Variant> lower_mask(const dsl::Module& module, std::string_view name);

// Concrete values for one evaluation. `params` may be null: every scalar then reads 0 and
// every array read yields 0.
struct EvalPoint {
  int32_t b = 0, h = 0, q = 0, kv = 0;
  const fj::MaskParams* params = nullptr;
};

// The mask's value at one point, with the language's exact semantics (32-bit wrap-around,
// floor division, division by zero yields 0, out-of-range array reads yield 0).
bool evaluate_mask(const Variant& variant, const EvalPoint& point);

// The score after the variant's score modifier (`score` itself when it has none).
float evaluate_score(const Variant& variant, float score, const EvalPoint& point);

// Values must match the CUDA enum fj::TileClass in templates/fj_ops.cuh.
enum class TileClass : uint8_t { Empty = 0, Full = 1, Partial = 2 };

const char* tile_class_name(TileClass tile_class);

// A tile of the attention matrix for one request and head: q in [q0, q1), kv in [k0, k1).
struct Tile {
  int32_t b = 0, h = 0;
  int32_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
};

// Sound classification of the mask by interval analysis: Empty only if no pair of the tile
// is visible, Full only if every pair is. An empty range (q0 >= q1 or k0 >= k1) is Empty.
// `params` as in EvalPoint.
TileClass classify_tile(const Variant& variant, const Tile& tile, const fj::MaskParams* params);

// Keys [lo, hi) that may be visible to some query of a range; lo >= hi when none is.
struct KvRange {
  int32_t lo = 0;
  int32_t hi = 0;
  bool empty() const { return lo >= hi; }
};

// Sound bound on the visible keys of queries [q0, q1) of request b, head h
// (docs/architecture.md#tile-analysis "KV ranges"): for every q in [q0, q1) and every kv >= 0
// outside the result, the mask is false. Derived from the mask's constraints on kv (comparisons
// with kv on one side, through +, -, negation and division or multiplication by a positive
// constant, combined by && and ||); [0, INT32_MAX) where nothing bounds kv. q0 >= q1 gives an empty
// range. `params` as in EvalPoint.
KvRange kv_range(const Variant& variant, int32_t b, int32_t h, int32_t q0, int32_t q1,
                 const fj::MaskParams* params);

struct MaskPlans;

// The analyses of one variant, with what they precompute from its IR (kv plans). classify_tile
// and kv_range build one per call; a caller asking about many tiles keeps one. Cheap to copy
// (shares the plans), and safe to use from several threads.
class MaskAnalysis {
 public:
  explicit MaskAnalysis(const Variant& variant);
  TileClass classify(const Tile& tile, const fj::MaskParams* params) const;
  KvRange kv_range(int32_t b, int32_t h, int32_t q0, int32_t q1,
                   const fj::MaskParams* params) const;
  // Elements of the tiles of tile_q x tile_k that a kernel computes (inside the row's kv range
  // and not classified Empty) over queries and keys [0, probe) of request 0, head 0: what the
  // mask's structure costs at a tile size (the code generator compares key tile widths with
  // it, before any call's data is known). probe, tile_q and tile_k must be positive.
  int64_t computed_elements(int32_t probe, int32_t tile_q, int32_t tile_k,
                            const fj::MaskParams* params) const;

  // The precomputed plans and their interval program (compiler/analysis/analysis.h), for the LLVM
  // host code generator, which compiles that program.
  const std::shared_ptr<const MaskPlans>& plans() const { return plans_; }

 private:
  std::shared_ptr<const MaskPlans> plans_;
};

// The constants of emit_cuda_variant's struct that choose the Hopper prefill kernel's keys per
// K/V tile (wgmma_block_n, templates/kernel_args.cuh): kElementOperations, the element parts'
// operation count; kWideKeyTiles, whether the variant may take 128-key tiles at head dim 128;
// kNarrowKeyTilesHd64, whether it keeps 64-key tiles at head dim 64 (docs/hopper.md#tile-width).
// For the host, which lists a kernel's fallback builds by them (wgmma_wide_allowed).
struct KeyTileHints {
  int element_operations = 0;
  bool wide_key_tiles = false;
  bool narrow_key_tiles_hd64 = false;
};

// CUDA source defining `struct_name` with the fixed hooks of docs/architecture.md#kernel-contract:
// kHasScore, kUsesHead, mask(), score() (the identity when the variant has no score), classify()
// and kv_range(); also mask() and score() split into request, query-row, key and element parts
// (docs/hopper.md) and kElementOperations, the element parts' operation count.
// Self-contained apart from fj_ops.cuh. With `key_tiles`, also the struct's KeyTileHints, so that
// a caller that needs both splits the hooks and runs the tile probes once.
std::string emit_cuda_variant(const Variant& variant, std::string_view struct_name,
                              KeyTileHints* key_tiles = nullptr);

}  // namespace flexjit
