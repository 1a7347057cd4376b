#include "flexjit/dsl/ast.h"

#include "flexjit/dsl/operations.h"

namespace flexjit::dsl {

const char* type_name(Type type) {
  switch (type) {
    case Type::Error:
      return "<error>";
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
    case Type::Float:
      return "float";
  }
  return "<error>";
}

// The spellings of operators and functions that are operations come from their rows of
// FJ_FOR_EACH_OPERATION (flexjit/dsl/operations.h).
#define FJ_SPELLING_CASE(Enum, name, spelling) \
  case Enum::name:                             \
    return spelling;
#define FJ_UNARY_SPELLING(name, node, arity, typing, syntax, spelling, ...) \
  FJ_SPELLING_CASE(UnaryOp, name, spelling)
#define FJ_BINARY_SPELLING(name, node, arity, typing, syntax, spelling, ...) \
  FJ_SPELLING_CASE(BinaryOp, name, spelling)
#define FJ_FUNCTION_SPELLING(name, node, arity, typing, syntax, spelling, ...) \
  FJ_SPELLING_CASE(Function, name, spelling)

const char* op_spelling(UnaryOp op) {
  switch (op) { FJ_FOR_EACH_SOURCE(UNARY, FJ_UNARY_SPELLING) }
  return "?";
}

const char* op_spelling(BinaryOp op) {
  switch (op) { FJ_FOR_EACH_SOURCE(BINARY, FJ_BINARY_SPELLING) }
  return "?";
}

const char* builtin_name(Builtin builtin) {
  switch (builtin) {
    case Builtin::B:
      return "b";
    case Builtin::H:
      return "h";
    case Builtin::Q:
      return "q";
    case Builtin::KV:
      return "kv";
    case Builtin::Score:
      return "score";
  }
  return "?";
}

const char* function_name(Function function) {
  switch (function) {
    FJ_FOR_EACH_SOURCE(CALL, FJ_FUNCTION_SPELLING)
    // Functions that lowering writes with other operations.
    case Function::Clamp:
      return "clamp";
    case Function::Where:
      return "where";
  }
  return "?";
}

#undef FJ_SPELLING_CASE
#undef FJ_UNARY_SPELLING
#undef FJ_BINARY_SPELLING
#undef FJ_FUNCTION_SPELLING

const char* decl_kind_name(DeclKind kind) {
  switch (kind) {
    case DeclKind::Param:
      return "param";
    case DeclKind::Const:
      return "const";
    case DeclKind::Mask:
      return "mask";
    case DeclKind::Score:
      return "score";
    case DeclKind::Variant:
      return "variant";
  }
  return "?";
}

int Module::find(std::string_view name) const {
  for (size_t i = 0; i < decls.size(); ++i) {
    if (decls[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace flexjit::dsl
