// The standard pipeline of IR passes.
#include "passes.h"

namespace flexjit::ir {

// Folding first hands simplify constant operands; CSE last merges what simplify made equal.
std::vector<PassResult> run_passes_traced(const Expr& e) {
  std::vector<PassResult> trace;
  trace.push_back({"fold", fold_constants(e)});
  trace.push_back({"simplify", simplify(trace.back().result)});
  trace.push_back({"cse", eliminate_common_subexpressions(trace.back().result)});
  return trace;
}

Expr run_passes(const Expr& e) {
  return run_passes_traced(e).back().result;
}

}  // namespace flexjit::ir
