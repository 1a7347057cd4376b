// Tile maps, their brute-force truth and FlexAttention BlockMask export.
#include "flexjit/compiler/tile_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "flexjit/compiler/host_code.h"

namespace flexjit {

int32_t TileShape::tile_rows(int32_t row) const {
  return std::min(tile_q, q_len - row * tile_q);
}

int32_t TileShape::tile_cols(int32_t col) const {
  return std::min(tile_k, kv_len - col * tile_k);
}

Tile TileShape::tile(int32_t row, int32_t col) const {
  const int32_t q0 = q_offset + row * tile_q;
  const int32_t k0 = col * tile_k;
  return {b, h, q0, q0 + tile_rows(row), k0, k0 + tile_cols(col)};
}

Result<TileShape> paged_tile_shape(int32_t q_len, int32_t kv_len, int32_t tile_q, int32_t tile_k,
                                   int32_t b, int32_t h) {
  if (q_len <= 0 || kv_len <= 0 || q_len > kv_len) {
    return Error{fmt::format("need 0 < q_len <= kv_len (q_len {}, kv_len {})", q_len, kv_len)};
  }
  if (tile_q <= 0 || tile_k <= 0) {
    return Error{fmt::format("tile {}x{}: both sides must be positive", tile_q, tile_k)};
  }
  if (b < 0 || h < 0) return Error{fmt::format("b {} and h {} must be >= 0", b, h)};
  TileShape shape;
  shape.b = b;
  shape.h = h;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  shape.tile_q = tile_q;
  shape.tile_k = tile_k;
  shape.q_offset = kv_len - q_len;
  return shape;
}

double TileCounts::density() const {
  const int64_t all = total();
  return all == 0 ? 0.0 : static_cast<double>(full + partial) / all;
}

void TileCounts::add(TileClass tile_class, int64_t count) {
  switch (tile_class) {
    case TileClass::Empty:
      empty += count;
      break;
    case TileClass::Full:
      full += count;
      break;
    case TileClass::Partial:
      partial += count;
      break;
  }
}

namespace {

// Classifies the tiles of a map row by row, top to bottom.
class RowClassifier {
 public:
  RowClassifier(const MaskAnalysis& analysis, const fj::MaskParams* params, TileMap& map)
      : analysis_(analysis), params_(params), map_(map) {
    // Columns a diagonal boundary (kv = q + c) moves from one row to the next.
    const int32_t tile_q = map.shape.tile_q, tile_k = map.shape.tile_k;
    shifts_ = {0, tile_q / tile_k};
    if (tile_q % tile_k != 0) shifts_.push_back(tile_q / tile_k + 1);
  }

  // Classifies the columns [col0, col1) of `row` (the others are Empty); rows in order.
  void classify(int32_t row, int32_t col0, int32_t col1, TileMapMethod method) {
    row_ = row;
    above_.swap(current_);
    current_.clear();
    if (method == TileMapMethod::Tiles) {
      tiles(col0, col1);
      return;
    }
    // Class boundaries move little from one row to the next: the spans tried first end where
    // a run of the row above ends and the next begins, there and moved as a diagonal moves.
    cuts_.assign({col0, col1});
    for (size_t i = 0; i + 1 < above_.size(); ++i) {
      for (const int32_t shift : shifts_) {
        const int64_t cut = int64_t{above_[i].end} + shift;
        if (cut > col0 && cut < col1) cuts_.push_back(static_cast<int32_t>(cut));
      }
    }
    std::sort(cuts_.begin(), cuts_.end());
    cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
    size_t run = 0;
    for (size_t i = 0; i + 1 < cuts_.size(); ++i) {
      const int32_t start = cuts_[i], end = cuts_[i + 1];
      while (run < above_.size() && above_[run].end <= start)
        ++run;
      const bool partial_above = run < above_.size() && above_[run].start <= start &&
                                 above_[run].tile_class == TileClass::Partial;
      if (partial_above) {
        tiles(start, end);
      } else {
        span(start, end);
      }
    }
  }

 private:
  // Tiles [start, end) of one class in a row.
  struct Run {
    int32_t start = 0, end = 0;
    TileClass tile_class = TileClass::Empty;
  };

