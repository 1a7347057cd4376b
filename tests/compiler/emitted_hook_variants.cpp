#include "emitted_hook_variants.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "flexjit/dsl/frontend.h"
#include "random_ir.h"

namespace flexjit::testing {
namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "emitted_hook_variants: %s\n", message.c_str());
  std::abort();
}

}  // namespace

std::vector<Variant> emitted_hook_variants() {
  std::ifstream in(FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask");
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check({"standard.mask", text.str()}, diagnostics);
  if (!in || dsl::has_errors(diagnostics)) {
    fail("dsl/lib/standard.mask: " + dsl::format_diagnostics(module.source, diagnostics));
  }
  std::vector<VariantSelection> selections;
  for (const dsl::Decl& decl : module.decls) {
    if (decl.kind == dsl::DeclKind::Mask || decl.kind == dsl::DeclKind::Variant) {
      VariantSelection selection;
      selection.name = decl.name;
      selections.push_back(std::move(selection));
    }
  }
  for (const char* ranges : {"16", "64"}) {
    VariantSelection selection;
    selection.name = "prefix_ranges";
    selection.defines = {{"max_ranges", ranges}};
    selections.push_back(std::move(selection));
  }
  std::vector<Variant> variants;
  for (const VariantSelection& selection : selections) {
    Result<Variant> variant = lower_variant(module, selection);
    if (!variant.ok()) fail(selection.name + ": " + variant.error().message);
    variants.push_back(std::move(*variant));
  }
  for (int index = 0; index < kEmittedHookGenerated; index += kEmittedHookStride) {
    variants.push_back(generated_variant(index));
  }
  return variants;
}

}  // namespace flexjit::testing
