// libFuzzer target over the front end: any bytes must produce diagnostics, never a crash, a
// hang, undefined behaviour or a leak, and the results must keep the promises of the headers
// (spans inside the source, a module without errors fully resolved and typed, well-formed
// JSON). A broken promise aborts, which libFuzzer reports as a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "flexjit/dsl/frontend.h"
#include "fuzz_require.h"
#include "json_check.h"

using namespace flexjit::dsl;

namespace {

constexpr size_t kMaxJsonDiagnostics = 16;

bool span_inside(Span span, size_t size) {
  return span.offset <= size && span.length <= size - span.offset;
}

bool is_decl_of(const Module& module, int index, DeclKind kind) {
  return index >= 0 && static_cast<size_t>(index) < module.decls.size() &&
         module.decls[index].kind == kind;
}

bool is_number(Type type) {
  return type == Type::Int || type == Type::Float;
}

// A module without errors is what lowering consumes as is (ast.h).
void check_resolved(const Module& module) {
  size_t size = module.source.text.size();
  std::vector<const Expr*> pending;
  for (const Decl& decl : module.decls) {
    FUZZ_REQUIRE(span_inside(decl.span, size));
    switch (decl.kind) {
      case DeclKind::Param:
        FUZZ_REQUIRE(decl.declared_type != Type::Error);
        FUZZ_REQUIRE(decl.dims.size() <= 2);
        FUZZ_REQUIRE(!decl.is_array() || decl.declared_type != Type::Bool);
        FUZZ_REQUIRE(!decl.value);
        break;
      case DeclKind::Const:
        FUZZ_REQUIRE(decl.value);
        FUZZ_REQUIRE(decl.value->type == decl.declared_type ||
                     (decl.declared_type == Type::Float && decl.value->type == Type::Int));
        break;
      case DeclKind::Mask:
        FUZZ_REQUIRE(decl.value && decl.value->type == Type::Bool);
        break;
      case DeclKind::Score:
        FUZZ_REQUIRE(decl.value && is_number(decl.value->type));
        break;
      case DeclKind::Variant:
        FUZZ_REQUIRE(is_decl_of(module, decl.variant_mask_index, DeclKind::Mask));
        FUZZ_REQUIRE(decl.variant_score.empty()
                         ? decl.variant_score_index == -1
                         : is_decl_of(module, decl.variant_score_index, DeclKind::Score));
        break;
    }
    if (decl.value) pending.push_back(decl.value.get());
  }
  while (!pending.empty()) {
    const Expr* expr = pending.back();
    pending.pop_back();
    FUZZ_REQUIRE(expr->type != Type::Error);
    FUZZ_REQUIRE(span_inside(expr->span, size));
    switch (expr->kind) {
      case Expr::Kind::IntLit:
        FUZZ_REQUIRE(expr->int_value >= 0 && expr->int_value <= 2147483648);
        break;
      case Expr::Kind::Name:
        FUZZ_REQUIRE(expr->ref_kind != RefKind::Unresolved && expr->ref_kind != RefKind::Score);
        if (expr->ref_kind == RefKind::Local) FUZZ_REQUIRE(expr->binder);
        if (expr->ref_kind == RefKind::Param) {
          FUZZ_REQUIRE(is_decl_of(module, expr->ref_index, DeclKind::Param));
          FUZZ_REQUIRE(!module.decls[expr->ref_index].is_array());
        }
        break;
      case Expr::Kind::Call:
        FUZZ_REQUIRE(expr->ref_kind == RefKind::Builtin ||
                     (expr->ref_kind == RefKind::Score && expr->args.size() == 1 &&
                      is_decl_of(module, expr->ref_index, DeclKind::Score)));
        break;
      case Expr::Kind::Index:
        FUZZ_REQUIRE(expr->ref_kind == RefKind::Param &&
                     is_decl_of(module, expr->ref_index, DeclKind::Param));
        FUZZ_REQUIRE(module.decls[expr->ref_index].dims.size() == expr->args.size());
        break;
      case Expr::Kind::Reduce:
        FUZZ_REQUIRE(expr->args.size() == 2 && expr->type == Type::Bool);
        break;
      default:
        break;
    }
    for (const ExprPtr& arg : expr->args) {
      FUZZ_REQUIRE(arg);
      pending.push_back(arg.get());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Source source{"fuzz.mask", std::string(reinterpret_cast<const char*>(data), size)};
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(source, diagnostics);

  for (const Diagnostic& diagnostic : diagnostics) {
    FUZZ_REQUIRE(span_inside(diagnostic.span, size));
    FUZZ_REQUIRE(!diagnostic.message.empty());
  }
  if (!has_errors(diagnostics)) check_resolved(module);

  std::string text = format_diagnostics(source, diagnostics);
  FUZZ_REQUIRE(diagnostics.empty() == text.empty());

  // The JSON document costs most of a run under the sanitizers when diagnostics pile up;
  // inputs with a few of them reach every message and escape as well, at a fraction of it.
  if (diagnostics.size() <= kMaxJsonDiagnostics) {
    FUZZ_REQUIRE(json_diagnostic_count(format_diagnostics_json(source, diagnostics)) ==
                 diagnostics.size());
  }
  return 0;
}
