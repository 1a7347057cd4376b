// Prints one line per kernel, `<kernel name> <xxh3-128 of its PTX>`, for every mask and variant
// of a mask file (dsl/lib/standard.mask by default) on sm_80 and sm_90a, head dims 64, 128 and
// 256, bf16: the paged prefill (page 16), the encoder (contiguous K/V) and the decode kernel,
// plus the mask-independent KV-write and merge kernels. A restructure that must not change the
// generated code compares this list before and after (tools/dev/ptx_hashes.sh). Declarations of
// globals the PTX never references are left out of the hash (referenced_ptx).
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"
#include "flexjit/internal/inspect.h"
#include "flexjit/internal/supported.h"

namespace {

// The PTX less its declarations of globals that nothing in it references: NVRTC declares one
// for every static constexpr member of the variant struct and its base (VariantBase), used or not
// (with an initializer where the value is not zero), and where such a constant is declared
// changes no instruction.
std::string referenced_ptx(const std::string& ptx) {
  std::string kept;
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(".global ") && line.ends_with(";")) {
      const std::string declaration = line.substr(0, line.find(" = "));
      const size_t name = declaration.find_last_of(" \t") + 1;
      const std::string token = declaration.substr(name);
      const std::string symbol = token.substr(0, token.find_first_of("[;"));  // an array's name
      if (ptx.find(symbol) == ptx.rfind(symbol)) continue;  // declared, never referenced
    }
    kept += line;
    kept += '\n';
  }
  return kept;
}

std::string ptx_hash(const flexjit::KernelSpec& spec, std::string& error) {
  auto compiled = flexjit::inspect::compile_ptx(spec);
  if (!compiled) {
    error = compiled.error().message + "\n" + compiled.error().log;
    return {};
  }
  const std::string ptx = referenced_ptx(*compiled);
  const XXH128_hash_t hash = XXH3_128bits(ptx.data(), ptx.size());
  return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "dsl/lib/standard.mask";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fmt::print(stderr, "ptx_hashes: cannot open '{}'\n", path);
    return 2;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  const flexjit::dsl::Module module =
      flexjit::dsl::parse_and_check({path, text.str()}, diagnostics);
  if (flexjit::dsl::has_errors(diagnostics)) {
    fmt::print(stderr, "{}", flexjit::dsl::format_diagnostics(module.source, diagnostics));
    return 1;
  }

  std::vector<flexjit::KernelSpec> specs;
  const std::vector<std::string> arches(flexjit::supported::kCheckedArchs.begin(),
                                        flexjit::supported::kCheckedArchs.end());
  for (const flexjit::dsl::Decl& decl : module.decls) {
    if (decl.kind != flexjit::dsl::DeclKind::Mask && decl.kind != flexjit::dsl::DeclKind::Variant)
      continue;
    auto variant = flexjit::lower_mask(module, decl.name);
    if (!variant) {
      fmt::print(stderr, "ptx_hashes: {}: {}\n", decl.name, variant.error().message);
      return 1;
    }
    for (const std::string& arch : arches) {
      for (int head_dim : {64, 128, 256}) {
        flexjit::PrefillKernelConfig config{head_dim, true, 16, arch};
        specs.push_back(flexjit::prefill_kernel_spec(*variant, config));
        specs.push_back(flexjit::decode_kernel_spec(*variant, config));
        config.page_size = 0;
        specs.push_back(flexjit::prefill_kernel_spec(*variant, config));
      }
    }
  }
  for (const std::string& arch : arches) {
    specs.push_back(flexjit::kv_cache_write_spec(arch));
    specs.push_back(flexjit::kv_cache_write_fp8_spec(true, arch));
    specs.push_back(flexjit::kv_cache_write_fp8_spec(false, arch));
    specs.push_back(flexjit::merge_states_spec(true, arch));
    specs.push_back(flexjit::merge_states_spec(false, arch));
  }

  std::vector<std::string> hashes(specs.size());
  std::vector<std::string> errors(specs.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < specs.size(); i = next++)
        hashes[i] = ptx_hash(specs[i], errors[i]);
    });
  }
  for (std::thread& worker : workers)
    worker.join();

  int status = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!errors[i].empty()) {
      fmt::print(stderr, "ptx_hashes: {} ({}): {}\n", specs[i].name, specs[i].arch, errors[i]);
      status = 1;
      continue;
    }
    // The KV-write and merge kernels' names do not carry the arch.
    fmt::print("{} {} {}\n", specs[i].name, specs[i].arch, hashes[i]);
  }
  return status;
}
