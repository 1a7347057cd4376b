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

dsl::Module parsed(const std::string& path) {
  std::ifstream in(FLEXJIT_SOURCE_DIR "/" + path);
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<dsl::Diagnostic> diagnostics;
  dsl::Module module = dsl::parse_and_check({path, text.str()}, diagnostics);
  if (!in || dsl::has_errors(diagnostics)) {
    fail(path + ": " + dsl::format_diagnostics(module.source, diagnostics));
  }
  return module;
}

// Every mask and variant of `module`, with `defines`.
std::vector<VariantSelection> every_variant(
    const dsl::Module& module, const std::vector<std::pair<std::string, std::string>>& defines) {
  std::vector<VariantSelection> selections;
  for (const dsl::Decl& decl : module.decls) {
    if (decl.kind != dsl::DeclKind::Mask && decl.kind != dsl::DeclKind::Variant) continue;
    VariantSelection selection;
    selection.name = decl.name;
    selection.defines = defines;
    selections.push_back(std::move(selection));
  }
  return selections;
}

void lower(const dsl::Module& module, const VariantSelection& selection,
           std::vector<Variant>& variants) {
  Result<Variant> variant = lower_variant(module, selection);
  if (!variant.ok()) fail(selection.name + ": " + variant.error().message);
  variants.push_back(std::move(*variant));
}

}  // namespace

std::vector<Variant> emitted_hook_variants() {
  std::vector<Variant> variants;
  const dsl::Module standard = parsed("dsl/lib/standard.mask");
  for (const VariantSelection& selection : every_variant(standard, {}))
    lower(standard, selection, variants);
  for (const char* ranges : {"16", "64"}) {
    VariantSelection selection;
    selection.name = "prefix_ranges";
    selection.defines = {{"max_ranges", ranges}};
    lower(standard, selection, variants);
  }
  // The benchmark's element-wise family, its T5 bias table short enough that the random tiles
  // meet both sides of its clamp.
  const dsl::Module family = parsed("tools/bench/family.mask");
  for (const VariantSelection& selection : every_variant(family, {{"t5_distances", "8"}}))
    lower(family, selection, variants);
  for (int index = 0; index < kEmittedHookGenerated; index += kEmittedHookStride) {
    variants.push_back(generated_variant(index));
  }
  return variants;
}

}  // namespace flexjit::testing
