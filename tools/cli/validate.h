// The CLI's checks of its numeric and list options, before any work: every value a command
// takes is in range, no two options contradict each other, and a `run` batch fits in bounded
// memory and time. Plain C++ over the option values (no CUDA, no runtime), so that
// tests/fuzz/cli_fuzzer.cpp can drive it; main.cpp turns a failure into exit code 1 with its
// message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flexjit/compiler/result.h"

namespace flexjit::cli {

// A decimal int32 filling all of `text`, nullopt otherwise.
std::optional<int> parse_int(std::string_view text);

// `text` as comma-separated non-negative ints ("1,7,300"); `what` names the option in errors.
Result<std::vector<int>> parse_int_list(std::string_view text, std::string_view what);

// --sinks: comma-separated float32 logits (finite, or -inf for a head without a sink), one
// for every head or one per head; "" for none (an empty vector).
Result<std::vector<float>> parse_sinks(std::string_view text, int num_heads);

// `flexjit run` accepts at most this much work, so that no flag value makes it run for hours or
// exhaust memory: host memory of its random inputs and the float64 reference's outputs, and
// multiply-adds (query-key pairs, before the mask, times heads times head dim) of the reference
// and, on the CPU backend, of the timed launches. The reference does about 0.75 G multiply-adds
// a second on one core, so a run takes at most a minute or two (a 4096-token prefill at 32 heads
// of 128 is 2^36).
inline constexpr int64_t kMaxRunBytes = int64_t{2} << 30;
inline constexpr int64_t kMaxRunReferenceWork = int64_t{1} << 36;
inline constexpr int64_t kMaxRunCpuWork = int64_t{1} << 39;
// At most this many timed launches, and requests per batch (the C API's limit).
inline constexpr int kMaxRunIterations = 100000;
inline constexpr int kMaxRunRequests = 65535;
// At most this many query heads: per-head host state (--sinks) stays small whatever the flag says,
// and no model has more.
inline constexpr int kMaxRunHeads = 65536;
// At most this many shards of each request's keys (--kv-shards).
inline constexpr int kMaxRunShards = 1024;

// `flexjit run`'s shape options as given on the command line.
struct RunShape {
  int head_dim = 128;
  int page_size = 16;
  bool page_size_given = false;  // --page-size was on the command line
  int num_heads = 32;
  int num_kv_heads = 8;
  std::string query_lens = "1,7,300";
  std::string context_lens = "511,64,0";
  bool context_lens_given = false;  // --context-lens was on the command line
  bool encoder = false;
  bool cpu = true;  // runs on the CPU backend (timed launches count as work)
  int iterations = 20;
  float scale = 0.0f;
  std::string sinks;    // --sinks: "" for none, else one logit or one per head, comma-separated
  bool kv_fp8 = false;  // --kv-dtype fp8
  bool kv_scale_given = false;  // --kv-scale was on the command line
  // Context parallelism (--kv-shards, docs/context_parallel.md): 1 is unsharded. Interleaved
  // in runs of kv_interleave keys (vLLM's layout), or contiguous ranges (kv_shards_contiguous).
  int kv_shards = 1;
  int kv_interleave = 1;
  bool kv_interleave_given = false;
  bool kv_shards_contiguous = false;
};

// The batch a valid RunShape describes, with what it costs.
struct RunBatch {
  std::vector<int> query_lens;
  std::vector<int> context_lens;  // zeros for the encoder
  int64_t bytes = 0;              // estimated host memory
  int64_t reference_work = 0;     // multiply-adds of the reference
  std::vector<float> sinks;       // [num_heads] sink logits, or empty: none
};

// Checks `shape`: head dim supported; a page size for the paged cache (a multiple of 16 up to
// 1024, not 0, which is the encoder's) and neither --page-size nor --context-lens with
// --encoder; heads and kv heads positive, kv heads dividing heads, at most kMaxRunHeads heads;
// lengths non-negative, one context length per query length, at most kMaxRunRequests requests,
// sequence lengths and the token count within int32; iterations in [0, kMaxRunIterations]; a
// finite scale; sinks (parse_sinks); an fp8 cache only paged (not with --encoder) and --kv-scale
// only with one; shards (--kv-shards in [1, kMaxRunShards], interleave >= 1 and only for
// interleaved shards) only paged and on the CPU backend; and the memory and work limits above.
Result<RunBatch> check_run_shape(const RunShape& shape);

// `compile`'s options beyond the kernel's.
struct CompileShape {
  bool all = false;
  bool mask_given = false;
  bool lists_given = false;  // --head-dims, --dtypes or --page-sizes on the command line
  bool inspect = false;      // --ptx, --sass or --resources
  bool resources = false;
  bool json = false;
  std::string arch;  // --arch, "" for the current GPU's
  int jobs = 0;
};

// Checks `shape`: --mask or --all, not both; the lists only with --all; inspection only of one
// CUDA kernel; --json only with --resources; jobs in [0, 1024]. "" when sound, else the message.
std::string check_compile_shape(const CompileShape& shape);

// The message for an --arch of `command` (emit, compile) that names no architecture flexjit
// builds for, "" for a good one. "cpu" is good for compile only: emit prints CUDA source.
std::string arch_problem(std::string_view command, std::string_view arch);

}  // namespace flexjit::cli