  TileClass evaluate(int32_t col0, int32_t col1) {
    const TileShape& shape = map_.shape;
    Tile tile = shape.tile(row_, col0);
    tile.k1 = shape.tile(row_, col1 - 1).k1;
    ++map_.evaluations;
    return analysis_.classify(tile, params_);
  }

  void tiles(int32_t col0, int32_t col1) {
    for (int32_t col = col0; col < col1; ++col)
      set(col, col + 1, evaluate(col, col + 1));
  }

  void span(int32_t col0, int32_t col1) {
    const TileClass tile_class = evaluate(col0, col1);
    if (tile_class != TileClass::Partial || col1 - col0 == 1) {
      set(col0, col1, tile_class);
      return;
    }
    const int32_t middle = col0 + (col1 - col0) / 2;
    span(col0, middle);
    span(middle, col1);
  }

  // Called in increasing column order within a row.
  void set(int32_t col0, int32_t col1, TileClass tile_class) {
    if (tile_class != TileClass::Empty) {
      TileClass* row = map_.classes.data() + static_cast<size_t>(row_) * map_.shape.cols();
      std::fill(row + col0, row + col1, tile_class);
    }
    map_.counts.add(tile_class, col1 - col0);
    if (!current_.empty() && current_.back().tile_class == tile_class) {
      current_.back().end = col1;
    } else {
      current_.push_back({col0, col1, tile_class});
    }
  }

  const MaskAnalysis& analysis_;
  const fj::MaskParams* params_;
  TileMap& map_;
  std::vector<int32_t> shifts_;
  int32_t row_ = 0;
  std::vector<Run> above_, current_;  // the runs of the row above and of this row
  std::vector<int32_t> cuts_;
};

}  // namespace

TileMap build_tile_map(const Variant& variant, const TileShape& shape, const fj::MaskParams* params,
                       TileMapMethod method) {
  TileMap map;
  map.shape = shape;
  const int32_t rows = shape.rows(), cols = shape.cols();
  map.classes.assign(static_cast<size_t>(shape.tiles()), TileClass::Empty);
  map.kv_ranges.assign(rows, KvRange{});
  const MaskAnalysis analysis(variant);
  RowClassifier classifier(analysis, params, map);
  for (int32_t row = 0; row < rows; ++row) {
    const Tile tile = shape.tile(row, 0);
    const KvRange range = analysis.kv_range(shape.b, shape.h, tile.q0, tile.q1, params);
    const int32_t lo = std::max(range.lo, 0), hi = std::min(range.hi, shape.kv_len);
    int32_t col0 = 0, col1 = 0;
    if (lo < hi) {
      map.kv_ranges[row] = {lo, hi};
      col0 = lo / shape.tile_k;
      col1 = hi / shape.tile_k + (hi % shape.tile_k != 0);
    }
    map.counts.empty += cols - (col1 - col0);
    classifier.classify(row, col0, col1, method);
  }
  return map;
}

std::vector<int64_t> count_visible_pairs(const Variant& variant, const TileShape& shape,
                                         const fj::MaskParams* params, unsigned threads) {
  // The mask as native code where flexjit has LLVM, a few instructions per pair instead of a
  // walk over the IR; the evaluator otherwise, or should compiling fail (same results: the
  // host code tests hold the two to bit-identical masks).
  auto compiled = make_host_code(variant);
  if (!compiled) compiled = make_host_code(variant, false);  // the evaluator never fails
  const HostCode& code = **compiled;
  const int32_t rows = shape.rows(), cols = shape.cols();
  std::vector<int64_t> visible(static_cast<size_t>(shape.tiles()), 0);
  std::atomic<int32_t> next_row{0};
  const auto work = [&] {
    std::vector<uint8_t> row_mask(static_cast<size_t>(shape.kv_len));
    for (int32_t row = next_row++; row < rows; row = next_row++) {
      int64_t* counts = visible.data() + static_cast<size_t>(row) * cols;
      const Tile first = shape.tile(row, 0);
      for (int32_t q = first.q0; q < first.q1; ++q) {
        code.mask_row(params, shape.b, shape.h, q, 0, shape.kv_len, row_mask.data());
        for (int32_t col = 0; col < cols; ++col) {
          const Tile tile = shape.tile(row, col);
          int64_t count = 0;
          for (int32_t kv = tile.k0; kv < tile.k1; ++kv)
            count += row_mask[kv];
          counts[col] += count;
        }
      }
    }
  };
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<int64_t>(threads, rows));
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < threads; ++i)
    workers.emplace_back(work);
  work();
  for (std::thread& worker : workers)
    worker.join();
  return visible;
}

