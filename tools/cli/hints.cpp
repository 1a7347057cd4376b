// `flexjit hints`: tile maps as text, SVG and JSON, and BlockMask files (docs/hints.md).
#include "hints.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string_view>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/tile_map.h"
#include "flexjit/dsl/diagnostic.h"
#include "settings.h"

namespace flexjit::cli {
namespace {

constexpr char kClassChars[] = ".#+";  // by TileClass: empty, full, partial
// The ASCII map is drawn up to this many tile rows and columns.
constexpr int32_t kMaxDrawnTiles = 200;

char class_char(TileClass tile_class) {
  return kClassChars[static_cast<int>(tile_class)];
}

int report(const std::string& message) {
  fmt::print(stderr, "flexjit: error: {}\n", flexjit::dsl::printable(message));
  return 1;
}

std::optional<int32_t> parse_positive(std::string_view text) {
  int32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return value;
}

// `--tile QxK`.
Result<std::pair<int32_t, int32_t>> parse_tile(const std::string& text) {
  const size_t x = text.find('x');
  const auto q = parse_positive(std::string_view(text).substr(0, x));
  const auto k =
      x == std::string::npos ? std::nullopt : parse_positive(std::string_view(text).substr(x + 1));
  if (!q || !k) return Error{fmt::format("--tile '{}': expected QxK, e.g. 64x64", text)};
  return std::pair{*q, *k};
}

// The queries' positions, as text: `[a, b)`.
std::string query_positions(const TileShape& shape) {
  return fmt::format("[{}, {})", shape.q_offset, shape.q_offset + shape.q_len);
}

std::string shape_line(const std::string& label, const TileShape& shape) {
  return fmt::format("{}: b {} h {}, {} queries at positions {} x {} keys, tiles {}x{}: {} x {}",
                     label, shape.b, shape.h, shape.q_len, query_positions(shape), shape.kv_len,
                     shape.tile_q, shape.tile_k, shape.rows(), shape.cols());
}

// What the rows' kv ranges left to classify.
struct RangeSummary {
  int32_t min_cols = 0, max_cols = 0;  // tile columns inside a row's range
  int64_t inside = 0;                  // tiles inside the ranges, over all rows
  int32_t empty_rows = 0;              // rows whose range is empty
};

RangeSummary summarize_ranges(const TileMap& map) {
  RangeSummary summary;
  summary.min_cols = map.shape.cols();
  for (const KvRange& range : map.kv_ranges) {
    int32_t cols = 0;
    if (range.empty()) {
      ++summary.empty_rows;
    } else {
      cols = (range.hi - 1) / map.shape.tile_k - range.lo / map.shape.tile_k + 1;
    }
    summary.min_cols = std::min(summary.min_cols, cols);
    summary.max_cols = std::max(summary.max_cols, cols);
    summary.inside += cols;
  }
  return summary;
}

std::string row_string(const TileMap& map, int32_t row) {
  std::string line(static_cast<size_t>(map.shape.cols()), '.');
  for (int32_t col = 0; col < map.shape.cols(); ++col)
    line[col] = class_char(map.at(row, col));
  return line;
}

// Position-indexed arrays that the mask reads and that end before the positions do: the rest
// read as 0 (docs/language.md), which is rarely what was meant.
void warn_short_arrays(const Variant& variant, const HostParams& params, const TileShape& shape) {
  for (const RuntimeParam& param : variant.arrays) {
    if (!ir::uses_array(variant.mask, param.slot)) continue;
    const HostArray& array = params.arrays()[param.slot];
    for (size_t dim = 0; dim < param.dims.size(); ++dim) {
      if (param.dims[dim] != "q" && param.dims[dim] != "kv") continue;
      const int32_t length = param.dims.size() == 1 || dim == 0 ? array.rows : array.cols;
      if (length < shape.kv_len) {
        fmt::print(stderr,
                   "flexjit: note: {} has {} positions along '{}', fewer than the {} keys: the "
                   "others read as 0\n",
                   param.name, length, param.dims[dim], shape.kv_len);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SVG

constexpr const char* kEmptyColour = "#eef0f3";
constexpr const char* kFullColour = "#1f4e99";
constexpr const char* kPartialColour = "#f0a020";

std::string svg_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

template <class... Args>
void append(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

// A round tick step (1, 2 or 5 times a power of ten) giving at most about `ticks` ticks.
int64_t tick_step(int64_t extent, int ticks) {
  int64_t step = 1;
  while (true) {
    for (const int64_t m : {1, 2, 5}) {
      if (extent / (step * m) <= ticks) return step * m;
    }
    step *= 10;
  }
}

// The map drawn with each cell `factor` x `factor` tiles: positions are to scale along kv (and
// along q, except that rows are stretched to stay visible), a cell holding tiles of more than
// one class is drawn as partial.
std::string tile_map_svg(const TileMap& map, const std::string& label) {
  const TileShape& shape = map.shape;
  constexpr int32_t kMaxCells = 512;  // drawn cells per side
  const int32_t factor =
      std::max<int32_t>(1, (std::max(shape.rows(), shape.cols()) + kMaxCells - 1) / kMaxCells);
  const int32_t cell_rows = (shape.rows() + factor - 1) / factor;
  const int32_t cell_cols = (shape.cols() + factor - 1) / factor;
  const double width = 800.0;
  const double height =
      std::max(width * shape.q_len / shape.kv_len, std::min(12.0 * cell_rows, width));
  const double left = 80, top = 78, legend = 56;
  const double x_scale = width / shape.kv_len, y_scale = height / shape.q_len;
  const auto x_of = [&](int64_t kv) { return left + kv * x_scale; };
  const auto y_of = [&](int64_t row_position) { return top + row_position * y_scale; };

  std::string svg;
  append(svg,
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
         "font-family=\"sans-serif\" font-size=\"12\">\n",
         left + width + 30, top + height + legend);
  append(svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  append(svg, "<text x=\"{}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", left,
         svg_escape(fmt::format("{}: {} quer{} x {} keys, tiles {}x{}", label, shape.q_len,
                                shape.q_len == 1 ? "y" : "ies", shape.kv_len, shape.tile_q,
                                shape.tile_k)));
  append(
      svg, "<text x=\"{}\" y=\"38\">{}</text>\n", left,
      svg_escape(fmt::format("b {}, h {}; {} x {} tiles, {:.1f}% computed{}", shape.b, shape.h,
                             shape.rows(), shape.cols(), 100 * map.counts.density(),
                             factor > 1 ? fmt::format("; each cell {0}x{0} tiles", factor) : "")));

  // The matrix: empty background, then runs of full and partial cells.
  append(svg, "<g shape-rendering=\"crispEdges\">\n");
  append(svg, "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"/>\n",
         left, top, width, height, kEmptyColour);
  std::vector<TileClass> cells(cell_cols);
  for (int32_t cell_row = 0; cell_row < cell_rows; ++cell_row) {
    const int32_t row0 = cell_row * factor, row1 = std::min(shape.rows(), row0 + factor);
    for (int32_t cell_col = 0; cell_col < cell_cols; ++cell_col) {
      const int32_t col0 = cell_col * factor, col1 = std::min(shape.cols(), col0 + factor);
      TileClass cell = map.at(row0, col0);
      for (int32_t row = row0; row < row1 && cell != TileClass::Partial; ++row) {
        for (int32_t col = col0; col < col1; ++col) {
          if (map.at(row, col) != cell) cell = TileClass::Partial;
        }
      }
      cells[cell_col] = cell;
    }
    const double y0 = y_of(int64_t{row0} * shape.tile_q);
    const double y1 = y_of(std::min<int64_t>(shape.q_len, int64_t{row1} * shape.tile_q));
    for (int32_t start = 0; start < cell_cols;) {
      int32_t end = start + 1;
      while (end < cell_cols && cells[end] == cells[start])
        ++end;
      if (cells[start] != TileClass::Empty) {
        const double x0 = x_of(int64_t{start} * factor * shape.tile_k);
        const double x1 =
            x_of(std::min<int64_t>(shape.kv_len, int64_t{end} * factor * shape.tile_k));
        append(svg,
               "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"/>\n",
               x0, y0, x1 - x0, y1 - y0,
               cells[start] == TileClass::Full ? kFullColour : kPartialColour);
      }
      start = end;
    }
  }
  append(svg, "</g>\n");

  // Tile grid where cells are big enough to tell apart, then the frame.
  if (factor == 1 && width / shape.cols() >= 6 && height / shape.rows() >= 6) {
    append(svg, "<g stroke=\"white\" stroke-width=\"1\">\n");
    for (int32_t col = 1; col < shape.cols(); ++col) {
      const double x = x_of(int64_t{col} * shape.tile_k);
      append(svg, "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\"/>\n", x, top,
             top + height);
    }
    for (int32_t row = 1; row < shape.rows(); ++row) {
      const double y = y_of(int64_t{row} * shape.tile_q);
      append(svg, "<line x1=\"{1:.2f}\" y1=\"{0:.2f}\" x2=\"{2:.2f}\" y2=\"{0:.2f}\"/>\n", y, left,
             left + width);
    }
    append(svg, "</g>\n");
  }
  append(svg,
         "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" "
         "stroke=\"#555\"/>\n",
         left, top, width, height);

  // Axes: key positions along the top, query positions down the left.
  append(svg, "<g fill=\"#333\">\n");
  append(svg,
         "<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">kv (key position) &#8594;</text>\n",
         left + width / 2, top - 24);
  const int64_t kv_step = tick_step(shape.kv_len, 8);
  for (int64_t kv = 0; kv <= shape.kv_len; kv += kv_step) {
    append(svg,
           "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\" stroke=\"#555\"/>\n",
           x_of(kv), top - 4, top);
    append(svg, "<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{}</text>\n", x_of(kv),
           top - 7, kv);
  }
  append(svg, "<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"end\">q &#8595;</text>\n", left - 7,
         top - 24);
  if (height >= 120) {
    append(svg,
           "<text transform=\"translate({:.2f},{:.2f}) rotate(-90)\" text-anchor=\"middle\">q "
           "(query position)</text>\n",
           left - 62, top + height / 2);
  }
  const int64_t q_first = shape.q_offset;
  const int64_t q_step = tick_step(shape.q_len, std::max(1, static_cast<int>(height / 40)));
  // Too few rows to space ticks apart (a decode step): the first position only.
  const bool thin = q_step * y_scale < 14;
  const int64_t q_last = thin ? q_first : q_first + shape.q_len;
  for (int64_t q = thin ? q_first : (q_first + q_step - 1) / q_step * q_step; q <= q_last;
       q += q_step) {
    const double y = y_of(q - q_first);
    append(svg,
           "<line x1=\"{1:.2f}\" y1=\"{0:.2f}\" x2=\"{2:.2f}\" y2=\"{0:.2f}\" stroke=\"#555\"/>\n",
           y, left - 4, left);
    append(svg, "<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", left - 7, y + 4,
           q);
  }
  append(svg, "</g>\n");

  // Legend.
  const double legend_y = top + height + 22;
  double x = left;
  const std::pair<const char*, std::string> entries[] = {
      {kEmptyColour, fmt::format("empty: {} (skipped)", map.counts.empty)},
      {kFullColour, fmt::format("full: {} (no mask)", map.counts.full)},
      {kPartialColour, fmt::format("partial: {} (masked per element)", map.counts.partial)},
  };
  for (const auto& [colour, text] : entries) {
    append(svg,
           "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"14\" height=\"14\" fill=\"{}\" "
           "stroke=\"#555\"/>\n",
           x, legend_y - 11, colour);
    append(svg, "<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n", x + 20, legend_y, svg_escape(text));
    x += 40 + 7.0 * static_cast<double>(text.size());
  }
  if (factor > 1) {
    append(
        svg, "<text x=\"{:.2f}\" y=\"{:.2f}\" fill=\"#555\">{}</text>\n", left, legend_y + 20,
        svg_escape(fmt::format("scaled down: each cell is {0}x{0} tiles; a cell of mixed classes "
                               "is drawn as partial",
                               factor)));
  }
  append(svg, "</svg>\n");
  return svg;
}

// ---------------------------------------------------------------------------------------------
// BlockMask file

// Writes one tensor of shape [1, 1, rows] (cols == 0) or [1, 1, rows, cols] as nested lists.
void write_tensor(std::ostream& out, const std::vector<int32_t>& values, int32_t rows,
                  int32_t cols) {
  out << "[[[";
  for (int32_t row = 0; row < rows; ++row) {
    if (row > 0) out << ",";
    if (cols == 0) {
      out << values[row];
      continue;
    }
    out << "\n    [";
    const auto begin = values.begin() + static_cast<ptrdiff_t>(row) * cols;
    out << fmt::format("{}", fmt::join(begin, begin + cols, ","));
    out << "]";
  }
  out << "]]]";
}

std::string block_mask_json(const BlockMask& mask, const TileShape& shape,
                            const std::string& label) {
  std::ostringstream out;
  const nlohmann::ordered_json header = {
      {"format", "flexjit-blockmask-1"},
      {"mask", label},
      {"b", shape.b},
      {"h", shape.h},
      {"q_len", shape.q_len},
      {"kv_len", shape.kv_len},
      {"q_offset", shape.q_offset},
      {"block_size", {shape.tile_q, shape.tile_k}},
      {"shapes",
       {{"kv_num_blocks", {1, 1, mask.q_blocks}},
        {"kv_indices", {1, 1, mask.q_blocks, mask.kv_blocks}},
        {"full_kv_num_blocks", {1, 1, mask.q_blocks}},
        {"full_kv_indices", {1, 1, mask.q_blocks, mask.kv_blocks}}}},
      {"dtype", "int32"},
  };
  // The header's fields, then the tensors, which nlohmann::ordered_json would hold as one node
  // each.
  std::string fields = header.dump();
  fields.pop_back();
  out << fields << ",\n\"kv_num_blocks\": ";
  write_tensor(out, mask.kv_num_blocks, mask.q_blocks, 0);
  out << ",\n\"kv_indices\": ";
  write_tensor(out, mask.kv_indices, mask.q_blocks, mask.kv_blocks);
  out << ",\n\"full_kv_num_blocks\": ";
  write_tensor(out, mask.full_kv_num_blocks, mask.q_blocks, 0);
  out << ",\n\"full_kv_indices\": ";
  write_tensor(out, mask.full_kv_indices, mask.q_blocks, mask.kv_blocks);
  out << "\n}\n";
  return out.str();
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

}  // namespace

Result<SetArrays> set_arrays(const Variant& variant, const std::vector<std::string>& settings,
                             int32_t b, int32_t h, std::vector<std::string>& scalar_settings) {
  SetArrays set;
  set.arrays.resize(variant.arrays.size());
  set.given.assign(variant.arrays.size(), false);
  for (const std::string& setting : settings) {
    const size_t eq = setting.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Error{fmt::format("--set '{}': expected NAME=VALUE", setting)};
    }
    const std::string name = setting.substr(0, eq);
    const auto param = std::find_if(variant.arrays.begin(), variant.arrays.end(),
                                    [&](const RuntimeParam& p) { return p.name == name; });
    if (param == variant.arrays.end()) {
      const bool scalar = std::any_of(variant.scalars.begin(), variant.scalars.end(),
                                      [&](const RuntimeParam& p) { return p.name == name; });
      if (!scalar) {
        return Error{fmt::format("--set: no runtime parameter '{}'", name)};
      }
      scalar_settings.push_back(setting);  // checked with the other scalars
      continue;
    }
    auto array = parse_array_values(*param, std::string_view(setting).substr(eq + 1), b, h);
    if (!array) return Error{"--set " + array.error().message};
    set.arrays[param->slot] = std::move(*array);
    set.given[param->slot] = true;
  }
  return set;
}

Result<std::vector<HostArray>> hint_arrays(const Variant& variant,
                                           const std::vector<std::string>& settings, int32_t b,
                                           int32_t h, std::vector<std::string>& scalar_settings) {
  auto set = set_arrays(variant, settings, b, h, scalar_settings);
  if (!set) return set.error();
  for (const RuntimeParam& param : variant.arrays) {
    if (!set->given[param.slot] && ir::uses_array(variant.mask, param.slot)) {
      return Error{fmt::format(
          "'{}' reads array parameter '{}' ({}[{}]): give it with --set {}=V,V,... (docs/hints.md)",
          variant.mask_name, param.name, param.name, fmt::join(param.dims, ", "), param.name)};
    }
  }
  return std::move(set->arrays);
}

int print_hints(const Variant& variant, const std::string& label, const HostParams& params,
                const HintOptions& options) {
  const auto tile = parse_tile(options.tile);
  if (!tile) return report(tile.error().message);
  if (options.q_len <= 0 || options.kv_len <= 0 || options.q_len > options.kv_len) {
    return report("need 0 < --q-len <= --kv-len");
  }
  if (options.b < 0 || options.h < 0) return report("--b and --h must be >= 0");
  const auto shape = paged_tile_shape(options.q_len, options.kv_len, tile->first, tile->second,
                                      options.b, options.h);
  if (!shape) return report(shape.error().message);
  if (shape->tiles() > kMaxHintTiles) {
    return report(fmt::format("{} x {} = {} tiles, more than {}: use larger tiles", shape->rows(),
                              shape->cols(), shape->tiles(), kMaxHintTiles));
  }
  warn_short_arrays(variant, params, *shape);

  const auto start = std::chrono::steady_clock::now();
  const TileMap map = build_tile_map(variant, *shape, &params.params());
  const double classify_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();

  const int64_t pairs = int64_t{shape->q_len} * shape->kv_len;
  std::optional<Exactness> exactness;
  if (options.exact || pairs <= kExactPairsLimit) {
    exactness = check_tile_map(map, count_visible_pairs(variant, *shape, &params.params()));
  }
  const RangeSummary ranges = summarize_ranges(map);
  const TileCounts& counts = map.counts;

  if (options.json) {
    nlohmann::ordered_json out = {
        {"mask", label},
        {"shape",
         {{"b", shape->b},
          {"h", shape->h},
          {"q_len", shape->q_len},
          {"kv_len", shape->kv_len},
          {"q_offset", shape->q_offset},
          {"tile_q", shape->tile_q},
          {"tile_k", shape->tile_k},
          {"rows", shape->rows()},
          {"cols", shape->cols()}}},
        {"counts",
         {{"empty", counts.empty},
          {"full", counts.full},
          {"partial", counts.partial},
          {"total", counts.total()}}},
        {"density", counts.density()},
        {"kv_range",
         {{"min_cols", ranges.min_cols},
          {"max_cols", ranges.max_cols},
          {"tiles_inside", ranges.inside},
          {"empty_rows", ranges.empty_rows}}},
        {"evaluations", map.evaluations},
    };
    if (exactness) {
      out["exactness"] = {{"rate", exactness->rate()},
                          {"uniform", exactness->uniform},
                          {"exact", exactness->exact},
                          {"unsound", exactness->unsound}};
    } else {
      out["exactness"] = nullptr;
    }
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (int32_t row = 0; row < shape->rows(); ++row)
      rows.push_back(row_string(map, row));
    out["rows"] = std::move(rows);
    fmt::print("{}\n", out.dump(1));
  } else {
    fmt::print("{}\n", shape_line(label, *shape));
    if (shape->rows() <= kMaxDrawnTiles && shape->cols() <= kMaxDrawnTiles) {
      for (int32_t row = 0; row < shape->rows(); ++row)
        fmt::print("{}\n", row_string(map, row));
    } else {
      fmt::print("(map not drawn: more than {} tile rows or columns; use larger tiles, or --svg)\n",
                 kMaxDrawnTiles);
    }
    fmt::print("tiles      {}: {} empty (.), {} full (#), {} partial (+)\n", counts.total(),
               counts.empty, counts.full, counts.partial);
    fmt::print("density    {:.1f}% of tiles computed (full + partial)\n", 100 * counts.density());
    fmt::print(
        "kv range   rows span {} of {} tile columns{}; the {} tiles outside are empty without "
        "evaluation\n",
        ranges.min_cols == ranges.max_cols
            ? fmt::format("{}", ranges.min_cols)
            : fmt::format("{} to {}", ranges.min_cols, ranges.max_cols),
        shape->cols(),
        ranges.empty_rows > 0 ? fmt::format(" ({} rows see no key)", ranges.empty_rows) : "",
        shape->tiles() - ranges.inside);
    fmt::print("classified {} evaluations in {:.0f} us\n", map.evaluations, classify_us);
    if (exactness) {
      fmt::print(
          "exactness  {:.1f}%: {} of {} truly empty or full tiles classified so (brute force over "
          "{} pairs); {} unsound\n",
          100 * exactness->rate(), exactness->exact, exactness->uniform, pairs, exactness->unsound);
    } else {
      fmt::print("exactness  skipped: {} pairs, more than {} (--exact forces the brute force)\n",
                 pairs, kExactPairsLimit);
    }
  }

  std::FILE* notes = options.json ? stderr : stdout;
  if (!options.svg.empty()) {
    if (!write_file(options.svg, tile_map_svg(map, label))) {
      return report(fmt::format("cannot write '{}'", options.svg));
    }
    fmt::print(notes, "wrote {}\n", options.svg);
  }
  if (!options.block_mask.empty()) {
    if (!write_file(options.block_mask, block_mask_json(export_block_mask(map), *shape, label))) {
      return report(fmt::format("cannot write '{}'", options.block_mask));
    }
    fmt::print(notes, "wrote {}\n", options.block_mask);
  }
  if (exactness && exactness->unsound > 0) {
    return report(fmt::format(
        "{} tiles classified unsoundly (Empty with a visible pair or Full with a masked one): a "
        "bug in the analysis",
        exactness->unsound));
  }
  return 0;
}

}  // namespace flexjit::cli
