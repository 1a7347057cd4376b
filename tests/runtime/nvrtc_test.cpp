#include <cuda.h>
#include <fmt/format.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/internal/inspect.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc_compiler.h"
#include "jit/nvrtc_library.h"

using namespace flexjit;

namespace {

constexpr const char* kTinyKernel = R"(
extern "C" __global__ void scale(float* data, float factor) {
  data[blockIdx.x * blockDim.x + threadIdx.x] *= factor;
}
)";

constexpr const char* kTemplateKernel = R"(
#include "fj_ops.cuh"
extern "C" __global__ void first_param(const fj::MaskParams params, int* out) {
  *out = params.scalar[0];
}
)";

bool is_elf(const std::string& image) {
  return image.size() > 4 && image.rfind(
                                 "\x7f"
                                 "ELF",
                                 0) == 0;
}

}  // namespace

TEST_CASE("NVRTC compiles a kernel to a cubin", "[nvrtc]") {
  const std::string arch = GENERATE("sm_80", "sm_90a");
  INFO(arch);
  auto output = nvrtc_compile("tiny.cu", kTinyKernel, {}, arch, {});
  INFO((output ? std::string() : output.error().log));
  REQUIRE(output.ok());
  CHECK(is_elf(output->cubin));
}

TEST_CASE("NVRTC passes the extra options, in order", "[nvrtc]") {
  const std::string source = R"(
#if FJ_TEST_VALUE != 2
#error "FJ_TEST_VALUE must be 2"
#endif
extern "C" __global__ void noop() {}
)";
  const std::vector<std::string> overriding = {"-DFJ_TEST_VALUE=1", "-UFJ_TEST_VALUE",
                                               "-DFJ_TEST_VALUE=2"};
  auto output = nvrtc_compile("options.cu", source, {}, "sm_80", overriding);
  INFO((output ? std::string() : output.error().log));
  CHECK(output.ok());

  const std::vector<std::string> wrong = {"-DFJ_TEST_VALUE=3"};
  auto failed = nvrtc_compile("options.cu", source, {}, "sm_80", wrong);
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.error().log, Catch::Contains("FJ_TEST_VALUE must be 2"));
  CHECK_THAT(failed.error().log,
             Catch::Contains("--gpu-architecture=sm_80 -std=c++17 -DFJ_TEST_VALUE=3"));
}

TEST_CASE("NVRTC resolves templates from the embedded headers", "[nvrtc]") {
  const std::vector<NvrtcHeader> headers = flexjit::template_headers();
  auto output = nvrtc_compile("with_template.cu", kTemplateKernel, headers, "sm_90a", {});
  INFO((output ? std::string() : output.error().log));
  REQUIRE(output.ok());
  CHECK(is_elf(output->cubin));

  // Without the headers the same source cannot compile: they are what made it work.
  auto without = nvrtc_compile("with_template.cu", kTemplateKernel, {}, "sm_90a", {});
  REQUIRE_FALSE(without.ok());
  CHECK_THAT(without.error().log, Catch::Contains("fj_ops.cuh"));
}

TEST_CASE("a compile error returns the NVRTC log", "[nvrtc]") {
  const char* source = R"(
extern "C" __global__ void broken(int* out) { *out = undeclared_thing; }
)";
  auto output = nvrtc_compile("broken.cu", source, {}, "sm_80", {});
  REQUIRE_FALSE(output.ok());
  CHECK(output.error().message == "NVRTC failed to compile broken.cu");
  CHECK_THAT(output.error().log, Catch::Contains("broken.cu"));
  CHECK_THAT(output.error().log, Catch::Contains("undeclared_thing"));
  CHECK_THAT(output.error().log, Catch::Contains("options: --gpu-architecture=sm_80 -std=c++17"));
}

TEST_CASE("an unknown architecture is an error, not a crash", "[nvrtc]") {
  auto output = nvrtc_compile("tiny.cu", kTinyKernel, {}, "sm_1", {});
  REQUIRE_FALSE(output.ok());
  CHECK_THAT(output.error().log, Catch::Contains("--gpu-architecture=sm_1"));
}

