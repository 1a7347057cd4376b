// page_read: how fast a paged KV cache can be read, by access pattern and page placement.
//
// Reads every K/V byte of a decode batch (requests x keys, 8 kv heads, head dim 128, bf16, page
// 16, vLLM's layout [block][K|V][token][kv head][dim]) into shared memory and does nothing else,
// so each figure is the floor that its pattern of copies sets for a decode kernel:
//   head:     one CTA per (request, kv head), 2 per SM, 16-byte cp.async of 64-key tiles in
//             three stages: the copies of templates/paged_decode.cuh;
//   head-ef:  as head, with an L2 evict-first policy on the copies;
//   heads2:   one CTA per (request, pair of kv heads): 512-byte runs, tiles of two pages;
//   block:    one CTA per (request, split), 1 per SM, whole pages (all kv heads, 64 KB) in
//             three stages, 16-byte cp.async;
//   bulk:     as block, each page one 64 KB cp.async.bulk (the copy engine).
// Every reader lists its item's block-table entries in shared memory first. The block table is
// shuffled (every page on its own) or sequential. bench/RESULTS.md has the figures.
//
// Build, from the repository root (the templates give the cp.async helpers):
//   nvcc -O3 -std=c++17 -arch=sm_90a -I templates -o page_read tools/dev/page_read/page_read.cu
// Run: page_read [requests] [keys] [rounds]: the median (and the minimum) of `rounds` runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "fj_device.cuh"  // the templates' cp.async and shared-address helpers

namespace {

constexpr int kPage = 16;
constexpr int kKvHeads = 8;
constexpr int kRowBytes = 256;                                 // head dim 128, bf16
constexpr int kBlockBytes = 2 * kPage * kKvHeads * kRowBytes;  // K and V: 64 KB
constexpr int kStages = 3;

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e = (call);                                                           \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// Touches one word per thread of a stage, so the copies are consumed.
__device__ __forceinline__ unsigned touch(const uint4* stage, int words) {
  unsigned v = 0;
  for (int i = threadIdx.x; i < words; i += blockDim.x * 64)
    v ^= stage[i].x;
  return v;
}

// An item's block-table entries, listed in shared memory before its copies start, so that no
// copy waits on a table read (the decode kernel reads them ahead of the copies).
constexpr int kMaxListed = 2048;

__device__ __forceinline__ const int* list_pages(int* listed, const int* pages, int count) {
  __syncthreads();  // the previous item's list is no longer read
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    listed[i] = pages[i];
  __syncthreads();
  return listed;
}

// The pages of item (request, split) of the per-request readers, the request's pages cut into
// `splits` near-equal parts, listed as list_pages does.
struct SplitPages {
  const int* pages;
  int count;
};

__device__ __forceinline__ SplitPages list_split(int* listed, const int* table, int pages_per_req,
                                                 int splits, int item) {
  const int req = item / splits, split = item % splits;
  const int first = split * pages_per_req / splits;
  const int count = (split + 1) * pages_per_req / splits - first;
  return {list_pages(listed, table + static_cast<int64_t>(req) * pages_per_req + first, count),
          count};
}

// Streams `count` tiles of kWords words through kStages cp.async stages: issue(t, stage) copies
// tile t into its stage, and each tile is touched once it has landed. Returns the touched bits.
template <int kWords, class Issue>
__device__ __forceinline__ unsigned stream_tiles(uint4* smem, int count, const Issue& issue) {
  const auto stage = [&](int t) { return smem + (t % kStages) * kWords; };
  unsigned acc = 0;
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < count) issue(t, stage(t));
    fj::cp_async_commit();
  }
  for (int t = 0; t < count; ++t) {
    if (t + kStages - 1 < count) issue(t + kStages - 1, stage(t + kStages - 1));
    fj::cp_async_commit();
    fj::cp_async_wait<kStages - 1>();
    __syncthreads();
    acc ^= touch(stage(t), kWords);
    __syncthreads();
  }
  return acc;
}

