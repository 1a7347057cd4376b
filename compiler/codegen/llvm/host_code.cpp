// make_host_code and the evaluator-backed HostCode, which every build has: the fallback without
// LLVM and the baseline the native code is tested against.
#include "flexjit/compiler/host_code.h"

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

Result<std::shared_ptr<const HostCode>> make_host_code(const Variant& variant, bool prefer_native) {
#if FLEXJIT_WITH_LLVM
  if (prefer_native) return compile_native_host_code(variant);
#else
  static_cast<void>(prefer_native);
#endif
  return std::shared_ptr<const HostCode>(std::make_shared<const EvaluatorHostCode>(variant));
}

}  // namespace flexjit
