// The compiler's public face: a checked mask lowered to IR, and what is derived from it
// (evaluation, tile classes, CUDA hooks). Stages downstream (runtime, CLI) use only this.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/result.h"
#include "flexjit/dsl/ast.h"

namespace flexjit {

// Runtime scalar parameters live in fixed slots of the kernel's parameter block; slot i
// holds the i-th `param` of the module in declaration order, so one numbering serves every
// mask of a file.
inline constexpr int kMaxScalarParams = 16;

struct RuntimeParam {
  std::string name;
  dsl::Type type = dsl::Type::Int;
  int slot = 0;
};

// A mask ready for analysis and code generation: `body` is a Bool IR expression over
// b, h, q, kv and the module's runtime parameters; referenced masks and constants are inlined.
struct MaskFunction {
  std::string name;
  ir::Expr body;
  std::vector<RuntimeParam> params;  // every param of the module, in slot order
  bool uses_head = false;            // body reads `h`
};

// Lowers mask `name` of a checked module (no errors) to IR and runs the IR passes.
// Fails with a message when the name is unknown, is not a mask, or the module has errors.
Result<MaskFunction> lower_mask(const dsl::Module& module, std::string_view name);

// Concrete values for one evaluation. `params` is indexed by slot.
struct EvalPoint {
  int32_t b = 0, h = 0, q = 0, kv = 0;
  std::span<const int32_t> params;
};

// The mask's value at one point, with the language's exact semantics (32-bit wrap-around,
// floor division, division by zero yields 0).
bool evaluate_mask(const MaskFunction& mask, const EvalPoint& point);

// Values must match the CUDA enum fj::TileClass in templates/fj_ops.cuh.
enum class TileClass : uint8_t { Empty = 0, Full = 1, Partial = 2 };

const char* tile_class_name(TileClass tile_class);

// A tile of the attention matrix for one request and head: q in [q0, q1), kv in [k0, k1).
struct Tile {
  int32_t b = 0, h = 0;
  int32_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
};

// Sound classification by interval analysis: Empty only if no pair of the tile is visible,
// Full only if every pair is. An empty range (q0 >= q1 or k0 >= k1) is Empty.
TileClass classify_tile(const MaskFunction& mask, const Tile& tile,
                        std::span<const int32_t> params);

// CUDA source defining `struct_name` with the fixed hooks of DESIGN.md §5 (see
// templates/variant.md for the contract). Self-contained apart from fj_ops.cuh.
std::string emit_cuda_variant(const MaskFunction& mask, std::string_view struct_name);

}  // namespace flexjit
