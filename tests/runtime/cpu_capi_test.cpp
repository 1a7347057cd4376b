// The C API's CPU device (arch "cpu", FJ_DEVICE_CPU): kernel names, the checks a CPU launch
// shares with the GPU path and those only the host can make, an fp8 cache's scales, and
// fj_kv_cache_write (16-bit and fp8) and fj_merge_states on host memory against a float64
// computation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "check/check_support.h"
#include "check/ops_check.h"
#include "cpu_paged_batch.h"
#include "flexjit/flexjit.h"
#include "merge_states_check.h"

namespace {

struct Context {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  Context() {
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    REQUIRE(fj_program_create_from_file(context, FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask",
                                        &program) == FJ_SUCCESS);
  }
  ~Context() {
    fj_program_destroy(program);
    fj_context_destroy(context);
  }
  std::string error() const { return fj_context_last_error(context); }
};

fj_kernel* cpu_kernel(const Context& c, const char* mask, int page_size,
                      fj_dtype kv_dtype = fj_dtype{}) {
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = mask;
  desc.head_dim = 128;
  desc.dtype = FJ_DTYPE_BF16;
  desc.page_size = page_size;
  desc.arch = "cpu";
  desc.kv_dtype = kv_dtype;
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(c.context, c.program, &desc, &kernel) == FJ_SUCCESS);
  return kernel;
}

}  // namespace

