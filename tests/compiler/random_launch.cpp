#include "random_launch.h"

#include <algorithm>
#include <sstream>

namespace flexjit::testing {

using ir::Type;

int32_t random_int(RandomExpr& random) {
  static constexpr int32_t kValues[] = {1024, 8192, kMin, kMin + 1, kMax, kMax - 1, -1, 0};
  return random.pick(3) ? random.pick(60) - 5 : kValues[random.pick(8)];
}

HostArray random_array(RandomExpr& random, Type type, const std::vector<std::string>& dims) {
  HostArray array;
  const auto extent = [&](const std::string& dim) {
    if (dim == "q" || dim == "kv") return random.pick(8) ? 20 + random.pick(80) : random.pick(3);
    return dim == "r" ? 2 * (1 + random.pick(4)) : 1 + random.pick(3);
  };
  array.rows = extent(dims[0]);
  array.cols = dims.size() == 2 ? extent(dims[1]) : 1;
  int32_t id = random.pick(3);
  for (int32_t i = 0; i < array.rows * array.cols; ++i) {
    int32_t value = random.pick(4) ? id : random_int(random);
    if (random.pick(6) == 0) id += 1 + random.pick(20);
    if (type == Type::Float) {
      const std::vector<float>& special = float_constants();
      value = fj::float_to_bits(random.pick(5) ? static_cast<float>(value) * 0.5f
                                               : special[random.pick(int(special.size()))]);
    }
    array.bits.push_back(value);
  }
  return array;
}

HostParams random_params(RandomExpr& random, const Variant& variant) {
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  for (const RuntimeParam& scalar : variant.scalars) {
    scalars[scalar.slot] =
        scalar.type == dsl::Type::Float
            ? fj::float_to_bits(float_constants()[random.pick(int(float_constants().size()))])
            : random_int(random);
  }
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  for (const RuntimeParam& array : variant.arrays) {
    arrays[array.slot] =
        random_array(random, array.type == dsl::Type::Float ? Type::Float : Type::Int, array.dims);
  }
  return HostParams(variant, std::move(scalars), std::move(arrays));
}

int32_t random_start(RandomExpr& random) {
  switch (random.pick(8)) {
    case 0:
      return -1 - random.pick(100);
    case 1:
      return kMax - random.pick(64);
    case 2:
      return kMin + random.pick(8);
    case 3:
      return 0;  // the first tile of a row or column, where divisors and products meet 0
    default:
      return random.pick(100);
  }
}

Tile random_tile(RandomExpr& random) {
  const auto range = [&](int32_t& lo, int32_t& hi) {
    lo = random_start(random);
    const int64_t width = random.pick(16) == 0 ? -random.pick(3)
                          : random.pick(4)     ? 1 + random.pick(64)
                                               : 1 + random.pick(1 << 20);
    hi = static_cast<int32_t>(std::min<int64_t>(int64_t{lo} + width, kMax));
  };
  Tile tile;
  tile.b = random.pick(3);
  tile.h = random.pick(3);
  range(tile.q0, tile.q1);
  range(tile.k0, tile.k1);
  return tile;
}

std::string tile_text(const Tile& tile) {
  std::ostringstream out;
  out << "b " << tile.b << " h " << tile.h << " q [" << tile.q0 << ", " << tile.q1 << ") kv ["
      << tile.k0 << ", " << tile.k1 << ")";
  return out.str();
}

HostParams standard_params(RandomExpr& random, const Variant& variant, bool meant) {
  if (!meant) return random_params(random, variant);
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  for (const RuntimeParam& array : variant.arrays) {
    HostArray& values = arrays[array.slot];
    values.rows = 2;
    if (array.name == "ranges") {
      values.cols = 16;
      for (int32_t b = 0; b < 2; ++b) {
        for (int32_t start = random.pick(40), r = 0; r < 8; ++r, start += 1 + random.pick(200)) {
          const int32_t end = start + random.pick(100);
          values.bits.insert(values.bits.end(), {start, end});
          start = end;
        }
      }
    } else if (array.name == "doc") {
      values.cols = 1000;
      for (int32_t b = 0; b < 2; ++b) {
        for (int32_t id = 0; values.bits.size() < size_t(1000) * (b + 1); ++id)
          values.bits.insert(values.bits.end(), 1 + random.pick(150), id);
        values.bits.resize(size_t(1000) * (b + 1));
      }
    } else if (array.type == dsl::Type::Float) {
      // slopes[h], or a table per head (t5_bias[h, d]).
      values.rows = 8;
      values.cols = array.dims.size() > 1 ? 8 : 1;
      for (int h = 0; h < 8; ++h) {
        for (int c = 0; c < values.cols; ++c) {
          values.bits.push_back(
              fj::float_to_bits(0.5f / static_cast<float>(h + 1) + 0.125f * static_cast<float>(c)));
        }
      }
    } else {
      values.bits = {random.pick(500), random.pick(500)};
    }
  }
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  for (const RuntimeParam& scalar : variant.scalars)
    scalars[scalar.slot] = 1 + random.pick(300);
  return HostParams(variant, std::move(scalars), std::move(arrays));
}

}  // namespace flexjit::testing