TEST_CASE("the NVRTC version is the toolkit's", "[nvrtc]") {
  const std::string version = nvrtc_version_string();
  CHECK(version.rfind("13.", 0) == 0);
}

TEST_CASE("NVRTC is keyed by its file without loading it", "[nvrtc]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("fj_nvrtc_identity_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path library = dir / "libnvrtc.so.13";
  std::ofstream(library, std::ios::binary) << "not a library";
  const std::vector<std::string> candidates = {(dir / "absent" / "libnvrtc.so.13").string(),
                                               library.string(), "libnvrtc.so.13"};
  const std::optional<std::string> first = nvrtc_file_identity(candidates);
  REQUIRE(first.has_value());
  CHECK(first->rfind(std::filesystem::canonical(library).string() + " 13 ", 0) == 0);
  CHECK(nvrtc_file_identity(candidates) == first);  // stable
  std::ofstream(library, std::ios::binary) << "another library";
  CHECK(nvrtc_file_identity(candidates) != first);  // a new file: new keys
  // A bare name is the loader's business: no file identity, even with paths after it.
  CHECK_FALSE(nvrtc_file_identity({"libnvrtc.so.13", library.string()}).has_value());
  CHECK_FALSE(nvrtc_file_identity({(dir / "absent").string()}).has_value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("every template is embedded byte for byte, sorted by name", "[nvrtc]") {
  const std::filesystem::path template_dir =
      std::filesystem::path(FLEXJIT_SOURCE_DIR) / "templates";
  std::vector<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(template_dir)) {
    if (entry.path().extension() == ".cuh") on_disk.push_back(entry.path().filename().string());
  }
  std::sort(on_disk.begin(), on_disk.end());

  const std::span<const EmbeddedFile> embedded = embedded_templates();
  std::vector<std::string> embedded_names;
  for (const EmbeddedFile& file : embedded)
    embedded_names.emplace_back(file.name);
  REQUIRE(embedded_names == on_disk);
  CHECK(std::find(on_disk.begin(), on_disk.end(), "fj_ops.cuh") != on_disk.end());

  for (const EmbeddedFile& file : embedded) {
    INFO(file.name);
    std::ifstream in(template_dir / file.name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(file.text == bytes);
  }
}

TEST_CASE("NVRTC is looked for in FLEXJIT_NVRTC alone when it is set", "[nvrtc]") {
  Environment env;
  env.nvrtc_library = "/opt/nvrtc/libnvrtc.so.13";
  env.cuda_home = "/opt/cuda";
  CHECK(nvrtc_candidates(env, "/venv/site-packages/flexjit/lib") ==
        std::vector<std::string>{"/opt/nvrtc/libnvrtc.so.13"});
}

TEST_CASE("NVRTC is looked for in the NVIDIA wheel, CUDA_HOME, /usr/local/cuda, the loader",
          "[nvrtc]") {
  Environment env;
  env.cuda_home = "/opt/cuda";
  const std::vector<std::string> candidates =
      nvrtc_candidates(env, "/venv/lib/python3.12/site-packages/flexjit/lib");
  const std::string file = fmt::format("libnvrtc.so.{}", CUDA_VERSION / 1000);
  const auto at = [&](const std::string& path) {
    return std::find(candidates.begin(), candidates.end(), path) - candidates.begin();
  };
  const auto wheel = at(fmt::format("/venv/lib/python3.12/site-packages/nvidia/cu{}/lib/{}",
                                    CUDA_VERSION / 1000, file));
  const auto cuda_home = at("/opt/cuda/lib64/" + file);
  const auto usr_local = at("/usr/local/cuda/lib64/" + file);
  const auto loader = at(file);
  CHECK(wheel < cuda_home);
  CHECK(cuda_home < usr_local);
  CHECK(usr_local < loader);
  CHECK(loader == static_cast<std::ptrdiff_t>(candidates.size()) - 1);
}