// One CTA per (request, group of kHeads kv heads): tiles of 4 / kHeads pages of the group's rows
// (32 KB), 16 bytes per copy. kHeads = 1 is the decode kernel's pattern.
template <int kHeads, bool kEvictFirst>
__global__ void __launch_bounds__(128) read_by_head(const uint4* cache, const int* table,
                                                    int pages_per_req, int items, unsigned* sink) {
  constexpr int kTilePages = 4 / kHeads;
  constexpr int kTileWords = kTilePages * 2 * kPage * kHeads * kRowBytes / 16;  // 2048
  constexpr int kGroups = kKvHeads / kHeads;
  extern __shared__ uint4 smem[];
  uint64_t policy = 0;
  if constexpr (kEvictFirst)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  unsigned acc = 0;
  const int tiles = pages_per_req / kTilePages;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int req = item / kGroups, head = item % kGroups * kHeads;
    __shared__ int listed[kMaxListed];
    const int* pages =
        list_pages(listed, table + static_cast<int64_t>(req) * pages_per_req, pages_per_req);
    const auto issue = [&](int tile, uint4* stage) {
      for (int c = threadIdx.x; c < kTileWords; c += blockDim.x) {
        const int piece = c % (16 * kHeads), token = c / (16 * kHeads) % 16;
        const int kv = c / (256 * kHeads) % 2, page = c / (512 * kHeads);
        const int64_t block = pages[tile * kTilePages + page];
        const uint4* src =
            cache + block * (kBlockBytes / 16) + kv * 2048 + token * 128 + head * 16 + piece;
        if constexpr (kEvictFirst)
          asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(
                           fj::smem_address(stage + c)),
                       "l"(src), "l"(policy));
        else
          fj::cp_async_16(stage + c, src, true);
      }
    };
    acc ^= stream_tiles<kTileWords>(smem, tiles, issue);
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// One CTA per (request, split): whole pages, 16 bytes per copy.
__global__ void __launch_bounds__(256)
    read_by_block(const uint4* cache, const int* table, int pages_per_req, int splits, int items,
                  unsigned* sink) {
  constexpr int kWords = kBlockBytes / 16;  // 4096
  extern __shared__ uint4 smem[];
  unsigned acc = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    __shared__ int listed[kMaxListed];
    const SplitPages split = list_split(listed, table, pages_per_req, splits, item);
    const int* pages = split.pages;
    const int pages_per_split = split.count;
    const auto issue = [&](int p, uint4* stage) {
      const uint4* src = cache + static_cast<int64_t>(pages[p]) * kWords;
      for (int c = threadIdx.x; c < kWords; c += blockDim.x)
        fj::cp_async_16(stage + c, src + c, true);
    };
    acc ^= stream_tiles<kWords>(smem, pages_per_split, issue);
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// As read_by_block, but each page is one bulk copy issued by thread 0.
__global__ void __launch_bounds__(256)
    read_by_bulk(const uint4* cache, const int* table, int pages_per_req, int splits, int items,
                 unsigned* sink) {
  constexpr int kWords = kBlockBytes / 16;
  extern __shared__ uint4 smem[];
  __shared__ alignas(8) uint64_t full[kStages];
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s)
      asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(fj::smem_address(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n");
  }
  __syncthreads();
  unsigned acc = 0;
  unsigned phase_bits = 0;  // bit s: the parity stage s waits for next
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    __shared__ int listed[kMaxListed];
    const SplitPages split = list_split(listed, table, pages_per_req, splits, item);
    const int* pages = split.pages;
    const int pages_per_split = split.count;
    auto issue = [&](int p) {
      const int s = p % kStages;
      const uint4* src = cache + static_cast<int64_t>(pages[p]) * kWords;
      asm volatile(
          "mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n"
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %1, "
          "[%0];\n" ::"r"(fj::smem_address(&full[s])),
          "r"(kBlockBytes), "r"(fj::smem_address(smem + s * kWords)), "l"(src)
          : "memory");
    };
    if (threadIdx.x == 0)
      for (int p = 0; p < kStages && p < pages_per_split; ++p)
        issue(p);
    for (int p = 0; p < pages_per_split; ++p) {
      const int s = p % kStages;
      const unsigned parity = (phase_bits >> s) & 1u;
      asm volatile(
          "{\n.reg .pred done;\nwait:\n"
          "mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
          "@!done bra wait;\n}\n" ::"r"(fj::smem_address(&full[s])),
          "r"(parity)
          : "memory");
      phase_bits ^= 1u << s;
      acc ^= touch(smem + s * kWords, kWords);
      __syncthreads();
      if (threadIdx.x == 0 && p + kStages < pages_per_split) issue(p + kStages);
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

std::vector<int> make_table(int requests, int pages_per_req, bool shuffled, unsigned seed) {
  std::vector<int> table(static_cast<size_t>(requests) * pages_per_req);
  std::iota(table.begin(), table.end(), 0);
  if (shuffled) std::shuffle(table.begin(), table.end(), std::mt19937(seed));
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 64;
  const int keys = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 20;
  const int pages_per_req = keys / kPage;
  if (requests <= 0 || keys <= 0 || keys % (4 * kPage) != 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: page_read [requests] [keys, a multiple of 64] [rounds]\n");
    return 2;
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t blocks = static_cast<size_t>(requests) * pages_per_req;
  const double bytes = static_cast<double>(blocks) * kBlockBytes;
  uint4* cache = nullptr;
  int* table = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&cache, blocks * kBlockBytes));
  CHECK(cudaMemset(cache, 1, blocks * kBlockBytes));
  CHECK(cudaMalloc(&table, blocks * sizeof(int)));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));

  const int head_smem = kStages * 4 * 2 * kPage * kRowBytes;
  const int block_smem = kStages * kBlockBytes;
  CHECK(cudaFuncSetAttribute(read_by_head<1, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             head_smem));
  CHECK(cudaFuncSetAttribute(read_by_head<1, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             head_smem));
  CHECK(cudaFuncSetAttribute(read_by_head<2, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             head_smem));
  CHECK(
      cudaFuncSetAttribute(read_by_block, cudaFuncAttributeMaxDynamicSharedMemorySize, block_smem));
  CHECK(
      cudaFuncSetAttribute(read_by_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, block_smem));
  // Splits per request for the per-request readers: as many as keep to one wave of CTAs.
  const int splits = std::max(1, sms / requests);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));

  std::printf("page_read: %d requests x %d keys, %.3f GB, %d SMs, %d splits per request\n",
              requests, keys, bytes / 1e9, sms, splits);
  // bench.py reports medians, so the floors compare with its figures; the minimum shows the
  // spread.
  std::printf("%-8s %-10s %10s %10s %10s\n", "reader", "table", "ms (median)", "ms (min)", "TB/s");
  const char* readers[] = {"head", "head-ef", "heads2", "block", "bulk"};
  for (int pass = 0; pass < 2; ++pass) {  // the same set twice, to see the spread
    for (bool shuffled : {true, false}) {
      std::vector<int> host = make_table(requests, pages_per_req, shuffled, 1234 + pass);
      CHECK(cudaMemcpy(table, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
      for (int r = 0; r < 5; ++r) {
        if (r < 3 && pages_per_req > kMaxListed) continue;  // a head's list does not fit
        if (r >= 3 && (pages_per_req + splits - 1) / splits > kMaxListed) continue;
        auto launch = [&] {
          if (r == 0)
            read_by_head<1, false><<<2 * sms, 128, head_smem>>>(cache, table, pages_per_req,
                                                                requests * kKvHeads, sink);
          else if (r == 1)
            read_by_head<1, true><<<2 * sms, 128, head_smem>>>(cache, table, pages_per_req,
                                                               requests * kKvHeads, sink);
          else if (r == 2)
            read_by_head<2, false><<<2 * sms, 128, head_smem>>>(cache, table, pages_per_req,
                                                                requests * kKvHeads / 2, sink);
          else if (r == 3)
            read_by_block<<<sms, 256, block_smem>>>(cache, table, pages_per_req, splits,
                                                    requests * splits, sink);
          else
            read_by_bulk<<<sms, 256, block_smem>>>(cache, table, pages_per_req, splits,
                                                   requests * splits, sink);
        };
        launch();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::vector<float> times(rounds);
        for (float& ms : times) {
          CHECK(cudaEventRecord(start));
          launch();
          CHECK(cudaEventRecord(stop));
          CHECK(cudaEventSynchronize(stop));
          CHECK(cudaEventElapsedTime(&ms, start, stop));
        }
        std::sort(times.begin(), times.end());
        const float median = times[rounds / 2];
        std::printf("%-8s %-10s %10.4f %10.4f %10.3f\n", readers[r],
                    shuffled ? "shuffled" : "sequential", median, times[0],
                    bytes / (median * 1e-3) / 1e12);
      }
    }
  }
  CHECK(cudaFree(cache));
  CHECK(cudaFree(table));
  CHECK(cudaFree(sink));
  return 0;
}
