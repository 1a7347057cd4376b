// Tile maps (docs/architecture.md#tile-analysis): the class of every tile of one request and head's
// attention matrix, the brute-force truth that checks it, and PyTorch FlexAttention's BlockMask
// tensors for the same shape. `flexjit hints`, the classification benchmark and the tests build on
// this.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fj_ops.cuh"
#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/result.h"

namespace flexjit {

// The attention matrix of request `b`, head `h`, cut into tiles of tile_q x tile_k. Query row
// t (0 <= t < q_len) has position q_offset + t, key column j position j (0 <= j < kv_len); in a
// paged call the queries are the last q_len keys, q_offset = kv_len - q_len
// (docs/architecture.md#call-contract). Tile (row, col) covers rows [row * tile_q, (row + 1) *
// tile_q) and columns [col * tile_k, (col + 1) * tile_k), clipped at the edge of the matrix.
struct TileShape {
  int32_t b = 0, h = 0;
  int32_t q_len = 0, kv_len = 0;
  int32_t tile_q = 128, tile_k = 128;
  int32_t q_offset = 0;

  int32_t rows() const { return q_len / tile_q + (q_len % tile_q != 0); }
  int32_t cols() const { return kv_len / tile_k + (kv_len % tile_k != 0); }
  int64_t tiles() const { return int64_t{rows()} * cols(); }
  // Query rows and key columns of the tile, clipped: (q_len or kv_len) % tile at the edge.
  int32_t tile_rows(int32_t row) const;
  int32_t tile_cols(int32_t col) const;
  // The tile in positions (as classify_tile takes it), clipped.
  Tile tile(int32_t row, int32_t col) const;
};

// The shape of a paged call's tile map: q_offset = kv_len - q_len. Fails unless
// 0 < q_len <= kv_len, tile_q > 0, tile_k > 0, b >= 0 and h >= 0.
Result<TileShape> paged_tile_shape(int32_t q_len, int32_t kv_len, int32_t tile_q, int32_t tile_k,
                                   int32_t b = 0, int32_t h = 0);

struct TileCounts {
  int64_t empty = 0, full = 0, partial = 0;

  int64_t total() const { return empty + full + partial; }
  // The fraction of tiles a kernel visits (full + partial) / total, as FlexAttention's
  // BlockMask.sparsity() counts blocks; 0 without tiles.
  double density() const;
  void add(TileClass tile_class, int64_t count = 1);
};

// How build_tile_map classifies the tiles inside a row's kv range.
enum class TileMapMethod : uint8_t {
  // classify_tile on each tile: one interval evaluation per tile.
  Tiles,
  // classify_tile on spans of tiles: a span that comes out Empty or Full gives that class to
  // each of its tiles (sound: the analysis bounded every pair of the span), a Partial one is
  // halved, down to single tiles. Class boundaries move little from row to row, so the spans
  // tried first end where the runs of the row above end, as they are and moved by the tile
  // ratio tile_q / tile_k (as a diagonal boundary moves); where the row above was Partial, each
  // tile is classified alone. Never less exact than Tiles, and a few evaluations per row for
  // the standard masks (causal: 3) instead of one per tile in the kv range.
  Spans,
};

struct TileMap {
  TileShape shape;
  std::vector<TileClass> classes;  // rows() x cols(), row-major
  // Per row: the keys kv_range allowed, clipped to [0, kv_len) ({0, 0} when none). Tiles outside
  // it are Empty without evaluation.
  std::vector<KvRange> kv_ranges;
  TileCounts counts;
  int64_t evaluations = 0;  // classify_tile calls made (kv_range calls not counted)

  TileClass at(int32_t row, int32_t col) const {
    return classes[static_cast<size_t>(row) * shape.cols() + col];
  }
};

// Classifies every tile of `shape`: per row of tiles, kv_range bounds the keys that can be
// visible, tiles outside are Empty, tiles inside are classified by `method`. `params` as in
// EvalPoint; use HostParams::params() so that position-indexed arrays have their summaries.
// `shape` must be valid (as paged_tile_shape checks).
TileMap build_tile_map(const Variant& variant, const TileShape& shape, const fj::MaskParams* params,
                       TileMapMethod method = TileMapMethod::Spans);

// ---------------------------------------------------------------------------------------------
// Brute force: the oracle

// Visible (query, key) pairs of every tile (rows() x cols(), row-major), counted with the
// variant's host code (host_code.h: the LLVM-compiled mask, else the evaluator; the same
// results either way) on each pair. q_len x kv_len evaluations, split by rows of tiles over
// `threads`
// workers (0: one per hardware thread).
std::vector<int64_t> count_visible_pairs(const Variant& variant, const TileShape& shape,
                                         const fj::MaskParams* params, unsigned threads = 0);

// The true class of every tile from its visible pairs: Empty with none, Full with all (of the
// clipped tile), else Partial.
std::vector<TileClass> true_tile_classes(const TileShape& shape, std::span<const int64_t> visible);

// A tile map against the truth. The rate is exact / uniform (1.0 when no tile is uniform); a
// sound map has unsound == 0.
struct Exactness {
  int64_t uniform = 0;  // tiles truly Empty or Full
  int64_t exact = 0;    // tiles classified Empty or Full, and truly so
  int64_t unsound = 0;  // classified Empty with a visible pair, or Full with a masked one
  double rate() const { return uniform == 0 ? 1.0 : static_cast<double>(exact) / uniform; }
};

Exactness check_tile_map(const TileMap& map, std::span<const int64_t> visible);

// ---------------------------------------------------------------------------------------------
// PyTorch FlexAttention's BlockMask

// The block tensors of torch.nn.attention.flex_attention.BlockMask for one (b, h), as
// create_block_mask(mask_mod, B, H, q_len, kv_len, BLOCK_SIZE=(tile_q, tile_k)) builds them
// when mask_mod(b, h, t, j) is the mask at positions (q_offset + t, j). Blocks of row r are
// Partial blocks (kv_num_blocks, kv_indices) or Full ones (full_kv_num_blocks,
// full_kv_indices). Each row of indices lists its blocks in increasing order, then every other
// column in increasing order (torch.argsort(dense, descending=True, stable=True) in
// _dense_to_ordered): a permutation of 0..kv_blocks-1. Like create_block_mask, which pads the
// mask with False to whole blocks, a block clipped at the edge of the matrix is never Full:
// it is Partial when any of its pairs is visible.
struct BlockMask {
  int32_t q_blocks = 0, kv_blocks = 0;
  std::vector<int32_t> kv_num_blocks;       // [q_blocks]
  std::vector<int32_t> kv_indices;          // [q_blocks][kv_blocks]
  std::vector<int32_t> full_kv_num_blocks;  // [q_blocks]
  std::vector<int32_t> full_kv_indices;     // [q_blocks][kv_blocks]

  bool operator==(const BlockMask&) const = default;
};

// The BlockMask of a tile map's classes.
BlockMask export_block_mask(const TileMap& map);

// The BlockMask built element-wise from visible pairs (count_visible_pairs), the way
// create_block_mask does: Full when every pair of the whole (unclipped) block is visible.
BlockMask block_mask_from_visible(const TileShape& shape, std::span<const int64_t> visible);

}  // namespace flexjit
