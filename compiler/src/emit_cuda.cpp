// The CUDA variant struct of a mask (DESIGN.md §5). Every IR node becomes one statement that
// calls the fj_ops.cuh function the host evaluator and classifier call for it, so the device
// computes exactly what the host does.
#include <fmt/format.h>

#include <unordered_map>

#include "flexjit/compiler/mask.h"

namespace flexjit {

namespace {

// How one operation is written: a call `fj::wrap_add(a, b)` or an operator `(a < b)` on
// values, and the fj::ival function on intervals.
struct Spelling {
  const char* scalar;
  bool scalar_is_operator;
  const char* interval;
};

Spelling spelling_of(ir::ExprKind kind) {
  switch (kind) {
    case ir::ExprKind::Add:
      return {"fj::wrap_add", false, "fj::ival::add"};
    case ir::ExprKind::Sub:
      return {"fj::wrap_sub", false, "fj::ival::sub"};
    case ir::ExprKind::Mul:
      return {"fj::wrap_mul", false, "fj::ival::mul"};
    case ir::ExprKind::Div:
      return {"fj::floordiv", false, "fj::ival::div"};
    case ir::ExprKind::Mod:
      return {"fj::floormod", false, "fj::ival::mod"};
    case ir::ExprKind::Min:
      return {"fj::min", false, "fj::ival::min"};
    case ir::ExprKind::Max:
      return {"fj::max", false, "fj::ival::max"};
    case ir::ExprKind::Abs:
      return {"fj::wrap_abs", false, "fj::ival::abs"};
    case ir::ExprKind::Neg:
      return {"fj::wrap_neg", false, "fj::ival::neg"};
    case ir::ExprKind::EQ:
      return {"==", true, "fj::ival::eq"};
    case ir::ExprKind::NE:
      return {"!=", true, "fj::ival::ne"};
    case ir::ExprKind::LT:
      return {"<", true, "fj::ival::lt"};
    case ir::ExprKind::LE:
      return {"<=", true, "fj::ival::le"};
    case ir::ExprKind::GT:
      return {">", true, "fj::ival::gt"};
    case ir::ExprKind::GE:
      return {">=", true, "fj::ival::ge"};
    case ir::ExprKind::And:
      return {"&&", true, "fj::ival::logical_and"};
    case ir::ExprKind::Or:
      return {"||", true, "fj::ival::logical_or"};
    case ir::ExprKind::Not:
      return {"!", true, "fj::ival::logical_not"};
    case ir::ExprKind::Select:
      return {"?", true, "fj::ival::select"};
    case ir::ExprKind::IntImm:
    case ir::ExprKind::BoolImm:
    case ir::ExprKind::Var:
    case ir::ExprKind::Param:
      break;
  }
  return {"", false, ""};
}

std::string int_literal(int32_t value) {
  // -2147483648 would be the negation of a 64-bit literal.
  return value == INT32_MIN ? "(-2147483647 - 1)" : std::to_string(value);
}

std::string param_read(const ir::Param* param) {
  const std::string slot = fmt::format("p.scalar[{}]", param->slot);
  return param->type == ir::Type::Bool ? "(" + slot + " != 0)" : slot;
}

// Writes the statements of one hook body, one per operation node, shared nodes once.
class StatementWriter {
 public:
  explicit StatementWriter(bool intervals) : intervals_(intervals) {}

  // The C++ expression naming e's value (a leaf's text, or the temporary holding it).
  std::string value_of(const ir::Expr& e) {
    if (ir::operand_count(e.kind()) == 0) return leaf(e);
    const auto found = names_.find(e.get());
    if (found != names_.end()) return found->second;

    std::vector<std::string> operands;
    for (int i = 0; i < ir::operand_count(e.kind()); ++i) {
      operands.push_back(value_of(ir::operand(e, i)));
    }
    const Spelling spelling = spelling_of(e.kind());
    std::string value;
    if (intervals_ || !spelling.scalar_is_operator) {
      value = fmt::format("{}({})", intervals_ ? spelling.interval : spelling.scalar,
                          fmt::join(operands, ", "));
    } else if (e.kind() == ir::ExprKind::Select) {
      value = fmt::format("({} ? {} : {})", operands[0], operands[1], operands[2]);
    } else if (operands.size() == 1) {
      value = fmt::format("({}{})", spelling.scalar, operands[0]);
    } else {
      value = fmt::format("({} {} {})", operands[0], spelling.scalar, operands[1]);
    }

    std::string name = fmt::format("t{}", names_.size());
    const char* type = intervals_ ? "fj::Interval" : e.type() == ir::Type::Bool ? "bool" : "int";
    code_ += fmt::format("    const {} {} = {};\n", type, name, value);
    names_.emplace(e.get(), name);
    return name;
  }

