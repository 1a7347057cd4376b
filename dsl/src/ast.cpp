#include "flexjit/dsl/ast.h"

namespace flexjit::dsl {

const char* type_name(Type type) {
  switch (type) {
    case Type::Error:
      return "<error>";
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
  }
  return "<error>";
}

const char* op_spelling(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return "-";
    case UnaryOp::Not:
      return "!";
  }
  return "?";
}

const char* op_spelling(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "+";
    case BinaryOp::Sub:
      return "-";
    case BinaryOp::Mul:
      return "*";
    case BinaryOp::Div:
      return "/";
    case BinaryOp::Mod:
      return "%";
    case BinaryOp::Lt:
      return "<";
    case BinaryOp::Le:
      return "<=";
    case BinaryOp::Gt:
      return ">";
    case BinaryOp::Ge:
      return ">=";
    case BinaryOp::Eq:
      return "==";
    case BinaryOp::Ne:
      return "!=";
    case BinaryOp::And:
      return "&&";
    case BinaryOp::Or:
      return "||";
  }
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