namespace {

TileClass class_of(int64_t visible, int64_t pairs) {
  return visible == 0 ? TileClass::Empty : visible == pairs ? TileClass::Full : TileClass::Partial;
}

}  // namespace

std::vector<TileClass> true_tile_classes(const TileShape& shape, std::span<const int64_t> visible) {
  const int32_t rows = shape.rows(), cols = shape.cols();
  std::vector<TileClass> classes(static_cast<size_t>(shape.tiles()));
  for (int32_t row = 0; row < rows; ++row) {
    for (int32_t col = 0; col < cols; ++col) {
      const size_t i = static_cast<size_t>(row) * cols + col;
      classes[i] = class_of(visible[i], int64_t{shape.tile_rows(row)} * shape.tile_cols(col));
    }
  }
  return classes;
}

Exactness check_tile_map(const TileMap& map, std::span<const int64_t> visible) {
  const std::vector<TileClass> truth = true_tile_classes(map.shape, visible);
  Exactness exactness;
  for (size_t i = 0; i < truth.size(); ++i) {
    const TileClass classified = map.classes[i];
    exactness.uniform += truth[i] != TileClass::Partial;
    if (classified == TileClass::Partial) continue;
    if (classified == truth[i]) {
      ++exactness.exact;
    } else {
      ++exactness.unsound;
    }
  }
  return exactness;
}

namespace {

// A BlockMask from each block's class, in FlexAttention's ordered form.
template <class ClassOf>
BlockMask ordered_block_mask(const TileShape& shape, ClassOf class_of_block) {
  BlockMask mask;
  mask.q_blocks = shape.rows();
  mask.kv_blocks = shape.cols();
  const size_t cells = static_cast<size_t>(shape.tiles());
  mask.kv_num_blocks.assign(mask.q_blocks, 0);
  mask.full_kv_num_blocks.assign(mask.q_blocks, 0);
  mask.kv_indices.resize(cells);
  mask.full_kv_indices.resize(cells);
  std::vector<TileClass> row_classes(mask.kv_blocks);
  for (int32_t row = 0; row < mask.q_blocks; ++row) {
    for (int32_t col = 0; col < mask.kv_blocks; ++col)
      row_classes[col] = class_of_block(row, col);
    // Stable descending argsort of a 0/1 row: the set columns in order, then the others.
    const auto order = [&](TileClass wanted, int32_t* indices, int32_t& count) {
      int32_t next = 0;
      for (int32_t col = 0; col < mask.kv_blocks; ++col) {
        if (row_classes[col] == wanted) indices[next++] = col;
      }
      count = next;
      for (int32_t col = 0; col < mask.kv_blocks; ++col) {
        if (row_classes[col] != wanted) indices[next++] = col;
      }
    };
    const size_t offset = static_cast<size_t>(row) * mask.kv_blocks;
    order(TileClass::Partial, mask.kv_indices.data() + offset, mask.kv_num_blocks[row]);
    order(TileClass::Full, mask.full_kv_indices.data() + offset, mask.full_kv_num_blocks[row]);
  }
  return mask;
}

}  // namespace

BlockMask export_block_mask(const TileMap& map) {
  const TileShape& shape = map.shape;
  return ordered_block_mask(shape, [&](int32_t row, int32_t col) {
    const TileClass tile_class = map.at(row, col);
    const bool clipped = shape.tile_rows(row) < shape.tile_q || shape.tile_cols(col) < shape.tile_k;
    return tile_class == TileClass::Full && clipped ? TileClass::Partial : tile_class;
  });
}

BlockMask block_mask_from_visible(const TileShape& shape, std::span<const int64_t> visible) {
  const int64_t block_pairs = int64_t{shape.tile_q} * shape.tile_k;
  return ordered_block_mask(shape, [&](int32_t row, int32_t col) {
    return class_of(visible[static_cast<size_t>(row) * shape.cols() + col], block_pairs);
  });
}

}  // namespace flexjit