  const std::string& code() const { return code_; }

 private:
  std::string leaf(const ir::Expr& e) const {
    switch (e.kind()) {
      case ir::ExprKind::IntImm: {
        const std::string literal = int_literal(e.as<ir::IntImm>()->value);
        return intervals_ ? fmt::format("fj::Interval::point({})", literal) : literal;
      }
      case ir::ExprKind::BoolImm: {
        const char* literal = e.as<ir::BoolImm>()->value ? "true" : "false";
        return intervals_ ? fmt::format("fj::Interval::boolean({})", literal) : literal;
      }
      case ir::ExprKind::Var: {
        const ir::Variable variable = e.as<ir::Var>()->variable;
        const char* name = ir::variable_name(variable);
        // q and kv are ranges declared at the top of classify(); b and h are concrete.
        const bool ranged = variable == ir::Variable::Q || variable == ir::Variable::KV;
        return intervals_ && !ranged ? fmt::format("fj::Interval::point({})", name) : name;
      }
      case ir::ExprKind::Param: {
        const ir::Param* param = e.as<ir::Param>();
        if (!intervals_) return param_read(param);
        return fmt::format("fj::Interval::{}({})",
                           param->type == ir::Type::Bool ? "boolean" : "point", param_read(param));
      }
      default:
        return "";
    }
  }

  bool intervals_;
  std::unordered_map<const ir::ExprNode*, std::string> names_;
  std::string code_;
};

}  // namespace

std::string emit_cuda_variant(const MaskFunction& mask, std::string_view struct_name) {
  const ir::Expr body = mask.body.defined() ? mask.body : ir::BoolImm::make(false);

  StatementWriter scalar(false);
  const std::string mask_value = scalar.value_of(body);
  StatementWriter interval(true);
  const std::string class_value = interval.value_of(body);

  std::string ranges;
  if (ir::uses_variable(body, ir::Variable::Q)) {
    ranges += "    const fj::Interval q = fj::Interval::range(q0, (fj::i64)q1 - 1);\n";
  }
  if (ir::uses_variable(body, ir::Variable::KV)) {
    ranges += "    const fj::Interval kv = fj::Interval::range(k0, (fj::i64)k1 - 1);\n";
  }

  return fmt::format(
      "// generated by flexjit from mask `{name}`: {ir}\n"
      "struct {struct_name} {{\n"
      "  static constexpr bool kHasScore = false;\n"
      "  static constexpr bool kUsesHead = {uses_head};\n"
      "\n"
      "  __device__ __forceinline__ bool mask(const fj::MaskParams& p, int b, int h, int q, "
      "int kv) const {{\n"
      "{mask_code}"
      "    return {mask_value};\n"
      "  }}\n"
      "\n"
      "  __device__ __forceinline__ float score(const fj::MaskParams& p, float s, int b, int h, "
      "int q, int kv) const {{\n"
      "    return s;\n"
      "  }}\n"
      "\n"
      "  // q in [q0, q1), kv in [k0, k1), half-open; empty range => Empty\n"
      "  __device__ __forceinline__ fj::TileClass classify(const fj::MaskParams& p, int b, int h, "
      "int q0, int q1, int k0, int k1) const {{\n"
      "    if (q0 >= q1 || k0 >= k1) return fj::TileClass::Empty;\n"
      "{ranges}"
      "{class_code}"
      "    return fj::tile_class({class_value});\n"
      "  }}\n"
      "}};\n",
      fmt::arg("name", mask.name), fmt::arg("ir", ir::to_string(body)),
      fmt::arg("struct_name", struct_name), fmt::arg("uses_head", mask.uses_head),
      fmt::arg("mask_code", scalar.code()), fmt::arg("mask_value", mask_value),
      fmt::arg("ranges", ranges), fmt::arg("class_code", interval.code()),
      fmt::arg("class_value", class_value));
}

}  // namespace flexjit
