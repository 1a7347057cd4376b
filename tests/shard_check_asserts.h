// What a sharded run (tools/check/shard_check.h) passes beside its check against the reference,
// on either device (tests/runtime's CPU sweep, tests/gpu's CUDA one): the merged result against
// the unsharded call, and the sweep's reach (rows a shard sees nothing of, shards with no key).
#pragma once

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include "check/paged_inputs.h"
#include "check/shard_check.h"

namespace flexjit::testing {

inline void check_against_unsharded(const PagedCheckConfig& config,
                                    const ShardCheckReport& report) {
  INFO(fmt::format("against the unsharded call: rel {:.3e}, lse {:.3e}, non-finite {}",
                   report.unsharded.relative, report.unsharded.lse_max_abs,
                   report.unsharded.mismatched_non_finite));
  CHECK(report.unsharded.relative <= relative_error_tolerance(config));
  CHECK(report.unsharded.lse_max_abs <= 2e-3);
  CHECK(report.unsharded.mismatched_non_finite == 0);
}

struct ShardSweepReach {
  int64_t rows_empty_in_some_shard = 0;
  int64_t empty_shards = 0;

  void add(const ShardCheckReport& report) {
    rows_empty_in_some_shard += report.rows_empty_in_some_shard;
    empty_shards += std::count(report.keys_per_shard.begin(), report.keys_per_shard.end(), 0);
  }
  // The sweep reached rows a shard sees nothing of, and shards holding no key at all.
  void check() const {
    CHECK(rows_empty_in_some_shard > 0);
    CHECK(empty_shards > 0);
  }
};

}  // namespace flexjit::testing