TEST_CASE("CPU kernels are named after the device and need no CUDA", "[cpu]") {
  Context c;
  fj_kernel* paged = cpu_kernel(c, "sliding", 16);
  fj_kernel* encoder = cpu_kernel(c, "sliding_sym", 0);
  const char* name = nullptr;
  REQUIRE(fj_kernel_name(paged, &name) == FJ_SUCCESS);
  CHECK(std::string(name) == "cpu_prefill_sliding_hd128_bf16_page16");
  REQUIRE(fj_kernel_name(encoder, &name) == FJ_SUCCESS);
  CHECK(std::string(name) == "cpu_encoder_sliding_sym_hd128_bf16");
  // An fp8 cache is named after q's dtype; a kv_dtype equal to the dtype is the 16-bit kernel.
  fj_kernel* fp8 = cpu_kernel(c, "sliding", 16, FJ_DTYPE_FP8_E4M3);
  REQUIRE(fj_kernel_name(fp8, &name) == FJ_SUCCESS);
  CHECK(std::string(name) == "cpu_prefill_sliding_hd128_bf16_kvfp8_page16");
  fj_kernel* same = cpu_kernel(c, "sliding", 16, FJ_DTYPE_BF16);
  REQUIRE(fj_kernel_name(same, &name) == FJ_SUCCESS);
  CHECK(std::string(name) == "cpu_prefill_sliding_hd128_bf16_page16");
  fj_kernel_destroy(fp8);
  fj_kernel_destroy(same);
  // The encoder and paged entry points are not interchangeable.
  fj_varlen_attention_args varlen{};
  varlen.struct_size = sizeof(varlen);
  CHECK(fj_varlen_attention(paged, &varlen, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  PagedBatch batch;
  CHECK(fj_paged_attention(encoder, &batch.args, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  fj_kernel_destroy(paged);
  fj_kernel_destroy(encoder);
}

TEST_CASE("a CPU launch computes on host memory, ignoring the stream", "[cpu]") {
  Context c;
  fj_kernel* kernel = cpu_kernel(c, "sliding", 16);
  PagedBatch batch;
  // Any stream value: it is not used.
  REQUIRE(fj_paged_attention(kernel, &batch.args, reinterpret_cast<void*>(0x1234)) == FJ_SUCCESS);
  // Every key has the same K, so the softmax is uniform over the window's 8 keys; every V is 1.
  for (int i = 0; i < 4 * 8 * 128; ++i)
    REQUIRE(batch.out.get()[i] == 0x3f80);
  const float want_lse = 0.5f * 128 / std::sqrt(128.0f) + std::log(8.0f);
  for (int i = 0; i < 4 * 8; ++i)
    CHECK(batch.lse.get()[i] == Approx(want_lse).epsilon(1e-5));
  fj_kernel_destroy(kernel);
}

TEST_CASE("a CPU launch over an fp8 cache scales each kv head's values", "[cpu][fp8]") {
  Context c;
  fj_kernel* kernel = cpu_kernel(c, "sliding", 16, FJ_DTYPE_FP8_E4M3);
  // Every key has the same K (0.5 times k_scale), so the softmax is uniform over the window's 8
  // keys and out is V (1.0 times v_scale) of the head's kv head: heads 0-3 read kv head 0.
  const auto run = [&](float k0, float k1, float v0, float v1, int32_t stride) {
    PagedBatch batch;
    batch.use_fp8_cache();
    batch.k_scale.get()[0] = k0;
    batch.k_scale.get()[1] = k1;
    batch.v_scale.get()[0] = v0;
    batch.v_scale.get()[1] = v1;
    batch.args.kv_scale_stride = stride;
    REQUIRE(fj_paged_attention(kernel, &batch.args, nullptr) == FJ_SUCCESS);
    return batch;
  };
  const auto expect = [](const PagedBatch& batch, int head, uint16_t out, float k_scale) {
    INFO("head " << head);
    for (int token = 0; token < 4; ++token) {
      for (int d = 0; d < 128; ++d)
        REQUIRE(batch.out.get()[(token * 8 + head) * 128 + d] == out);
      const float want_lse = k_scale * 0.5f * 128 / std::sqrt(128.0f) + std::log(8.0f);
      CHECK(batch.lse.get()[token * 8 + head] == Approx(want_lse).epsilon(1e-5));
    }
  };
  const PagedBatch unit = run(1.0f, 1.0f, 1.0f, 1.0f, 1);
  for (int head = 0; head < 8; ++head)
    expect(unit, head, 0x3f80, 1.0f);  // as the 16-bit cache of the same values
  const PagedBatch per_head = run(1.0f, 4.0f, 2.0f, 0.25f, 1);
  for (int head = 0; head < 8; ++head) {
    if (head < 4) {
      expect(per_head, head, 0x4000, 1.0f);  // 2.0
    } else {
      expect(per_head, head, 0x3e80, 4.0f);  // 0.25
    }
  }
  const PagedBatch per_tensor = run(4.0f, 1.0f, 2.0f, 0.25f, 0);  // element 0 for every head
  for (int head = 0; head < 8; ++head)
    expect(per_tensor, head, 0x4000, 4.0f);
  fj_kernel_destroy(kernel);
}

TEST_CASE("CPU launches reject bad arguments with a status", "[cpu]") {
  Context c;
  fj_kernel* kernel = cpu_kernel(c, "sliding", 16);
  const auto status_of = [&](auto&& edit) {
    PagedBatch batch;
    edit(batch);
    return fj_paged_attention(kernel, &batch.args, nullptr);
  };
  // The GPU path's checks.
  CHECK(status_of([](PagedBatch& b) { b.args.q = nullptr; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "q is null");
  CHECK(status_of([](PagedBatch& b) { b.args.block_table = nullptr; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.q_stride_head = 100; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find("q_stride_head (100) must be a non-negative multiple of 8") == 0);
  CHECK(status_of([](PagedBatch& b) { b.args.k_stride_slot = -256; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.out = static_cast<char*>(b.args.out) + 2; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.num_kv_heads = 3; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.num_params = 0; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.scale = std::numeric_limits<float>::infinity(); }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.struct_size = 8; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.block_table_stride = 1; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  // What only the host can read.
  CHECK(status_of([](PagedBatch& b) { b.qsl.get()[1] = 5; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() ==
        "query_start_loc[1] (5) is smaller than query_start_loc[0] (0) or past "
        "num_tokens (4)");
  CHECK(status_of([](PagedBatch& b) { b.qsl.get()[0] = -1; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.max_query_len = 3; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "request 0 has 4 query rows, more than max_query_len (3)");
  CHECK(status_of([](PagedBatch& b) { b.seq_lens.get()[0] = 3; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.table.get()[1] = -1; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "block_table[0][1] (-1) is negative");
  // Block ids against the cache's size (since 0.5), and the host's longest query.
  CHECK(status_of([](PagedBatch& b) { b.table.get()[1] = 1000000; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "block_table[0][1] (1000000) is past the cache's 3 blocks (num_blocks)");
  CHECK(status_of([](PagedBatch& b) { b.table.get()[0] = 3; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.num_blocks = -1; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "num_blocks (-1) is negative");
  CHECK(status_of([](PagedBatch& b) { b.args.num_blocks = 0; }) == FJ_SUCCESS);  // unchecked
  // A caller of 0.4 passes a struct without num_blocks: whatever follows it is not read.
  CHECK(status_of([](PagedBatch& b) {
          b.args.num_blocks = 1;
          b.args.struct_size = offsetof(fj_paged_attention_args, num_blocks);
        }) == FJ_SUCCESS);
  CHECK(status_of([](PagedBatch& b) { b.args.num_blocks = 1; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.max_query_len = 0; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() ==
        "max_query_len is 0 but the call has 4 query rows: pass the longest request's query rows");
  // A seq_len beyond the block table reads only the keys the table addresses.
  CHECK(status_of([](PagedBatch& b) { b.seq_lens.get()[0] = 1000; }) == FJ_SUCCESS);
  // Nothing to do.
  CHECK(status_of([](PagedBatch& b) {
          b.args.num_reqs = 0;
          b.args.num_tokens = 0;
          b.args.max_query_len = 0;
        }) == FJ_SUCCESS);
  fj_kernel_destroy(kernel);
}

TEST_CASE("fj_kv_cache_write on the CPU skips padding and out-of-range slots", "[cpu]") {
  Context c;
  const int tokens = 37, heads = 4, dim = 64, page = 16, blocks = 9;
  const int64_t row_stride = heads * dim + 8;  // padded rows exercise the strides
  std::mt19937_64 rng(3);
  Buffer<uint16_t> key(tokens * row_stride), value(tokens * row_stride);
  for (int64_t i = 0; i < tokens * row_stride; ++i) {
    key.get()[i] = static_cast<uint16_t>(rng());
    value.get()[i] = static_cast<uint16_t>(rng());
  }
  const int64_t slots = int64_t{blocks} * page;
  std::vector<int64_t> free_slots(slots);
  std::iota(free_slots.begin(), free_slots.end(), 0);
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  Buffer<int64_t> mapping(tokens);
  for (int t = 0; t < tokens; ++t)
    mapping.get()[t] = t % 5 == 4 ? -1 : t % 7 == 6 ? slots + t : free_slots[t];
  // HND cache.
  const int64_t stride_block = int64_t{page} * heads * dim, stride_head = page * dim;
  const uint16_t poison = 0xabcd;
  Buffer<uint16_t> k_cache(blocks * stride_block, poison), v_cache(blocks * stride_block, poison);
  fj_kv_cache_write_args args{};
  args.struct_size = sizeof(args);
  args.key = key.get();
  args.value = value.get();
  args.k_cache = k_cache.get();
  args.v_cache = v_cache.get();
  args.slot_mapping = mapping.get();
  args.num_tokens = tokens;
  args.num_kv_heads = heads;
  args.head_dim = dim;
  args.page_size = page;
  args.num_blocks = blocks;
  args.key_stride_token = args.value_stride_token = row_stride;
  args.key_stride_head = args.value_stride_head = dim;
  args.k_stride_block = args.v_stride_block = stride_block;
  args.k_stride_slot = args.v_stride_slot = dim;
  args.k_stride_head = args.v_stride_head = stride_head;
  args.device = FJ_DEVICE_CPU;
  REQUIRE(fj_kv_cache_write(c.context, &args, nullptr) == FJ_SUCCESS);

  std::vector<uint16_t> want_k(blocks * stride_block, poison), want_v(want_k.size(), poison);
  int written = 0;
  for (int t = 0; t < tokens; ++t) {
    const int64_t slot = mapping.get()[t];
    if (slot < 0 || slot >= slots) continue;
    ++written;
    for (int h = 0; h < heads; ++h) {
      const int64_t base = (slot / page) * stride_block + (slot % page) * dim + h * stride_head;
      for (int d = 0; d < dim; ++d) {
        want_k[base + d] = key.get()[t * row_stride + h * dim + d];
        want_v[base + d] = value.get()[t * row_stride + h * dim + d];
      }
    }
  }
  CHECK(written > 0);
  CHECK(written < tokens);
  CHECK(std::equal(want_k.begin(), want_k.end(), k_cache.get()));
  CHECK(std::equal(want_v.begin(), want_v.end(), v_cache.get()));

  // A device that is neither value, and a struct older than the oldest known.
  args.device = static_cast<fj_device>(7);
  CHECK(fj_kv_cache_write(c.context, &args, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "device (7) is neither FJ_DEVICE_CUDA nor FJ_DEVICE_CPU");
  args.device = FJ_DEVICE_CPU;
  args.struct_size = 16;
  CHECK(fj_kv_cache_write(c.context, &args, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  args.struct_size = sizeof(args);
  args.head_dim = 60;
  CHECK(fj_kv_cache_write(c.context, &args, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("fj_kv_cache_write on the CPU quantizes into an fp8 cache", "[cpu][fp8]") {
  // Bytes worked out by hand from the e4m3 format: k_scale 0.5, v_scale 4, one kv head of 16.
  Context c;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> inputs = {1.0f, -3.0f, 1000.0f, 0.0f,   -0.0f, 0x1p-12f, nan,  inf,
                                     8.5f, 9.5f,  0.1875f, 224.0f, 0.0f,  0.0f,     0.0f, 0.0f};
  // x / 0.5: 2, -6, 2000 (saturates), 0, -0, 2^-11 (to 0), NaN, inf (saturates), 17 (a tie: 16),
  // 19 (a tie: 20), 0.375, 448.
  const std::vector<uint8_t> want_k = {0x40, 0xcc, 0x7e, 0x00, 0x80, 0x00, 0x7f, 0x7e,
                                       0x58, 0x5a, 0x2c, 0x7e, 0x00, 0x00, 0x00, 0x00};
  // x / 4: 0.25, -0.75, 250 (to 256), 0, -0, 2^-14 (to 0), NaN, inf, 2.125 (a tie: 2), 2.375 (a
  // tie: 2.5), 0.046875 (1.5 * 2^-5), 56.
  const std::vector<uint8_t> want_v = {0x28, 0xb4, 0x78, 0x00, 0x80, 0x00, 0x7f, 0x7e,
                                       0x40, 0x42, 0x14, 0x66, 0x00, 0x00, 0x00, 0x00};
  Buffer<uint16_t> key(16);
  for (int i = 0; i < 16; ++i)
    key.get()[i] = flexjit::to_bits(inputs[i], FJ_DTYPE_BF16);
  Buffer<uint8_t> k_cache(2 * 16 * 16, 0xab), v_cache(2 * 16 * 16, 0xab);
  Buffer<int64_t> mapping(1, 17);  // block 1, slot 1
  Buffer<float> k_scale(1, 0.5f), v_scale(1, 4.0f);
  fj_kv_cache_write_args args{};
  args.struct_size = sizeof(args);
  args.key = args.value = key.get();
  args.k_cache = k_cache.get();
  args.v_cache = v_cache.get();
  args.slot_mapping = mapping.get();
  args.num_tokens = 1;
  args.num_kv_heads = 1;
  args.head_dim = 16;
  args.page_size = 16;
  args.num_blocks = 2;
  args.key_stride_token = args.value_stride_token = 16;
  args.key_stride_head = args.value_stride_head = 16;
  args.k_stride_block = args.v_stride_block = 16 * 16;
  args.k_stride_slot = args.v_stride_slot = 16;
  args.k_stride_head = args.v_stride_head = 16;
  args.device = FJ_DEVICE_CPU;
  args.dtype = FJ_DTYPE_BF16;
  args.cache_dtype = FJ_DTYPE_FP8_E4M3;
  args.k_scale = k_scale.get();
  args.v_scale = v_scale.get();
  REQUIRE(fj_kv_cache_write(c.context, &args, nullptr) == FJ_SUCCESS);
  for (int i = 0; i < 2 * 16 * 16; ++i) {
    INFO("cache byte " << i);
    const bool written = i >= 17 * 16 && i < 18 * 16;
    CHECK(k_cache.get()[i] == (written ? want_k[i - 17 * 16] : 0xab));
    CHECK(v_cache.get()[i] == (written ? want_v[i - 17 * 16] : 0xab));
  }
}

TEST_CASE("fj_kv_cache_write on the CPU matches e4m3_from_float bit for bit", "[cpu][fp8]") {
  Context c;
  flexjit::KvCacheWriteCheckConfig config;
  config.device = FJ_DEVICE_CPU;
  config.fp8 = true;
  config.dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  config.kv_scale = GENERATE(flexjit::KvScale::Tensor, flexjit::KvScale::Head);
  config.layout = GENERATE(flexjit::KvLayout::NHD, flexjit::KvLayout::HND);
  config.head_dim = 64;
  config.num_tokens = 200;
  config.num_blocks = 20;
  auto report = flexjit::run_kv_cache_write_check(c.context, config);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  CHECK(report->written_rows > 0);
  CHECK(report->skipped_tokens > 0);
  CHECK(report->wrong_elements == 0);
  // The 16-bit copy through the same check.
  config.fp8 = false;
  report = flexjit::run_kv_cache_write_check(c.context, config);
  REQUIRE(report.ok());
  CHECK(report->wrong_elements == 0);
}

TEST_CASE("fj_merge_states on the CPU merges by LSE and keeps empty rows empty", "[cpu]") {
  Context c;
  flexjit::MergeStatesCheckConfig config;
  config.device = FJ_DEVICE_CPU;
  config.dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  config.in_place = GENERATE(false, true);
  config.sinks = GENERATE(false, true);
  flexjit::testing::require_merge_states_correct(c.context, config);
}

TEST_CASE("fj_merge_states_n on the CPU merges N states by LSE in their order", "[cpu][shard]") {
  Context c;
  flexjit::MergeStatesCheckConfig config;
  config.device = FJ_DEVICE_CPU;
  config.num_states = GENERATE(1, 2, 3, 8);
  config.dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  config.in_place = GENERATE(false, true);
  config.sinks = GENERATE(false, true);
  flexjit::testing::require_merge_states_correct(c.context, config);
}

TEST_CASE("fj_merge_states_n of two states is fj_merge_states", "[cpu][shard]") {
  // The same math for the same inputs: bit for bit.
  Context c;
  constexpr int kTokens = 6, kHeads = 4, kDim = 64, kRows = kTokens * kHeads;
  Buffer<uint16_t> states(2 * kRows * kDim), two(kRows * kDim, 0xffff), n(kRows * kDim, 0xffff);
  Buffer<float> lses(2 * kRows), two_lse(kRows), n_lse(kRows);
  for (int i = 0; i < 2 * kRows * kDim; ++i)
    states.get()[i] = static_cast<uint16_t>(0x3c00 + (i * 37) % 900);
  for (int i = 0; i < 2 * kRows; ++i)
    lses.get()[i] = i % 7 == 3 ? -std::numeric_limits<float>::infinity() : 0.37f * (i % 11) - 2.0f;
  fj_merge_states_args a{};
  a.struct_size = sizeof(a);
  a.dtype = FJ_DTYPE_FP16;
  a.device = FJ_DEVICE_CPU;
  a.out_a = states.get();
  a.out_b = states.get() + kRows * kDim;
  a.lse_a = lses.get();
  a.lse_b = lses.get() + kRows;
  a.out = two.get();
  a.lse = two_lse.get();
  a.num_tokens = kTokens;
  a.num_heads = kHeads;
  a.head_dim = kDim;
  a.out_a_stride_token = a.out_b_stride_token = a.out_stride_token = kHeads * kDim;
  a.out_a_stride_head = a.out_b_stride_head = a.out_stride_head = kDim;
  a.lse_a_stride_token = a.lse_b_stride_token = a.lse_stride_token = kHeads;
  REQUIRE(fj_merge_states(c.context, &a, nullptr) == FJ_SUCCESS);
  fj_merge_states_n_args m{};
  m.struct_size = sizeof(m);
  m.dtype = FJ_DTYPE_FP16;
  m.device = FJ_DEVICE_CPU;
  m.num_states = 2;
  m.states_out = states.get();
  m.states_lse = lses.get();
  m.out = n.get();
  m.lse = n_lse.get();
  m.num_tokens = kTokens;
  m.num_heads = kHeads;
  m.head_dim = kDim;
  m.out_stride_state = kRows * kDim;
  m.out_stride_token = m.merged_stride_token = kHeads * kDim;
  m.out_stride_head = m.merged_stride_head = kDim;
  m.lse_stride_state = kRows;
  m.lse_stride_token = m.merged_lse_stride_token = kHeads;
  REQUIRE(fj_merge_states_n(c.context, &m, nullptr) == FJ_SUCCESS);
  CHECK(std::memcmp(two.get(), n.get(), kRows * kDim * sizeof(uint16_t)) == 0);
  CHECK(std::memcmp(two_lse.get(), n_lse.get(), kRows * sizeof(float)) == 0);

  // Bad arguments get a status and a message, and leave out untouched.
  const auto status_of = [&](auto&& edit) {
    fj_merge_states_n_args bad = m;
    std::fill(n.get(), n.get() + kRows * kDim, uint16_t{0x1234});
    edit(bad);
    const fj_status status = fj_merge_states_n(c.context, &bad, nullptr);
    CHECK(std::all_of(n.get(), n.get() + kRows * kDim, [](uint16_t x) { return x == 0x1234; }));
    return status;
  };
  CHECK(fj_merge_states_n(nullptr, &m, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_merge_states_n(c.context, nullptr, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](fj_merge_states_n_args& b) { b.num_states = 0; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find("num_states (0) must be positive") == 0);
  CHECK(status_of([](fj_merge_states_n_args& b) { b.states_lse = nullptr; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "states_lse is null");
  CHECK(status_of([](fj_merge_states_n_args& b) { b.out_stride_state = 12; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](fj_merge_states_n_args& b) { b.lse_stride_state = -1; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](fj_merge_states_n_args& b) { b.lse_stride_token = 3; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([&](fj_merge_states_n_args& b) { b.lse = lses.get() + kRows + 5; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "lse overlaps states_lse");
  CHECK(status_of([](fj_merge_states_n_args& b) { b.dtype = FJ_DTYPE_FP8_E4M3; }) ==
        FJ_ERROR_UNSUPPORTED);
  CHECK(status_of([](fj_merge_states_n_args& b) { b.device = static_cast<fj_device>(7); }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](fj_merge_states_n_args& b) { b.struct_size = 8; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("CPU sharded calls check their layout against the request", "[cpu][shard]") {
  // PagedBatch: one request of 20 keys and 4 new tokens; as a shard of a longer request.
  Context c;
  fj_kernel* kernel = cpu_kernel(c, "sliding", 16);
  Buffer<int32_t> global(1), offsets(1);
  const auto status_of = [&](auto&& edit) {
    PagedBatch batch;
    global.get()[0] = 100;
    offsets.get()[0] = 0;
    batch.args.global_seq_lens = global.get();
    batch.args.kv_shard_rank = 1;
    batch.args.kv_shard_count = 4;
    batch.args.kv_shard_interleave = 2;
    edit(batch);
    return fj_paged_attention(kernel, &batch.args, nullptr);
  };
  // Rank 1 of 4 in runs of 2: its 20 keys sit at positions 2, 3, 10, 11, ..., 74, 75 of 100.
  CHECK(status_of([](PagedBatch&) {}) == FJ_SUCCESS);
  CHECK(status_of([&](PagedBatch&) { global.get()[0] = 76; }) == FJ_SUCCESS);
  CHECK(status_of([&](PagedBatch&) { global.get()[0] = 75; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() ==
        "request 0's shard puts its 20 keys at positions 2 to 75, outside [0, "
        "global_seq_lens[0] = 75) (kv_shard_offsets[0] = 0, rank 1 of 4, interleave 2)");
  CHECK(status_of([&](PagedBatch&) { global.get()[0] = 3; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "global_seq_lens[0] (3) is smaller than the request's 4 query rows");
  // A shard of no key, and one with fewer keys than the request has new tokens.
  CHECK(status_of([](PagedBatch& b) { b.seq_lens.get()[0] = 0; }) == FJ_SUCCESS);
  CHECK(status_of([](PagedBatch& b) { b.seq_lens.get()[0] = 2; }) == FJ_SUCCESS);
  CHECK(status_of([](PagedBatch& b) { b.seq_lens.get()[0] = -1; }) == FJ_ERROR_INVALID_ARGUMENT);
  // Contiguous shards: a key offset per request.
  CHECK(status_of([&](PagedBatch& b) {
          b.args.kv_shard_count = 1;
          b.args.kv_shard_rank = 0;
          b.args.kv_shard_offsets = offsets.get();
          offsets.get()[0] = 80;
        }) == FJ_SUCCESS);
  CHECK(status_of([&](PagedBatch& b) {
          b.args.kv_shard_count = 1;
          b.args.kv_shard_rank = 0;
          b.args.kv_shard_offsets = offsets.get();
          offsets.get()[0] = 81;
        }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([&](PagedBatch& b) {
          b.args.kv_shard_count = 1;
          b.args.kv_shard_rank = 0;
          b.args.kv_shard_offsets = offsets.get();
          offsets.get()[0] = -1;
        }) == FJ_ERROR_INVALID_ARGUMENT);
  // The layout's own checks.
  CHECK(status_of([](PagedBatch& b) { b.args.kv_shard_rank = 4; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "kv_shard_rank (4) is outside [0, kv_shard_count = 4)");
  CHECK(status_of([](PagedBatch& b) { b.args.kv_shard_rank = -1; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.kv_shard_count = -2; }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.kv_shard_interleave = -2; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) {
          b.args.kv_shard_count = 1 << 16;
          b.args.kv_shard_interleave = 1 << 16;
        }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) { b.args.global_seq_lens = nullptr; }) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find("global_seq_lens is null") == 0);
  CHECK(status_of([&](PagedBatch& b) {
          b.args.global_seq_lens =
              reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(global.get()) + 2);
        }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([](PagedBatch& b) {
          static const float sinks[8] = {};
          b.args.sinks = sinks;
        }) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find("sinks are given to a sharded call") == 0);
  // A 0.8 caller's struct ends before the shard fields: they are not read.
  CHECK(status_of([](PagedBatch& b) {
          b.args.kv_shard_rank = 9;
          b.args.struct_size = offsetof(fj_paged_attention_args, kv_shard_offsets);
        }) == FJ_SUCCESS);
  fj_kernel_destroy(kernel);
}
