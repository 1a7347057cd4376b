#include <catch2/catch.hpp>

#include "flexjit/dsl/diagnostic.h"

using namespace flexjit::dsl;

namespace {

void check_line_col(std::string_view text, uint32_t offset, uint32_t line, uint32_t column) {
  LineCol at = line_col(text, offset);
  INFO("offset " << offset);
  CHECK(at.line == line);
  CHECK(at.column == column);
}

}  // namespace

TEST_CASE("line_col counts lines and byte columns from 1", "[dsl][diagnostic]") {
  check_line_col("ab\ncd\n", 0, 1, 1);
  check_line_col("ab\ncd\n", 2, 1, 3);  // the newline belongs to its line
  check_line_col("ab\ncd\n", 3, 2, 1);
  check_line_col("ab\ncd\n", 4, 2, 2);
  check_line_col("ab\ncd\n", 6, 3, 1);
  check_line_col("ab\ncd\n", 1000, 3, 1);  // clamps to the end
  check_line_col("", 0, 1, 1);
  check_line_col("\n\n\n", 2, 3, 1);
  check_line_col("\xc3\xa9x", 2, 1, 3);  // bytes, not characters
}

TEST_CASE("format_diagnostic prints location, line and marker", "[dsl][diagnostic]") {
  Source source{"std.mask", "param window: int\nmask sliding = q - kv < windw\n"};
  Diagnostic unknown{Severity::Error, {42, 5}, "unknown name 'windw'"};
  CHECK(format_diagnostic(source, unknown) ==
        "std.mask:2:25: error: unknown name 'windw'\n"
        "mask sliding = q - kv < windw\n"
        "                        ^~~~~\n");
  Diagnostic unused{Severity::Warning, {6, 6}, "unused parameter 'window'"};
  CHECK(format_diagnostic(source, unused) ==
        "std.mask:1:7: warning: unused parameter 'window'\n"
        "param window: int\n"
        "      ^~~~~~\n");
  CHECK(format_diagnostics(source, {unused, unknown}) ==
        format_diagnostic(source, unused) + format_diagnostic(source, unknown));
}

TEST_CASE("the marker keeps the line's tabs so the caret lines up", "[dsl][diagnostic]") {
  Source source{"t", "\tmask m =\tq\n"};
  CHECK(format_diagnostic(source, {Severity::Error, {10, 1}, "x"}) ==
        "t:1:11: error: x\n"
        "\tmask m =\tq\n"
        "\t        \t^\n");
}

TEST_CASE("a span running past its line is marked to the line's end", "[dsl][diagnostic]") {
  Source source{"t", "mask m = q +\r\n  1\r\n"};
  CHECK(format_diagnostic(source, {Severity::Error, {9, 8}, "x"}) ==
        "t:1:10: error: x\n"
        "mask m = q +\n"
        "         ^~~\n");
  // A span at the end of the text (an unexpected end of file) marks one column past it.
  CHECK(format_diagnostic(Source{"t", "mask"}, {Severity::Error, {4, 0}, "x"}) ==
        "t:1:5: error: x\n"
        "mask\n"
        "    ^\n");
  // Offsets past the end clamp instead of reading out of bounds.
  CHECK(format_diagnostic(Source{"t", "ab"}, {Severity::Error, {99, 5}, "x"}) ==
        "t:1:3: error: x\n"
        "ab\n"
        "  ^\n");
}

TEST_CASE("has_errors ignores warnings", "[dsl][diagnostic]") {
  CHECK_FALSE(has_errors({}));
  CHECK_FALSE(has_errors({{Severity::Warning, {}, "w"}}));
  CHECK(has_errors({{Severity::Warning, {}, "w"}, {Severity::Error, {}, "e"}}));
}
