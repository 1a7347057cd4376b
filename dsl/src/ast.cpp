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
    case Type::Float:
      return "float";
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
    case Builtin::Score:
      return "score";
  }
  return "?";
}

const char* function_name(Function function) {
  switch (function) {
    case Function::Min:
      return "min";
    case Function::Max:
      return "max";
    case Function::Abs:
      return "abs";
    case Function::Clamp:
      return "clamp";
    case Function::Where:
      return "where";
    case Function::Tanh:
      return "tanh";
    case Function::Exp:
      return "exp";
    case Function::Exp2:
      return "exp2";
    case Function::Log:
      return "log";
    case Function::Log2:
      return "log2";
    case Function::Sqrt:
      return "sqrt";
    case Function::Sigmoid:
      return "sigmoid";
    case Function::Floor:
      return "floor";
    case Function::Ceil:
      return "ceil";
    case Function::Int:
      return "int";
    case Function::Float:
      return "float";
  }
  return "?";
}

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
