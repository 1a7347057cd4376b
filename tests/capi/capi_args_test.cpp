// Every entry point of the C API with null and invalid arguments (issue 31): each call runs in a
// forked child, so that a crash or a hang is reported as that call's failure instead of ending
// the suite, and must return an error status with a non-empty message wherever a context
// exists. No call needs a GPU or NVRTC (kernels are the CPU backend's), so tools/dev/sanitize.sh
// runs this suite under ASan and UBSan too. It links the shared library alone, as engines do.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flexjit/flexjit.h"
#include "runtime/cpu_paged_batch.h"

namespace {

const char* const kStandard = FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask";

// A context, the standard masks, a CPU paged kernel (`sliding`, head dim 128, page 16), its twin
// over an fp8 cache and a CPU encoder kernel, and the host buffers of one valid paged call
// (PagedBatch: one request of 4 new tokens after 16 cached ones, 8 heads over 2 kv heads, a cache
// of 3 blocks).
struct Fixture {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  fj_kernel* paged = nullptr;
  fj_kernel* paged_fp8 = nullptr;
  fj_kernel* encoder = nullptr;
  PagedBatch batch;
  fj_paged_attention_args& args = batch.args;
  uint16_t* q = batch.q.get();
  uint16_t* out = batch.out.get();
  uint16_t* cache = batch.k.get();
  float* lse = batch.lse.get();
  int32_t* qsl = batch.qsl.get();
  int32_t* seq_lens = batch.seq_lens.get();
  int32_t* table = batch.table.get();

  Fixture() {
    fj_context_create(&context);
    fj_program_create_from_file(context, kStandard, &program);
    fj_kernel_desc desc = kernel_desc("sliding", 16);
    fj_kernel_create(context, program, &desc, &paged);
    desc.kv_dtype = FJ_DTYPE_FP8_E4M3;
    fj_kernel_create(context, program, &desc, &paged_fp8);
    desc = kernel_desc("sliding_sym", 0);
    fj_kernel_create(context, program, &desc, &encoder);
  }

  static fj_kernel_desc kernel_desc(const char* mask, int page_size) {
    fj_kernel_desc desc{};
    desc.struct_size = sizeof(desc);
    desc.mask = mask;
    desc.head_dim = 128;
    desc.dtype = FJ_DTYPE_BF16;
    desc.page_size = page_size;
    desc.arch = "cpu";
    return desc;
  }

  // fj_kernel_create's status for `desc` (edited from sliding's) on this context.
  fj_status create(const std::function<void(fj_kernel_desc&)>& edit) {
    fj_kernel_desc desc = kernel_desc("sliding", 16);
    edit(desc);
    fj_kernel* kernel = nullptr;
    return fj_kernel_create(context, program, &desc, &kernel);
  }

  // fj_paged_attention's status for the valid call with `edit` applied.
  fj_status paged_call(const std::function<void(Fixture&)>& edit) {
    edit(*this);
    return fj_paged_attention(paged, &args, nullptr);
  }

  // fj_paged_attention's status for the valid call of the fp8 kernel (PagedBatch::use_fp8_cache)
  // with `edit` applied.
  fj_status fp8_call(const std::function<void(Fixture&)>& edit) {
    batch.use_fp8_cache();
    edit(*this);
    return fj_paged_attention(paged_fp8, &args, nullptr);
  }

  // An encoder call over the same buffers: one sequence of 4 rows.
  fj_varlen_attention_args varlen() const {
    fj_varlen_attention_args v{};
    v.struct_size = sizeof(v);
    v.q = q;
    v.k = v.v = cache;
    v.out = out;
    v.cu_seqlens = qsl;
    v.num_tokens = 4;
    v.num_seqs = 1;
    v.num_heads = 8;
    v.num_kv_heads = 2;
    v.max_seq_len = 4;
    v.q_stride_token = v.out_stride_token = 8 * 128;
    v.q_stride_head = v.out_stride_head = 128;
    v.k_stride_token = v.v_stride_token = 2 * 128;
    v.k_stride_head = v.v_stride_head = 128;
    v.params = &batch.window;
    v.num_params = 1;
    return v;
  }

  fj_kv_cache_write_args cache_write() {
    static const int64_t slots[4] = {0, 1, 2, 3};
    fj_kv_cache_write_args w{};
    w.struct_size = sizeof(w);
    w.key = w.value = q;
    w.k_cache = w.v_cache = cache;
    w.slot_mapping = slots;
    w.num_tokens = 4;
    w.num_kv_heads = 2;
    w.head_dim = 128;
    w.page_size = 16;
    w.num_blocks = 3;
    w.key_stride_token = w.value_stride_token = 2 * 128;
    w.key_stride_head = w.value_stride_head = 128;
    w.k_stride_block = w.v_stride_block = 16 * 2 * 128;
    w.k_stride_slot = w.v_stride_slot = 2 * 128;
    w.k_stride_head = w.v_stride_head = 128;
    w.device = FJ_DEVICE_CPU;
    return w;
  }

