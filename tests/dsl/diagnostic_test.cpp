#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "flexjit/dsl/diagnostic.h"
#include "flexjit/dsl/frontend.h"

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

TEST_CASE("format_diagnostics_json gives positions, ends and messages", "[dsl][diagnostic]") {
  Source source{"std.mask",
                "param window: int\nmask sliding = q - kv < windw\nmask m = q +\n  1\n"};
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(source, diagnostics);
  std::string text = format_diagnostics_json(module.source, diagnostics);
  REQUIRE(text.ends_with("}\n"));
  nlohmann::json json = nlohmann::json::parse(text);
  CHECK(json["file"] == "std.mask");
  REQUIRE(json["diagnostics"].size() == 3);
  const nlohmann::json& unused = json["diagnostics"][0];
  CHECK(unused["severity"] == "warning");
  CHECK(unused["line"] == 1);
  CHECK(unused["column"] == 7);
  CHECK(unused["end_line"] == 1);
  CHECK(unused["end_column"] == 13);  // exclusive: "window" is columns 7 to 12
  CHECK(unused["offset"] == 6);
  CHECK(unused["length"] == 6);
  CHECK(unused["message"] == "unused parameter 'window'");
  const nlohmann::json& unknown = json["diagnostics"][1];
  CHECK(unknown["severity"] == "error");
  CHECK(unknown["line"] == 2);
  CHECK(unknown["column"] == 25);
  CHECK(unknown["end_column"] == 30);
  CHECK(unknown["message"] == "unknown name 'windw'");
  // A span over two lines ends on the second.
  const nlohmann::json& body = json["diagnostics"][2];
  CHECK(body["message"] == "expected 'bool', found 'int'");
  CHECK(body["line"] == 3);
  CHECK(body["column"] == 10);
  CHECK(body["end_line"] == 4);
  CHECK(body["end_column"] == 4);
  CHECK(body["length"] == 7);
}

TEST_CASE("format_diagnostics_json without diagnostics, and with spans past the end",
          "[dsl][diagnostic]") {
  CHECK(format_diagnostics_json(Source{"a.mask", "mask m = true\n"}, {}) ==
        "{\"file\":\"a.mask\",\"diagnostics\":[]}\n");
  nlohmann::json json = nlohmann::json::parse(
      format_diagnostics_json(Source{"t", "ab"}, {{Severity::Error, {99, 5}, "x"}}));
  const nlohmann::json& clamped = json["diagnostics"][0];
  CHECK(clamped["offset"] == 2);
  CHECK(clamped["length"] == 0);
  CHECK(clamped["line"] == 1);
  CHECK(clamped["column"] == 3);
}

TEST_CASE("format_diagnostics_json is valid UTF-8 whatever the bytes", "[dsl][diagnostic]") {
  // Invalid UTF-8 in names, literals and stray bytes of the source, and in the file name.
  std::string text =
      "mask m\xff = q < w\xc3\n"
      "mask \xe2\x80 = nope\xfe\xfe + 1\n"
      "mask n = 1\xc0\xaf\n";
  text += std::string("mask k = q < \0\x01\x7f", 16);
  Source source{"dir\xff/\xc3(.mask", text};
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(source, diagnostics);
  REQUIRE(diagnostics.size() >= 4);
  std::string json_text = format_diagnostics_json(module.source, diagnostics);
  nlohmann::json json;
  REQUIRE_NOTHROW(json = nlohmann::json::parse(json_text));
  REQUIRE(json["diagnostics"].size() == diagnostics.size());
  // Each message is the library's, with the bytes escaped by quote().
  for (size_t i = 0; i < diagnostics.size(); ++i)
    CHECK(json["diagnostics"][i]["message"] == diagnostics[i].message);
  CHECK(json["diagnostics"][0]["message"] == "unexpected character '\\xff'");
  // Bytes that are not UTF-8 in the file name become U+FFFD.
  CHECK(json["file"] == "dir\xef\xbf\xbd/\xef\xbf\xbd(.mask");
}

TEST_CASE("a long source line is shown as a window around the column", "[dsl][diagnostic]") {
  // 300 bytes: the column (201) is shown with the 60 bytes before it, 160 bytes in all.
  std::string line = std::string(200, 'a') + "@" + std::string(99, 'b');
  CHECK(format_diagnostic(Source{"t", line + "\n"}, {Severity::Error, {200, 5}, "x"}) ==
        "t:1:201: error: x\n"
        "..." +
            std::string(60, 'a') + "@" + std::string(99, 'b') + "\n" + std::string(63, ' ') +
            "^~~~~\n");
  // Near the start only the end is cut; near the end the window ends with the line.
  CHECK(format_diagnostic(Source{"t", line}, {Severity::Error, {3, 1}, "x"}) ==
        "t:1:4: error: x\n" + std::string(160, 'a') + "...\n   ^\n");
  CHECK(format_diagnostic(Source{"t", line}, {Severity::Error, {299, 1}, "x"}) ==
        "t:1:300: error: x\n..." + std::string(60, 'a') + "@" + std::string(99, 'b') + "\n" +
            std::string(3 + 159, ' ') + "^\n");
  // Many diagnostics on one long line print in linear space.
  std::vector<Diagnostic> many;
  for (uint32_t i = 0; i < 100000; ++i)
    many.push_back({Severity::Error, {i, 1}, "x"});
  CHECK(format_diagnostics(Source{"t", std::string(100000, '@')}, many).size() < 100000 * 400);
}
