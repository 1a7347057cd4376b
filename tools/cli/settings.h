// Array parameters' values from the CLI's text (`flexjit hints --set doc=0*1000,1*3000`): the
// command line's syntax, not the compiler's, so it lives with the CLI.
#pragma once

#include <cstdint>
#include <string_view>

#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/result.h"

namespace flexjit {

// The most values parse_array_values accepts for one array (256 MiB of int32).
inline constexpr int64_t kMaxArrayValues = int64_t{1} << 26;

// An array parameter's host value from text (`flexjit hints --set NAME=TEXT`). TEXT lists values
// separated by `,` (spaces around them ignored); `V*N` stands for N copies of V (N >= 0); `;`
// separates the rows of a 2-D array. Values are int literals (`-1`, `4096`) for an `int` array
// and finite float literals (`0.5`, `2e-3`, `1`) for a `float` one.
//  - 1-D array: the list is the whole array (`prefix_len=100,200`: requests 0 and 1), except
//    that a single value fills every index up to the one request `b` (dimension `b`) or head
//    `h` (dimension `h`) reads, so `prefix_len=100` serves request b.
//  - 2-D array: `;`-separated rows of one length are the whole array; a single row fills every
//    row up to the one `b` or `h` reads (by the first dimension's name), so
//    `doc=0*1000,1*3000` is the document ids of request b (and of every request before it).
// Fails with a message naming the parameter on an empty list or item, a value that is not a
// literal of the element type, a malformed or negative repeat count, rows of different lengths,
// rows for a 1-D array, or more than kMaxArrayValues values.
Result<HostArray> parse_array_values(const RuntimeParam& param, std::string_view text, int32_t b,
                                     int32_t h);

}  // namespace flexjit