  // cache_write() into an fp8 cache of the same shape in bytes, scales 1 per kv head.
  fj_kv_cache_write_args cache_write_fp8() {
    fj_kv_cache_write_args w = cache_write();
    w.dtype = FJ_DTYPE_BF16;
    w.cache_dtype = FJ_DTYPE_FP8_E4M3;
    w.k_scale = batch.k_scale.get();
    w.v_scale = batch.v_scale.get();
    w.kv_scale_stride = 1;
    return w;
  }

  fj_merge_states_args merge() {
    fj_merge_states_args m{};
    m.struct_size = sizeof(m);
    m.dtype = FJ_DTYPE_BF16;
    m.out_a = m.out_b = q;
    m.out = out;
    m.lse_a = m.lse_b = lse;
    m.num_tokens = 4;
    m.num_heads = 8;
    m.head_dim = 128;
    m.out_a_stride_token = m.out_b_stride_token = m.out_stride_token = 8 * 128;
    m.out_a_stride_head = m.out_b_stride_head = m.out_stride_head = 128;
    m.lse_a_stride_token = m.lse_b_stride_token = 8;
    m.device = FJ_DEVICE_CPU;
    return m;
  }

  // Two states of q's shape, stacked in q's buffer (2 tokens each), their LSEs in lse's.
  fj_merge_states_n_args merge_n() {
    fj_merge_states_n_args m{};
    m.struct_size = sizeof(m);
    m.dtype = FJ_DTYPE_BF16;
    m.device = FJ_DEVICE_CPU;
    m.num_states = 2;
    m.states_out = q;
    m.states_lse = lse;
    m.out = out;
    m.num_tokens = 2;
    m.num_heads = 8;
    m.head_dim = 128;
    m.out_stride_state = 2 * 8 * 128;
    m.out_stride_token = m.merged_stride_token = 8 * 128;
    m.out_stride_head = m.merged_stride_head = 128;
    m.lse_stride_state = 2 * 8;
    m.lse_stride_token = m.merged_lse_stride_token = 8;
    return m;
  }
};

// One call of the table: what it does (on a fresh fixture), the status it must return, and
// whether a context exists to hold the message (calls on a null handle have none).
struct Row {
  const char* what;
  std::function<fj_status(Fixture&)> call;
  fj_status want;
  bool has_context = true;
};

struct Outcome {
  bool exited = false;  // the child returned; otherwise it crashed, hung or exited early
  std::string detail;   // how the child ended, when it did not return
  int status = -1;
  std::string message;
};

// Runs `row` in a child process with a 60 s alarm.
Outcome run_in_child(const Row& row) {
  int channel[2];
  REQUIRE(::pipe(channel) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(channel[0]);
    ::alarm(60);
    Fixture fixture;
    const fj_status status = row.call(fixture);
    const std::string report =
        std::to_string(static_cast<int>(status)) + "\n" + fj_context_last_error(fixture.context);
    const ssize_t written = ::write(channel[1], report.data(), report.size());
    ::_exit(written == static_cast<ssize_t>(report.size()) ? 0 : 3);
  }
  ::close(channel[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t got; (got = ::read(channel[0], buffer, sizeof(buffer))) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    report.append(buffer, static_cast<size_t>(got));
  }
  ::close(channel[0]);
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  Outcome outcome;
  if (WIFSIGNALED(wait_status)) {
    outcome.detail = "killed by signal " + std::to_string(WTERMSIG(wait_status));
    return outcome;
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    outcome.detail = "exited with " + std::to_string(WEXITSTATUS(wait_status));
    return outcome;
  }
  const size_t newline = report.find('\n');
  REQUIRE(newline != std::string::npos);
  outcome.exited = true;
  outcome.status = std::stoi(report.substr(0, newline));
  outcome.message = report.substr(newline + 1);
  return outcome;
}

std::vector<Row> table() {
  using F = Fixture;
  const fj_status kInvalid = FJ_ERROR_INVALID_ARGUMENT;
  const fj_status kUnsupported = FJ_ERROR_UNSUPPORTED;
  const fj_status kNotFound = FJ_ERROR_NOT_FOUND;
  std::vector<Row> rows = {
      // Contexts and programs.
      {"fj_context_create(null)", [](F&) { return fj_context_create(nullptr); }, kInvalid, false},
      {"fj_program_create, null context",
       [](F&) {
         fj_program* p = nullptr;
         return fj_program_create(nullptr, "x", "mask m = true", 13, &p);
       },
       kInvalid, false},
      {"fj_program_create, null source with a length",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create(f.context, "x", nullptr, 5, &p);
       },
       kInvalid},
      {"fj_program_create, null out",
       [](F& f) { return fj_program_create(f.context, "x", "mask m = true", 13, nullptr); },
       kInvalid},
      {"fj_program_create, a source of control bytes",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create(f.context, "x", "mask m = \x1b[2J\0q", 15, &p);
       },
       FJ_ERROR_INVALID_SOURCE},
      {"fj_program_create_from_file, null path",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create_from_file(f.context, nullptr, &p);
       },
       kInvalid},
      {"fj_program_create_from_file, a directory",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create_from_file(f.context, "/tmp", &p);
       },
       kNotFound},
      {"fj_program_create_from_file, an unreadable file",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create_from_file(f.context, "/proc/self/mem", &p);
       },
       kNotFound},
      {"fj_program_create_from_file, a device without end",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create_from_file(f.context, "/dev/zero", &p);
       },
       kNotFound},
      {"fj_program_create_from_file, missing",
       [](F& f) {
         fj_program* p = nullptr;
         return fj_program_create_from_file(f.context, "/nonexistent/x.mask", &p);
       },
       kNotFound},
      // Parameters.
      {"fj_program_param_slot, null program",
       [](F&) {
         int32_t slot = 0;
         return fj_program_param_slot(nullptr, "window", &slot);
       },
       kInvalid, false},
      {"fj_program_param_slot, null name",
       [](F& f) {
         int32_t slot = 0;
         return fj_program_param_slot(f.program, nullptr, &slot);
       },
       kInvalid},
      {"fj_program_param_slot, null slot",
       [](F& f) { return fj_program_param_slot(f.program, "window", nullptr); }, kInvalid},
      {"fj_program_param_slot, an array's name",
       [](F& f) {
         int32_t slot = 0;
         return fj_program_param_slot(f.program, "doc", &slot);
       },
       kNotFound},
      {"fj_program_param_count, null program",
       [](F&) {
         int32_t count = 0;
         return fj_program_param_count(nullptr, &count);
       },
       kInvalid, false},
      {"fj_program_param_count, null count",
       [](F& f) { return fj_program_param_count(f.program, nullptr); }, kInvalid},
      {"fj_program_array_count, null program",
       [](F&) {
         int32_t count = 0;
         return fj_program_array_count(nullptr, &count);
       },
       kInvalid, false},
      {"fj_program_array_count, null count",
       [](F& f) { return fj_program_array_count(f.program, nullptr); }, kInvalid},
      {"fj_program_param_info, null info",
       [](F& f) { return fj_program_param_info(f.program, "window", nullptr); }, kInvalid},
      {"fj_program_param_info, struct_size 0",
       [](F& f) {
         fj_param_info info{};
         return fj_program_param_info(f.program, "window", &info);
       },
       kInvalid},
      {"fj_program_param_info, null name",
       [](F& f) {
         fj_param_info info{};
         info.struct_size = sizeof(info);
         return fj_program_param_info(f.program, nullptr, &info);
       },
       kInvalid},
      {"fj_program_param_info, unknown",
       [](F& f) {
         fj_param_info info{};
         info.struct_size = sizeof(info);
         return fj_program_param_info(f.program, "nope", &info);
       },
       kNotFound},
      // Kernels.
      {"fj_kernel_create, null context",
       [](F& f) {
         fj_kernel_desc desc = Fixture::kernel_desc("causal", 16);
         fj_kernel* k = nullptr;
         return fj_kernel_create(nullptr, f.program, &desc, &k);
       },
       kInvalid, false},
      {"fj_kernel_create, null program",
       [](F& f) {
         fj_kernel_desc desc = Fixture::kernel_desc("causal", 16);
         fj_kernel* k = nullptr;
         return fj_kernel_create(f.context, nullptr, &desc, &k);
       },
       kInvalid},
      {"fj_kernel_create, null desc",
       [](F& f) {
         fj_kernel* k = nullptr;
         return fj_kernel_create(f.context, f.program, nullptr, &k);
       },
       kInvalid},
      {"fj_kernel_create, null out",
       [](F& f) {
         fj_kernel_desc desc = Fixture::kernel_desc("causal", 16);
         return fj_kernel_create(f.context, f.program, &desc, nullptr);
       },
       kInvalid},
      {"fj_kernel_create, struct_size 0",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.struct_size = 0; }); }, kInvalid},
      {"fj_kernel_create, null mask",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.mask = nullptr; }); }, kInvalid},
      {"fj_kernel_create, unknown mask",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.mask = "nope"; }); }, kNotFound},
      {"fj_kernel_create, head_dim 72",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.head_dim = 72; }); }, kUnsupported},
      {"fj_kernel_create, head_dim -128",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.head_dim = -128; }); }, kUnsupported},
      {"fj_kernel_create, dtype 7",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.dtype = static_cast<fj_dtype>(7); }); },
       kUnsupported},
      {"fj_kernel_create, page_size -16",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.page_size = -16; }); }, kUnsupported},
      {"fj_kernel_create, page_size 2048",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.page_size = 2048; }); }, kUnsupported},
      {"fj_kernel_create, kv_dtype 7",
       [](F& f) {
         return f.create([](fj_kernel_desc& d) { d.kv_dtype = static_cast<fj_dtype>(7); });
       },
       kUnsupported},
      {"fj_kernel_create, kv_dtype -1",
       [](F& f) {
         return f.create([](fj_kernel_desc& d) { d.kv_dtype = static_cast<fj_dtype>(-1); });
       },
       kUnsupported},
      {"fj_kernel_create, an fp16 cache for bf16 queries",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.kv_dtype = FJ_DTYPE_FP16; }); },
       kUnsupported},
      {"fj_kernel_create, an fp8 cache with page_size 0",
       [](F& f) {
         return f.create([](fj_kernel_desc& d) {
           d.mask = "sliding_sym";
           d.page_size = 0;
           d.kv_dtype = FJ_DTYPE_FP8_E4M3;
         });
       },
       kUnsupported},
      {"fj_kernel_create, null defines",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.num_defines = 3; }); }, kInvalid},
      {"fj_kernel_create, a define with a null value",
       [](F& f) {
         static const fj_define define = {"chunk", nullptr};
         return f.create([](fj_kernel_desc& d) {
           d.defines = &define;
           d.num_defines = 1;
         });
       },
       kInvalid},
      {"fj_kernel_create, a define of no const",
       [](F& f) {
         static const fj_define define = {"nope", "1"};
         return f.create([](fj_kernel_desc& d) {
           d.defines = &define;
           d.num_defines = 1;
         });
       },
       kNotFound},
      {"fj_kernel_create, a define that divides by zero",
       [](F& f) {
         static const fj_define define = {"chunk", "0"};
         return f.create([](fj_kernel_desc& d) {
           d.mask = "chunked";
           d.defines = &define;
           d.num_defines = 1;
         });
       },
       kNotFound},
      {"fj_kernel_create, a score with a variant",
       [](F& f) {
         return f.create([](fj_kernel_desc& d) {
           d.mask = "gemma2_local";
           d.score = "softcap";
         });
       },
       kNotFound},
      {"fj_kernel_create, a score with a control byte",
       [](F& f) { return f.create([](fj_kernel_desc& d) { d.score = "soft\x1b"; }); }, kInvalid},
  };
  // Architectures: none reaches NVRTC.
  for (const char* arch : {"banana", "sm_70", "sm_75", "sm_", "sm_80b", "sm_9999999999", "",
                           "sm_90a\x1b[2J", "compute_90"}) {
    rows.push_back({"fj_kernel_create, arch",
                    [arch](F& f) { return f.create([arch](fj_kernel_desc& d) { d.arch = arch; }); },
                    kUnsupported});
  }
  const std::vector<Row> more = {
      {"fj_kernel_name, null kernel",
       [](F&) {
         const char* name = nullptr;
         return fj_kernel_name(nullptr, &name);
       },
       kInvalid, false},
      {"fj_kernel_name, null name", [](F& f) { return fj_kernel_name(f.paged, nullptr); },
       kInvalid},
      {"fj_attention_workspace_size, null kernel",
       [](F&) {
         uint64_t bytes = 0;
         return fj_attention_workspace_size(nullptr, nullptr, 0, &bytes);
       },
       kInvalid, false},
      {"fj_attention_workspace_size, null bytes",
       [](F& f) { return fj_attention_workspace_size(f.paged, nullptr, 0, nullptr); }, kInvalid},
      {"fj_attention_workspace_size, array count",
       [](F& f) {
         uint64_t bytes = 0;
         return fj_attention_workspace_size(f.paged, nullptr, 5, &bytes);
       },
       kInvalid},
      // Paged attention.
      {"fj_paged_attention, null kernel",
       [](F& f) { return fj_paged_attention(nullptr, &f.args, nullptr); }, kInvalid, false},
      {"fj_paged_attention, null args",
       [](F& f) { return fj_paged_attention(f.paged, nullptr, nullptr); }, kInvalid},
      {"fj_paged_attention, an encoder kernel",
       [](F& f) { return fj_paged_attention(f.encoder, &f.args, nullptr); }, kInvalid},
      {"fj_paged_attention, struct_size 8",
       [](F& f) { return f.paged_call([](F& g) { g.args.struct_size = 8; }); }, kInvalid},
      {"fj_paged_attention, num_tokens -1",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_tokens = -1; }); }, kInvalid},
      // Context parallelism (0.9): a shard's layout.
      {"fj_paged_attention, kv_shard_rank past kv_shard_count",
       [](F& f) {
         return f.paged_call([](F& g) {
           g.args.kv_shard_count = 2;
           g.args.kv_shard_rank = 2;
         });
       },
       kInvalid},
      {"fj_paged_attention, sharded without global_seq_lens",
       [](F& f) { return f.paged_call([](F& g) { g.args.kv_shard_count = 2; }); }, kInvalid},
      {"fj_paged_attention, a shard's keys past the request's length",
       [](F& f) {
         return f.paged_call([](F& g) {
           static const int32_t global = 20;  // rank 1 of 2 puts 20 keys up to position 39
           g.args.global_seq_lens = &global;
           g.args.kv_shard_count = 2;
           g.args.kv_shard_rank = 1;
         });
       },
       kInvalid},
      {"fj_paged_attention, a shard offset at INT32_MAX",
       [](F& f) {
         return f.paged_call([](F& g) {
           static const int32_t global = 100, offset = 0x7fffffff;
           g.args.global_seq_lens = &global;
           g.args.kv_shard_offsets = &offset;
         });
       },
       kInvalid},
      {"fj_paged_attention, max_query_len 0 with rows",
       [](F& f) { return f.paged_call([](F& g) { g.args.max_query_len = 0; }); }, kInvalid},
      {"fj_paged_attention, max_query_len too small",
       [](F& f) { return f.paged_call([](F& g) { g.args.max_query_len = 1; }); }, kInvalid},
      {"fj_paged_attention, max_query_len past num_tokens",
       [](F& f) { return f.paged_call([](F& g) { g.args.max_query_len = 5; }); }, kInvalid},
      {"fj_paged_attention, num_heads 0",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_heads = 0; }); }, kInvalid},
      {"fj_paged_attention, num_kv_heads 3",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_kv_heads = 3; }); }, kInvalid},
      {"fj_paged_attention, num_reqs INT_MAX",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_reqs = INT_MAX; }); }, kUnsupported},
      {"fj_paged_attention, null q",
       [](F& f) { return f.paged_call([](F& g) { g.args.q = nullptr; }); }, kInvalid},
      {"fj_paged_attention, misaligned out",
       [](F& f) { return f.paged_call([](F& g) { g.args.out = g.out + 1; }); }, kInvalid},
      {"fj_paged_attention, stride 100",
       [](F& f) { return f.paged_call([](F& g) { g.args.q_stride_head = 100; }); }, kInvalid},
      {"fj_paged_attention, num_params 0",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_params = 0; }); }, kInvalid},
      {"fj_paged_attention, null params",
       [](F& f) { return f.paged_call([](F& g) { g.args.params = nullptr; }); }, kInvalid},
      {"fj_paged_attention, lse stride",
       [](F& f) { return f.paged_call([](F& g) { g.args.lse_stride_token = 1; }); }, kInvalid},
      {"fj_paged_attention, block_table_stride",
       [](F& f) { return f.paged_call([](F& g) { g.args.block_table_stride = 1; }); }, kInvalid},
      {"fj_paged_attention, a block id past the cache",
       [](F& f) { return f.paged_call([](F& g) { g.table[1] = 1000000; }); }, kInvalid},
      {"fj_paged_attention, block id INT_MAX",
       [](F& f) { return f.paged_call([](F& g) { g.table[0] = INT_MAX; }); }, kInvalid},
      {"fj_paged_attention, block id 3 of 3",
       [](F& f) { return f.paged_call([](F& g) { g.table[0] = 3; }); }, kInvalid},
      {"fj_paged_attention, a negative block id",
       [](F& f) { return f.paged_call([](F& g) { g.table[1] = -1; }); }, kInvalid},
      {"fj_paged_attention, num_blocks -1",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_blocks = -1; }); }, kInvalid},
      {"fj_paged_attention, a decreasing query_start_loc",
       [](F& f) { return f.paged_call([](F& g) { g.qsl[1] = -2; }); }, kInvalid},
      {"fj_paged_attention, seq_len shorter than the query",
       [](F& f) { return f.paged_call([](F& g) { g.seq_lens[0] = 2; }); }, kInvalid},
      {"fj_paged_attention, a misaligned workspace",
       [](F& f) {
         return f.paged_call([](F& g) {
           g.args.workspace = g.cache + 1;
           g.args.workspace_bytes = 64;
         });
       },
       kInvalid},
      {"fj_paged_attention, a null workspace with a size",
       [](F& f) { return f.paged_call([](F& g) { g.args.workspace_bytes = 64; }); }, kInvalid},
      {"fj_paged_attention, misaligned bad_index",
       [](F& f) {
         return f.paged_call([](F& g) {
           g.args.bad_index = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(g.q) + 2);
         });
       },
       kInvalid},
      {"fj_paged_attention, an array count",
       [](F& f) { return f.paged_call([](F& g) { g.args.num_arrays = 2; }); }, kInvalid},
      // An fp8 cache's scales and byte strides (0.8).
      {"fj_paged_attention, an fp8 cache without k_scale",
       [](F& f) { return f.fp8_call([](F& g) { g.args.k_scale = nullptr; }); }, kInvalid},
      {"fj_paged_attention, an fp8 cache without v_scale",
       [](F& f) { return f.fp8_call([](F& g) { g.args.v_scale = nullptr; }); }, kInvalid},
      {"fj_paged_attention, an fp8 cache called with a 0.7 struct (no scales)",
       [](F& f) {
         return f.fp8_call(
             [](F& g) { g.args.struct_size = offsetof(fj_paged_attention_args, k_scale); });
       },
       kInvalid},
      {"fj_paged_attention, a negative kv_scale_stride",
       [](F& f) { return f.fp8_call([](F& g) { g.args.kv_scale_stride = -1; }); }, kInvalid},
      {"fj_paged_attention, a misaligned k_scale",
       [](F& f) {
         return f.fp8_call([](F& g) {
           g.args.k_scale = reinterpret_cast<const float*>(
               reinterpret_cast<const char*>(g.batch.k_scale.get()) + 2);
         });
       },
       kInvalid},
      {"fj_paged_attention, an fp8 k_stride_slot of 264 bytes",
       [](F& f) { return f.fp8_call([](F& g) { g.args.k_stride_slot = 264; }); }, kInvalid},
      {"fj_paged_attention, an fp8 v_stride_head of 8 bytes",
       [](F& f) { return f.fp8_call([](F& g) { g.args.v_stride_head = 8; }); }, kInvalid},
      {"fj_paged_attention, scales for a 16-bit cache",
       [](F& f) {
         return f.paged_call([](F& g) {
           g.args.k_scale = g.batch.k_scale.get();
           g.args.v_scale = g.batch.v_scale.get();
         });
       },
       kInvalid},
      {"fj_paged_attention, a v_scale alone for a 16-bit cache",
       [](F& f) { return f.paged_call([](F& g) { g.args.v_scale = g.batch.v_scale.get(); }); },
       kInvalid},
      // Encoder attention.
      {"fj_varlen_attention, null kernel",
       [](F& f) {
         const fj_varlen_attention_args v = f.varlen();
         return fj_varlen_attention(nullptr, &v, nullptr);
       },
       kInvalid, false},
      {"fj_varlen_attention, null args",
       [](F& f) { return fj_varlen_attention(f.encoder, nullptr, nullptr); }, kInvalid},
      {"fj_varlen_attention, a paged kernel",
       [](F& f) {
         const fj_varlen_attention_args v = f.varlen();
         return fj_varlen_attention(f.paged, &v, nullptr);
       },
       kInvalid},
      {"fj_varlen_attention, max_seq_len 0 with rows",
       [](F& f) {
         fj_varlen_attention_args v = f.varlen();
         v.max_seq_len = 0;
         return fj_varlen_attention(f.encoder, &v, nullptr);
       },
       kInvalid},
      {"fj_varlen_attention, null cu_seqlens",
       [](F& f) {
         fj_varlen_attention_args v = f.varlen();
         v.cu_seqlens = nullptr;
         return fj_varlen_attention(f.encoder, &v, nullptr);
       },
       kInvalid},
      {"fj_varlen_attention, num_seqs -3",
       [](F& f) {
         fj_varlen_attention_args v = f.varlen();
         v.num_seqs = -3;
         return fj_varlen_attention(f.encoder, &v, nullptr);
       },
       kInvalid},
      // Cache writes and merges.
      {"fj_kv_cache_write, null context",
       [](F& f) {
         const fj_kv_cache_write_args w = f.cache_write();
         return fj_kv_cache_write(nullptr, &w, nullptr);
       },
       kInvalid, false},
      {"fj_kv_cache_write, null args",
       [](F& f) { return fj_kv_cache_write(f.context, nullptr, nullptr); }, kInvalid},
      {"fj_kv_cache_write, device 7",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write();
         w.device = static_cast<fj_device>(7);
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, page_size 0",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write();
         w.page_size = 0;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, num_blocks * page_size overflows",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write();
         w.num_blocks = INT64_MAX / 2;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, null slot_mapping",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write();
         w.slot_mapping = nullptr;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, cache_dtype 7",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.cache_dtype = static_cast<fj_dtype>(7);
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, an fp8 cache without k_scale",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.k_scale = nullptr;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, an fp8 cache from inputs of dtype 0",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.dtype = fj_dtype{};
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, an fp8 cache from fp8 inputs",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.dtype = FJ_DTYPE_FP8_E4M3;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, a negative kv_scale_stride",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.kv_scale_stride = -4;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, an fp8 k_stride_slot of 264 bytes",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.k_stride_slot = 264;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, scales for a 16-bit copy",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write_fp8();
         w.cache_dtype = fj_dtype{};
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       kInvalid},
      {"fj_kv_cache_write, on CUDA without a driver",
       [](F& f) {
         fj_kv_cache_write_args w = f.cache_write();
         w.device = FJ_DEVICE_CUDA;
         return fj_kv_cache_write(f.context, &w, nullptr);
       },
       FJ_ERROR_CUDA},
      {"fj_merge_states, null context",
       [](F& f) {
         const fj_merge_states_args m = f.merge();
         return fj_merge_states(nullptr, &m, nullptr);
       },
       kInvalid, false},
      {"fj_merge_states, null args",
       [](F& f) { return fj_merge_states(f.context, nullptr, nullptr); }, kInvalid},
      {"fj_merge_states, dtype 9",
       [](F& f) {
         fj_merge_states_args m = f.merge();
         m.dtype = static_cast<fj_dtype>(9);
         return fj_merge_states(f.context, &m, nullptr);
       },
       kUnsupported},
      {"fj_merge_states, head_dim 0",
       [](F& f) {
         fj_merge_states_args m = f.merge();
         m.head_dim = 0;
         return fj_merge_states(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states, lse aliases lse_a",
       [](F& f) {
         fj_merge_states_args m = f.merge();
         m.lse = const_cast<float*>(m.lse_a);
         m.lse_stride_token = 8;
         return fj_merge_states(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states, lse_a stride",
       [](F& f) {
         fj_merge_states_args m = f.merge();
         m.lse_a_stride_token = 1;
         return fj_merge_states(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states_n, null context",
       [](F& f) {
         const fj_merge_states_n_args m = f.merge_n();
         return fj_merge_states_n(nullptr, &m, nullptr);
       },
       kInvalid, false},
      {"fj_merge_states_n, null args",
       [](F& f) { return fj_merge_states_n(f.context, nullptr, nullptr); }, kInvalid},
      {"fj_merge_states_n, num_states -3",
       [](F& f) {
         fj_merge_states_n_args m = f.merge_n();
         m.num_states = -3;
         return fj_merge_states_n(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states_n, null out",
       [](F& f) {
         fj_merge_states_n_args m = f.merge_n();
         m.out = nullptr;
         return fj_merge_states_n(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states_n, negative state stride",
       [](F& f) {
         fj_merge_states_n_args m = f.merge_n();
         m.out_stride_state = -8;
         return fj_merge_states_n(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states_n, lse inside states_lse",
       [](F& f) {
         fj_merge_states_n_args m = f.merge_n();
         m.lse = f.lse + 8;
         return fj_merge_states_n(f.context, &m, nullptr);
       },
       kInvalid},
      {"fj_merge_states_n, on CUDA above head dim 256",
       [](F& f) {
         fj_merge_states_n_args m = f.merge_n();
         m.device = FJ_DEVICE_CUDA;
         m.head_dim = 264;
         m.out_stride_state = 2 * 8 * 264;
         m.out_stride_token = m.merged_stride_token = 8 * 264;
         m.out_stride_head = m.merged_stride_head = 264;
         return fj_merge_states_n(f.context, &m, nullptr);
       },
       kUnsupported},
      // Precompiling.
      {"fj_precompile, null context",
       [](F& f) { return fj_precompile(nullptr, f.program, nullptr, 0, nullptr, nullptr); },
       kInvalid, false},
      {"fj_precompile, null program",
       [](F& f) { return fj_precompile(f.context, nullptr, nullptr, 0, nullptr, nullptr); },
       kInvalid},
      {"fj_precompile, null descs with a count",
       [](F& f) { return fj_precompile(f.context, f.program, nullptr, 3, nullptr, nullptr); },
       kInvalid},
      {"fj_precompile, options struct_size 0",
       [](F& f) {
         fj_precompile_options options{};
         return fj_precompile(f.context, f.program, nullptr, 0, &options, nullptr);
       },
       kInvalid},
      {"fj_precompile, negative threads",
       [](F& f) {
         fj_precompile_options options{};
         options.struct_size = sizeof(options);
         options.num_threads = -1;
         return fj_precompile(f.context, f.program, nullptr, 0, &options, nullptr);
       },
       kInvalid},
      {"fj_precompile, an unsupported description",
       [](F& f) {
         fj_kernel_desc desc = Fixture::kernel_desc("causal", 16);
         desc.arch = "sm_75";
         fj_status status = FJ_SUCCESS;
         return fj_precompile(f.context, f.program, &desc, 1, nullptr, &status);
       },
       kUnsupported},
      // Plans (CUDA only; none can be made here, so only their argument checks run).
      {"fj_plan_create, null kernel",
       [](F&) {
         fj_plan_shape shape{};
         fj_plan* plan = nullptr;
         return fj_plan_create(nullptr, &shape, &plan);
       },
       kInvalid, false},
      {"fj_plan_create, null shape",
       [](F& f) {
         fj_plan* plan = nullptr;
         return fj_plan_create(f.paged, nullptr, &plan);
       },
       kInvalid},
      {"fj_plan_create, a CPU kernel",
       [](F& f) {
         fj_plan_shape shape{};
         shape.struct_size = sizeof(shape);
         shape.max_num_reqs = shape.max_num_tokens = shape.max_query_len = 4;
         shape.num_heads = 8;
         shape.num_kv_heads = 2;
         fj_plan* plan = nullptr;
         return fj_plan_create(f.paged, &shape, &plan);
       },
       kInvalid},
      {"fj_plan_update, null plan",
       [](F& f) { return fj_plan_update(nullptr, f.qsl, f.seq_lens, 1, 2, nullptr); }, kInvalid,
       false},
      {"fj_plan_run, null plan", [](F& f) { return fj_plan_run(nullptr, &f.args, nullptr); },
       kInvalid, false},
  };
  rows.insert(rows.end(), more.begin(), more.end());
  return rows;
}

}  // namespace

TEST_CASE("every entry point rejects null and invalid arguments with a status and a message",
          "[capi_args]") {
  for (const Row& row : table()) {
    INFO(row.what);
    const Outcome outcome = run_in_child(row);
    INFO(outcome.detail);
    REQUIRE(outcome.exited);
    CHECK(outcome.status == static_cast<int>(row.want));
    INFO("message: " << outcome.message);
    if (row.has_context) CHECK_FALSE(outcome.message.empty());
    // Messages echo what they were given, but never a terminal's control bytes.
    CHECK(outcome.message.find('\x1b') == std::string::npos);
  }
}

// The fp8 rows above fail for their edits alone: the calls they edit succeed.
TEST_CASE("the fp8 calls the table edits are valid", "[capi_args]") {
  Fixture fixture;
  REQUIRE(fixture.paged_fp8 != nullptr);
  const fj_status attention = fixture.fp8_call([](Fixture&) {});
  INFO("fj_paged_attention: " << fj_context_last_error(fixture.context));
  CHECK(attention == FJ_SUCCESS);
  const fj_kv_cache_write_args args = fixture.cache_write_fp8();
  const fj_status write = fj_kv_cache_write(fixture.context, &args, nullptr);
  INFO("fj_kv_cache_write: " << fj_context_last_error(fixture.context));
  CHECK(write == FJ_SUCCESS);
  for (fj_kernel* kernel : {fixture.paged, fixture.paged_fp8, fixture.encoder})
    fj_kernel_destroy(kernel);
  fj_program_destroy(fixture.program);
  fj_context_destroy(fixture.context);
}

TEST_CASE("calls without a status to return degrade to a message", "[capi_args]") {
  CHECK(std::string(fj_context_last_error(nullptr)) == "context is null");
  CHECK(std::string(fj_status_string(static_cast<fj_status>(99))) == "unknown fj_status value");
  CHECK(fj_context_destroy(nullptr) == FJ_SUCCESS);
  CHECK(fj_program_destroy(nullptr) == FJ_SUCCESS);
  CHECK(fj_kernel_destroy(nullptr) == FJ_SUCCESS);
  CHECK(fj_plan_destroy(nullptr) == FJ_SUCCESS);
  CHECK(fj_runtime_version() == FJ_VERSION);
}
