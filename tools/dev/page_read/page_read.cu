// page_read: how fast a paged KV cache can be read, by access pattern and page placement.
//
// Reads every K/V byte of a decode batch (requests x keys, 8 kv heads, head dim 128, vLLM's layout
// [block][K|V][token][kv head][dim]) into shared memory and does nothing else, so each figure is
// the floor that its pattern of copies sets for a decode kernel. The element is 2 bytes (bf16,
// 256-byte rows) or 1 (an fp8 cache, 128-byte rows: --element-bytes 1), the page 16 or 64 tokens
// (--page 64).
//   head:     one CTA per (request, kv head), 2 per SM, 16-byte cp.async of 64-key tiles in
//             three stages: the copies of templates/paged_decode.cuh;
//   head-ef:  as head, with an L2 evict-first policy on the copies;
//   heads2:   one CTA per (request, pair of kv heads): tiles of 32 keys of both heads;
//   block:    one CTA per (request, split), 1 per SM, whole pages (all kv heads) in three stages
//             of at most 64 KB (a larger page takes several), 16-byte cp.async;
//   bulk:     as block, each stage one cp.async.bulk (the copy engine).
// Every reader lists its item's block-table entries in shared memory first. The block table is
// shuffled (every page on its own) or sequential. bench/RESULTS.md has the figures;
// tools/bench/bench.py runs it for the decode floors of its fp8 family.
//
// Build, from the repository root (the templates give the cp.async helpers):
//   nvcc -O3 -std=c++17 -arch=sm_90a -I templates -o page_read tools/dev/page_read/page_read.cu
// Run: page_read [requests] [keys] [rounds] [--page 16|64] [--element-bytes 2|1]
//        [--readers head,block,...]: the median (and the minimum) of `rounds` runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fj_device.cuh"  // the templates' cp.async and shared-address helpers

