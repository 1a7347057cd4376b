// make_host_code and the evaluator-backed HostCode, which every build has: the fallback without
// LLVM and the baseline the native code is tested against.
#include "flexjit/compiler/host_code.h"

#include <bit>
#include <mutex>
#include <unordered_map>

#if FLEXJIT_WITH_LLVM
#include "native_host_code.h"
#endif

namespace flexjit {

bool HostCode::mask(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q,
                    int32_t kv) const {
  uint8_t visible = 0;
  mask_row(params, b, h, q, kv, 1, &visible);
  return visible != 0;
}

float HostCode::score(const fj::MaskParams* params, float score, int32_t b, int32_t h, int32_t q,
                      int32_t kv) const {
  score_row(params, b, h, q, kv, 1, &score);
  return score;
}

namespace {

// evaluate_mask / evaluate_score per element and MaskAnalysis: the definitions the native code
// must match.
class EvaluatorHostCode final : public HostCode {
 public:
  explicit EvaluatorHostCode(const Variant& variant) : variant_(variant), analysis_(variant) {}

  void mask_row(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv0,
                int32_t n, uint8_t* out) const override {
    for (int32_t i = 0; i < n; ++i)
      out[i] = evaluate_mask(variant_, {b, h, q, fj::wrap_add(kv0, i), params}) ? 1 : 0;
  }

  void score_row(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv0,
                 int32_t n, float* scores) const override {
    if (!variant_.has_score()) return;
    for (int32_t i = 0; i < n; ++i)
      scores[i] = evaluate_score(variant_, scores[i], {b, h, q, fj::wrap_add(kv0, i), params});
  }

  TileClass classify(const Tile& tile, const fj::MaskParams* params) const override {
    return analysis_.classify(tile, params);
  }

  KvRange kv_range(int32_t b, int32_t h, int32_t q0, int32_t q1,
                   const fj::MaskParams* params) const override {
    return analysis_.kv_range(b, h, q0, q1, params);
  }

  bool native() const override { return false; }

 private:
  const Variant variant_;
  const MaskAnalysis analysis_;
};

}  // namespace

namespace {

std::mutex default_store_mutex;
std::shared_ptr<HostCodeStore> default_store;

// host_code_ir_bytes' encoding: integers little-endian, strings length-prefixed.
class IrWriter {
 public:
  void number(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out_.push_back(static_cast<char>(value >> (8 * i)));
  }
  void text(std::string_view value) {
    number(value.size(), 4);
    out_.append(value);
  }

  // Writes the nodes of `e` not written yet, operands first; returns e's index.
  uint32_t expr(const ir::Expr& e) {
    if (const auto found = index_.find(e.get()); found != index_.end()) return found->second;
    std::vector<uint32_t> operands;
    for (int i = 0; i < ir::operand_count(e.kind()); ++i)
      operands.push_back(expr(ir::operand(e, i)));
    number(static_cast<uint64_t>(e.kind()), 1);
    number(static_cast<uint64_t>(e.type()), 1);
    if (const ir::IntImm* imm = e.as<ir::IntImm>()) {
      number(static_cast<uint32_t>(imm->value), 4);
    } else if (const ir::FloatImm* imm = e.as<ir::FloatImm>()) {
      number(std::bit_cast<uint32_t>(imm->value), 4);
    } else if (const ir::BoolImm* imm = e.as<ir::BoolImm>()) {
      number(imm->value ? 1 : 0, 1);
    } else if (const ir::Var* var = e.as<ir::Var>()) {
      number(static_cast<uint64_t>(var->variable), 1);
    } else if (const ir::Param* param = e.as<ir::Param>()) {
      number(static_cast<uint32_t>(param->slot), 4);
      text(param->name);
    } else if (const ir::Load* load = e.as<ir::Load>()) {
      number(static_cast<uint32_t>(load->slot), 4);
      number(static_cast<uint32_t>(load->rank), 4);
      text(load->name);
    }
    number(operands.size(), 1);
    for (const uint32_t operand : operands)
      number(operand, 4);
    const auto index = static_cast<uint32_t>(index_.size());
    index_.emplace(e.get(), index);
    return index;
  }

  void params(const std::vector<RuntimeParam>& params) {
    number(params.size(), 4);
    for (const RuntimeParam& param : params) {
      text(param.name);
      number(static_cast<uint64_t>(param.type), 1);
      number(static_cast<uint32_t>(param.slot), 4);
      number(param.dims.size(), 4);
      for (const std::string& dim : param.dims)
        text(dim);
    }
  }

  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::unordered_map<const ir::ExprNode*, uint32_t> index_;
};

}  // namespace

void set_default_host_code_store(std::shared_ptr<HostCodeStore> store) {
  const std::lock_guard lock(default_store_mutex);
  default_store = std::move(store);
}

std::shared_ptr<HostCodeStore> default_host_code_store() {
  const std::lock_guard lock(default_store_mutex);
  return default_store;
}

std::string host_code_ir_bytes(const Variant& variant) {
  IrWriter writer;
  // The roots' indices follow their nodes: the mask's, then the score's (or none).
  const uint32_t mask = writer.expr(variant.mask);
  writer.number(mask, 4);
  writer.number(variant.has_score() ? 1 : 0, 1);
  if (variant.has_score()) writer.number(writer.expr(variant.score), 4);
  writer.params(variant.scalars);
  writer.params(variant.arrays);
  writer.number(variant.constants.size(), 4);
  for (const ConstantValue& constant : variant.constants) {
    writer.text(constant.name);
    writer.number(static_cast<uint64_t>(constant.type), 1);
    writer.text(constant.value);
    writer.number(constant.overridden ? 1 : 0, 1);
  }
  writer.number(variant.uses_head ? 1 : 0, 1);
  return writer.take();
}

Result<std::shared_ptr<const HostCode>> make_host_code(
    const Variant& variant, bool prefer_native, const std::shared_ptr<HostCodeStore>& store) {
#if FLEXJIT_WITH_LLVM
  if (prefer_native) return compile_native_host_code(variant, store.get());
#else
  static_cast<void>(prefer_native);
  static_cast<void>(store);
#endif
  return std::shared_ptr<const HostCode>(std::make_shared<const EvaluatorHostCode>(variant));
}

}  // namespace flexjit
