// libFuzzer target over the CLI's option checks (tools/cli/validate.h) and its `--set` array
// literals (tools/cli/settings.h): any values must give a result or a message, never a crash,
// UB, a hang or unbounded memory, and an accepted value must keep the promises of the headers
// (a `run` batch within its limits, an array of rows x cols values). A broken promise aborts,
// which libFuzzer reports as a finding.
//
// Input: the first byte picks the target; for `run`, the next 26 bytes are the numeric options
// and the rest is "query lens\ncontext lens"; for `--set`, the next 10 bytes choose the
// parameter's type, dimensions, b and h, and the rest is the literal.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "flexjit/internal/supported.h"
#include "fuzz_require.h"
#include "settings.h"
#include "validate.h"

namespace {

// Reads fixed-size values off the front of the input, zeros once it runs out.
struct Reader {
  const uint8_t* data;
  size_t size;

  template <class T>
  T take() {
    T value{};
    const size_t n = size < sizeof(T) ? size : sizeof(T);
    std::memcpy(&value, data, n);
    data += n;
    size -= n;
    return value;
  }
  std::string_view rest() const { return {reinterpret_cast<const char*>(data), size}; }
};

void fuzz_run_shape(Reader in) {
  flexjit::cli::RunShape shape;
  shape.head_dim = in.take<int32_t>();
  shape.page_size = in.take<int32_t>();
  shape.num_heads = in.take<int32_t>();
  shape.num_kv_heads = in.take<int32_t>();
  shape.iterations = in.take<int32_t>();
  const uint8_t flags = in.take<uint8_t>();
  shape.page_size_given = flags & 1;
  shape.context_lens_given = flags & 2;
  shape.encoder = flags & 4;
  shape.cpu = flags & 8;
  shape.scale = (flags & 16) ? std::numeric_limits<float>::infinity() : 0.0f;
  shape.kv_fp8 = flags & 32;
  shape.kv_scale_given = flags & 64;
  shape.kv_interleave_given = flags & 128;
  // Shards: a count and an interleave (0-255 and any int32), the layout from the count's top bit.
  const uint8_t shards = in.take<uint8_t>();
  shape.kv_shards = shards & 0x7f;
  shape.kv_shards_contiguous = shards & 0x80;
  shape.kv_interleave = in.take<int32_t>();
  // Lines: query lengths, context lengths, sinks.
  std::string_view rest = in.rest();
  std::string* const lines[] = {&shape.query_lens, &shape.context_lens, &shape.sinks};
  for (std::string* line : lines) {
    const size_t newline = rest.find('\n');
    *line = std::string(rest.substr(0, newline));
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
  }

  auto batch = flexjit::cli::check_run_shape(shape);
  if (!batch) {
    FUZZ_REQUIRE(!batch.error().message.empty());
    return;
  }
  FUZZ_REQUIRE(flexjit::supported::head_dim(shape.head_dim));
  FUZZ_REQUIRE(shape.encoder || (shape.page_size > 0 && shape.page_size % 16 == 0));
  FUZZ_REQUIRE(!shape.encoder || (!shape.page_size_given && !shape.context_lens_given));
  FUZZ_REQUIRE(!shape.encoder || !shape.kv_fp8);  // an fp8 cache is paged
  FUZZ_REQUIRE(!shape.kv_scale_given || shape.kv_fp8);
  FUZZ_REQUIRE(shape.num_heads > 0 && shape.num_kv_heads > 0 &&
               shape.num_heads % shape.num_kv_heads == 0);
  FUZZ_REQUIRE(shape.num_heads <= flexjit::cli::kMaxRunHeads);
  FUZZ_REQUIRE(shape.iterations >= 0 && shape.iterations <= flexjit::cli::kMaxRunIterations);
  FUZZ_REQUIRE(shape.kv_shards >= 1 && shape.kv_interleave >= 1);
  FUZZ_REQUIRE(shape.kv_shards == 1 || !shape.encoder);  // CPU or CUDA since 0.10
  FUZZ_REQUIRE(!shape.kv_interleave_given || !shape.kv_shards_contiguous);
  FUZZ_REQUIRE(batch->sinks.empty() == shape.sinks.empty());
  FUZZ_REQUIRE(batch->sinks.empty() || batch->sinks.size() == size_t(shape.num_heads));
  for (const float sink : batch->sinks)
    FUZZ_REQUIRE(!std::isnan(sink) && sink != std::numeric_limits<float>::infinity());
  FUZZ_REQUIRE(!batch->query_lens.empty());
  FUZZ_REQUIRE(batch->query_lens.size() == batch->context_lens.size());
  FUZZ_REQUIRE(batch->query_lens.size() <= flexjit::cli::kMaxRunRequests);
  int64_t tokens = 0;
  for (size_t r = 0; r < batch->query_lens.size(); ++r) {
    FUZZ_REQUIRE(batch->query_lens[r] >= 0 && batch->context_lens[r] >= 0);
    FUZZ_REQUIRE(int64_t{batch->query_lens[r]} + batch->context_lens[r] <= INT32_MAX);
    FUZZ_REQUIRE(!shape.encoder || batch->context_lens[r] == 0);
    tokens += batch->query_lens[r];
  }
  FUZZ_REQUIRE(tokens <= INT32_MAX);
  FUZZ_REQUIRE(batch->bytes >= 0 && batch->bytes <= flexjit::cli::kMaxRunBytes);
  FUZZ_REQUIRE(batch->reference_work >= 0 &&
               batch->reference_work <= flexjit::cli::kMaxRunReferenceWork);
}

void fuzz_array_literal(Reader in) {
  static const char* const kDims[] = {"b", "h", "q", "kv", "N"};
  flexjit::RuntimeParam param;
  param.name = "a";
  const uint8_t kind = in.take<uint8_t>();
  param.type = (kind & 1) ? flexjit::dsl::Type::Float : flexjit::dsl::Type::Int;
  param.dims.push_back(kDims[(kind >> 1) % 5]);
  if (kind & 0x80) param.dims.push_back(kDims[(kind >> 4) % 5]);
  const uint8_t scalar = in.take<uint8_t>();
  if (scalar == 0xff) param.dims.clear();  // a scalar: refused with a message
  const int32_t b = in.take<int32_t>();
  const int32_t h = in.take<int32_t>();
  auto array = flexjit::parse_array_values(param, in.rest(), b, h);
  if (!array) {
    FUZZ_REQUIRE(!array.error().message.empty());
    return;
  }
  FUZZ_REQUIRE(param.is_array());
  FUZZ_REQUIRE(array->rows > 0 && array->cols > 0);
  FUZZ_REQUIRE(param.dims.size() == 2 || array->cols == 1);
  FUZZ_REQUIRE(static_cast<int64_t>(array->bits.size()) == int64_t{array->rows} * array->cols);
  FUZZ_REQUIRE(static_cast<int64_t>(array->bits.size()) <= flexjit::kMaxArrayValues);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const uint8_t target = in.take<uint8_t>();
  if (target % 2 == 0) {
    fuzz_run_shape(in);
  } else {
    fuzz_array_literal(in);
  }
  return 0;
}