namespace {

constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kTileKeys = 64;  // keys of one kv head per tile of the per-head readers
constexpr int kStages = 3;
constexpr int kMaxStageBytes = 64 * 1024;  // the whole-page readers' stage, at most

// The cache's geometry: tokens per page and bytes per element (2: bf16, 1: fp8).
template <int kPageTokens, int kElementBytes>
struct Cache {
  static constexpr int kPage = kPageTokens;
  static constexpr int kRowBytes = kHeadDim * kElementBytes;  // one token of one kv head
  static constexpr int kRowWords = kRowBytes / 16;
  static constexpr int kBlockBytes = 2 * kPage * kKvHeads * kRowBytes;  // K and V of a page
  static constexpr int kBlockWords = kBlockBytes / 16;
  // The whole-page readers stage a page, or a part of one when it exceeds kMaxStageBytes.
  static constexpr int kStageBytes = std::min(kBlockBytes, kMaxStageBytes);
  static constexpr int kStageWords = kStageBytes / 16;
  static constexpr int kStagesPerBlock = kBlockBytes / kStageBytes;
  static_assert(kTileKeys % kPage == 0 || kPage % kTileKeys == 0, "tiles and pages must nest");
};

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

// One CTA per (request, group of kHeads kv heads): tiles of kTileKeys / kHeads keys of the
// group's rows, 16 bytes per copy, in the order piece of a row, token, K|V, page (the tile's part
// within one page). kHeads = 1 is the decode kernel's pattern.
template <class C, int kHeads, bool kEvictFirst>
__global__ void __launch_bounds__(128) read_by_head(const uint4* cache, const int* table,
                                                    int pages_per_req, int items, unsigned* sink) {
  constexpr int kKeys = kTileKeys / kHeads;                       // keys per tile
  constexpr int kPartKeys = kKeys < C::kPage ? kKeys : C::kPage;  // keys of a page in a tile
  constexpr int kPieces = kHeads * C::kRowWords;                  // words of one token's rows
  constexpr int kTileWords = kKeys * 2 * kPieces;                 // 2048 (bf16) or 1024 (fp8)
  constexpr int kGroups = kKvHeads / kHeads;
  extern __shared__ uint4 smem[];
  uint64_t policy = 0;
  if constexpr (kEvictFirst)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  unsigned acc = 0;
  const int tiles = pages_per_req * C::kPage / kKeys;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int req = item / kGroups, head = item % kGroups * kHeads;
    __shared__ int listed[kMaxListed];
    const int* pages =
        list_pages(listed, table + static_cast<int64_t>(req) * pages_per_req, pages_per_req);
    const auto issue = [&](int tile, uint4* stage) {
      for (int c = threadIdx.x; c < kTileWords; c += blockDim.x) {
        const int piece = c % kPieces, token = c / kPieces % kPartKeys;
        const int kv = c / (kPieces * kPartKeys) % 2, part = c / (2 * kPieces * kPartKeys);
        const int key = tile * kKeys + part * kPartKeys + token;
        const int64_t block = pages[key / C::kPage];
        const uint4* src =
            cache + block * C::kBlockWords + kv * (C::kPage * kKvHeads * C::kRowWords) +
            (key % C::kPage) * (kKvHeads * C::kRowWords) + head * C::kRowWords + piece;
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

// One CTA per (request, split): whole pages in stages of C::kStageBytes, 16 bytes per copy.
template <class C>
__global__ void __launch_bounds__(256)
    read_by_block(const uint4* cache, const int* table, int pages_per_req, int splits, int items,
                  unsigned* sink) {
  extern __shared__ uint4 smem[];
  unsigned acc = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    __shared__ int listed[kMaxListed];
    const SplitPages split = list_split(listed, table, pages_per_req, splits, item);
    const int* pages = split.pages;
    const auto issue = [&](int s, uint4* stage) {
      const uint4* src = cache +
                         static_cast<int64_t>(pages[s / C::kStagesPerBlock]) * C::kBlockWords +
                         s % C::kStagesPerBlock * C::kStageWords;
      for (int c = threadIdx.x; c < C::kStageWords; c += blockDim.x)
        fj::cp_async_16(stage + c, src + c, true);
    };
    acc ^= stream_tiles<C::kStageWords>(smem, split.count * C::kStagesPerBlock, issue);
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// As read_by_block, but each stage is one bulk copy issued by thread 0.
template <class C>
__global__ void __launch_bounds__(256)
    read_by_bulk(const uint4* cache, const int* table, int pages_per_req, int splits, int items,
                 unsigned* sink) {
  constexpr int kWords = C::kStageWords;
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
    const int count = split.count * C::kStagesPerBlock;
    auto issue = [&](int p) {
      const int s = p % kStages;
      const uint4* src = cache +
                         static_cast<int64_t>(pages[p / C::kStagesPerBlock]) * C::kBlockWords +
                         p % C::kStagesPerBlock * kWords;
      asm volatile(
          "mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n"
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %1, "
          "[%0];\n" ::"r"(fj::smem_address(&full[s])),
          "r"(C::kStageBytes), "r"(fj::smem_address(smem + s * kWords)), "l"(src)
          : "memory");
    };
    if (threadIdx.x == 0)
      for (int p = 0; p < kStages && p < count; ++p)
        issue(p);
    for (int p = 0; p < count; ++p) {
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
      if (threadIdx.x == 0 && p + kStages < count) issue(p + kStages);
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

const char* const kReaders[] = {"head", "head-ef", "heads2", "block", "bulk"};
constexpr int kNumReaders = 5;

struct Options {
  int requests = 64, keys = 16384, rounds = 20;
  int page = 16, element_bytes = 2;
  bool reader[kNumReaders] = {true, true, true, true, true};
};

// Times every chosen reader over a shuffled and a sequential table, twice, for cache C.
template <class C>
int run(const Options& o) {
  const int pages_per_req = o.keys / C::kPage;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t blocks = static_cast<size_t>(o.requests) * pages_per_req;
  const double bytes = static_cast<double>(blocks) * C::kBlockBytes;
  uint4* cache = nullptr;
  int* table = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&cache, blocks * C::kBlockBytes));
  CHECK(cudaMemset(cache, 1, blocks * C::kBlockBytes));
  CHECK(cudaMalloc(&table, blocks * sizeof(int)));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));

  const int head_smem = kStages * kTileKeys * 2 * C::kRowBytes;
  const int block_smem = kStages * C::kStageBytes;
  CHECK(cudaFuncSetAttribute(read_by_head<C, 1, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             head_smem));
  CHECK(cudaFuncSetAttribute(read_by_head<C, 1, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             head_smem));
  CHECK(cudaFuncSetAttribute(read_by_head<C, 2, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             head_smem));
  CHECK(cudaFuncSetAttribute(read_by_block<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             block_smem));
  CHECK(cudaFuncSetAttribute(read_by_bulk<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             block_smem));
  // Splits per request for the per-request readers: as many as keep to one wave of CTAs.
  const int splits = std::max(1, sms / o.requests);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));

  std::printf(
      "page_read: %d requests x %d keys, page %d, %d-byte elements, %.3f GB, %d SMs, "
      "%d splits per request\n",
      o.requests, o.keys, C::kPage, C::kRowBytes / kHeadDim, bytes / 1e9, sms, splits);
  // bench.py reports medians, so the floors compare with its figures; the minimum shows the
  // spread. bench.py reads these rows (reader, table, median, minimum).
  std::printf("%-8s %-10s %10s %10s %10s\n", "reader", "table", "ms (median)", "ms (min)", "TB/s");
  for (int pass = 0; pass < 2; ++pass) {  // the same set twice, to see the spread
    for (bool shuffled : {true, false}) {
      std::vector<int> host = make_table(o.requests, pages_per_req, shuffled, 1234 + pass);
      CHECK(cudaMemcpy(table, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
      for (int r = 0; r < kNumReaders; ++r) {
        if (!o.reader[r]) continue;
        if (r < 3 && pages_per_req > kMaxListed) continue;  // a head's list does not fit
        if (r >= 3 && (pages_per_req + splits - 1) / splits > kMaxListed) continue;
        auto launch = [&] {
          if (r == 0)
            read_by_head<C, 1, false><<<2 * sms, 128, head_smem>>>(cache, table, pages_per_req,
                                                                   o.requests * kKvHeads, sink);
          else if (r == 1)
            read_by_head<C, 1, true><<<2 * sms, 128, head_smem>>>(cache, table, pages_per_req,
                                                                  o.requests * kKvHeads, sink);
          else if (r == 2)
            read_by_head<C, 2, false><<<2 * sms, 128, head_smem>>>(cache, table, pages_per_req,
                                                                   o.requests * kKvHeads / 2, sink);
          else if (r == 3)
            read_by_block<C><<<sms, 256, block_smem>>>(cache, table, pages_per_req, splits,
                                                       o.requests * splits, sink);
          else
            read_by_bulk<C><<<sms, 256, block_smem>>>(cache, table, pages_per_req, splits,
                                                      o.requests * splits, sink);
        };
        launch();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::vector<float> times(o.rounds);
        for (float& ms : times) {
          CHECK(cudaEventRecord(start));
          launch();
          CHECK(cudaEventRecord(stop));
          CHECK(cudaEventSynchronize(stop));
          CHECK(cudaEventElapsedTime(&ms, start, stop));
        }
        std::sort(times.begin(), times.end());
        const float median = times[o.rounds / 2];
        std::printf("%-8s %-10s %10.4f %10.4f %10.3f\n", kReaders[r],
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

int usage() {
  std::fprintf(stderr,
               "usage: page_read [requests] [keys, a multiple of 64 and of the page] [rounds] "
               "[--page 16|64] [--element-bytes 2|1] [--readers head,head-ef,heads2,block,bulk]"
               "\n");
  return 2;
}

// The readers named in a comma-separated list; false for an unknown name.
bool parse_readers(const char* text, Options& o) {
  std::fill(std::begin(o.reader), std::end(o.reader), false);
  std::string list = text;
  for (size_t begin = 0; begin <= list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    const auto found = std::find_if(std::begin(kReaders), std::end(kReaders),
                                    [&](const char* r) { return name == r; });
    if (found == std::end(kReaders)) return false;
    o.reader[found - std::begin(kReaders)] = true;
    begin = end + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int* positional[] = {&o.requests, &o.keys, &o.rounds};
  int given = 0;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (std::strcmp(arg, "--page") == 0 && has_value) {
      o.page = std::atoi(argv[++i]);
    } else if (std::strcmp(arg, "--element-bytes") == 0 && has_value) {
      o.element_bytes = std::atoi(argv[++i]);
    } else if (std::strcmp(arg, "--readers") == 0 && has_value) {
      if (!parse_readers(argv[++i], o)) return usage();
    } else if (arg[0] != '-' && given < 3) {
      *positional[given++] = std::atoi(arg);
    } else {
      return usage();
    }
  }
  if (o.requests <= 0 || o.keys <= 0 || o.rounds <= 0 || o.keys % kTileKeys != 0 ||
      o.keys % o.page != 0) {
    return usage();
  }
  if (o.page == 16 && o.element_bytes == 2) return run<Cache<16, 2>>(o);
  if (o.page == 16 && o.element_bytes == 1) return run<Cache<16, 1>>(o);
  if (o.page == 64 && o.element_bytes == 2) return run<Cache<64, 2>>(o);
  if (o.page == 64 && o.element_bytes == 1) return run<Cache<64, 1>>(o);
  std::fprintf(stderr, "page_read: --page %d --element-bytes %d is not built (16 or 64; 2 or 1)\n",
               o.page, o.element_bytes);
  return 2;
}
