#include "check/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

namespace flexjit {

namespace {

// Keys whose mask (and score) one HostCode call evaluates.
constexpr int kKeysPerCall = 256;

// One (token, head) row of the output; returns the number of visible keys.
int64_t reference_row(const Variant& variant, const HostCode& code, const HostPagedBatch& batch,
                      const fj::MaskParams& params, int request, int token, int head, double* out,
                      double* lse) {
  const int d = batch.head_dim;
  const int group = batch.num_heads / batch.num_kv_heads;
  const int kv_head = head / group;
  const int query_len = batch.query_start_loc[request + 1] - batch.query_start_loc[request];
  const int seq_len = batch.seq_lens[request];
  const int q_pos = seq_len - query_len + (token - batch.query_start_loc[request]);
  const int64_t capacity = int64_t{batch.max_blocks_per_req} * batch.page_size;
  const int kv_end = static_cast<int>(std::min<int64_t>(seq_len, capacity));
  const float* q_row = &batch.q[(int64_t{token} * batch.num_heads + head) * d];
  const int32_t* block_row = &batch.block_table[request * batch.block_table_stride];

  std::vector<double> scores;
  std::vector<int> keys;
  uint8_t visible[kKeysPerCall];
  float modified[kKeysPerCall];
  for (int kv0 = 0; kv0 < kv_end; kv0 += kKeysPerCall) {
    const int n = std::min(kKeysPerCall, kv_end - kv0);
    code.mask_row(&params, request, head, q_pos, kv0, n, visible);
    const size_t first = scores.size();
    for (int i = 0; i < n; ++i) {
      if (!visible[i]) continue;
      const int kv = kv0 + i;
      const int64_t block = block_row[kv / batch.page_size];
      const int64_t slot = kv % batch.page_size;
      double dot = 0.0;
      for (int e = 0; e < d; ++e)
        dot += double{q_row[e]} * batch.k.at(block, slot, kv_head, e);
      scores.push_back(dot * batch.scale);
      keys.push_back(kv);
    }
    if (!variant.has_score() || scores.size() == first) continue;
    // The score modifier runs in float32, as in the kernel, over the chunk's keys (the masked
    // ones get a score of 0 that is never used).
    std::fill(modified, modified + n, 0.0f);
    for (size_t j = first; j < scores.size(); ++j)
      modified[keys[j] - kv0] = static_cast<float>(scores[j]);
    code.score_row(&params, request, head, q_pos, kv0, n, modified);
    for (size_t j = first; j < scores.size(); ++j)
      scores[j] = modified[keys[j] - kv0];
  }
  std::fill(out, out + d, 0.0);
  // The head's sink (-inf: none) joins the denominator with no value.
  const double sink =
      batch.sinks.empty() ? -std::numeric_limits<double>::infinity() : double{batch.sinks[head]};
  if (scores.empty()) {
    *lse = sink;
    return 0;
  }
  const double max_score = std::max(*std::max_element(scores.begin(), scores.end()), sink);
  double sum = std::exp(sink - max_score);
  for (size_t j = 0; j < scores.size(); ++j) {
    const double p = std::exp(scores[j] - max_score);
    sum += p;
    const int64_t block = block_row[keys[j] / batch.page_size];
    const int64_t slot = keys[j] % batch.page_size;
    for (int i = 0; i < d; ++i)
      out[i] += p * batch.v.at(block, slot, kv_head, i);
  }
  for (int i = 0; i < d; ++i)
    out[i] /= sum;
  *lse = max_score + std::log(sum);
  return static_cast<int64_t>(scores.size());
}

}  // namespace

ReferenceOutput reference_paged_attention(const Variant& variant, const HostCode& code,
                                          const HostPagedBatch& batch) {
  const HostParams host_params(variant, batch.params, batch.arrays);
  const fj::MaskParams& params = host_params.params();
  ReferenceOutput result;
  const int num_tokens = batch.num_tokens();
  result.out.assign(int64_t{num_tokens} * batch.num_heads * batch.head_dim, 0.0);
  result.lse.assign(int64_t{num_tokens} * batch.num_heads, 0.0);
  result.empty_rows.assign(int64_t{num_tokens} * batch.num_heads, 0);

  // Rows are independent: hand out (request, token) rows to threads through a counter.
  std::vector<std::pair<int, int>> rows;
  for (int r = 0; r < batch.num_reqs(); ++r) {
    for (int t = batch.query_start_loc[r]; t < batch.query_start_loc[r + 1]; ++t) {
      rows.emplace_back(r, t);
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<int64_t> visible{0};
  auto work = [&] {
    int64_t local_visible = 0;
    for (size_t i = next++; i < rows.size(); i = next++) {
      const auto [request, token] = rows[i];
      for (int h = 0; h < batch.num_heads; ++h) {
        const int64_t row = int64_t{token} * batch.num_heads + h;
        const int64_t keys = reference_row(variant, code, batch, params, request, token, h,
                                           &result.out[row * batch.head_dim], &result.lse[row]);
        result.empty_rows[row] = keys == 0;
        local_visible += keys;
      }
    }
    visible += local_visible;
  };
  const unsigned num_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < num_threads; ++i)
    threads.emplace_back(work);
  work();
  for (auto& thread : threads)
    thread.join();
  result.visible_pairs = visible;
  return result;
}

ReferenceOutput reference_paged_attention(const Variant& variant, const HostPagedBatch& batch) {
  auto code = make_host_code(variant);
  if (!code) code = make_host_code(variant, false);
  if (!code) throw std::runtime_error("no host code for the reference: " + code.error().message);
  return reference_paged_attention(variant, **code, batch);
}

}  // namespace flexjit
