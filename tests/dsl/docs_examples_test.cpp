// Every example of docs/language.md is checked: a ```mask block must check without errors, a
// ```mask-error block must report errors. In either, a comment line `# error: TEXT` or
// `# warning: TEXT` expects one diagnostic of that severity whose message contains TEXT, and
// every error and warning the block produces must be expected by such a line.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "flexjit/dsl/frontend.h"

using namespace flexjit::dsl;

namespace {

struct Example {
  int line = 0;  // of the opening fence, 1-based
  bool expects_errors = false;
  std::string text;
};

std::string read_docs() {
  std::ifstream in(FLEXJIT_SOURCE_DIR "/docs/language.md", std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<Example> extract_examples(const std::string& docs) {
  std::vector<Example> examples;
  std::istringstream in(docs);
  std::string line;
  Example* open = nullptr;
  for (int number = 1; std::getline(in, line); ++number) {
    if (open) {
      if (line.starts_with("```")) {
        open = nullptr;
      } else {
        open->text += line + "\n";
      }
    } else if (line == "```mask" || line == "```mask-error") {
      examples.push_back({number, line == "```mask-error", ""});
      open = &examples.back();
    }
  }
  REQUIRE(open == nullptr);  // an unclosed fence
  return examples;
}

// The TEXT of every `# KIND: TEXT` comment line of the example.
std::vector<std::string> expected(const std::string& text, std::string_view kind) {
  std::string prefix = "# " + std::string(kind) + ": ";
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find_first_not_of(" \t");
    if (at != std::string::npos && line.compare(at, prefix.size(), prefix) == 0)
      out.push_back(line.substr(at + prefix.size()));
  }
  return out;
}

// Pairs each expectation with a distinct diagnostic of `severity` containing it; returns what
// is left over on either side, for the failure message.
std::string mismatches(const std::vector<Diagnostic>& diagnostics, Severity severity,
                       std::vector<std::string> wanted) {
  std::string out;
  for (const Diagnostic& diagnostic : diagnostics) {
    if (diagnostic.severity != severity) continue;
    auto match = std::find_if(wanted.begin(), wanted.end(), [&](const std::string& text) {
      return diagnostic.message.find(text) != std::string::npos;
    });
    if (match == wanted.end()) {
      out += "unexpected: " + diagnostic.message + "\n";
    } else {
      wanted.erase(match);
    }
  }
  for (const std::string& text : wanted)
    out += "missing: " + text + "\n";
  return out;
}

}  // namespace

TEST_CASE("every example of docs/language.md checks as the page says", "[dsl][docs]") {
  std::vector<Example> examples = extract_examples(read_docs());
  int valid = 0;
  int invalid = 0;
  for (const Example& example : examples) {
    std::vector<Diagnostic> diagnostics;
    Source source{"example.mask", example.text};
    parse_and_check(source, diagnostics);
    std::vector<std::string> errors = expected(example.text, "error");
    INFO("the example at docs/language.md:" << example.line << "\n"
                                            << example.text << "reports\n"
                                            << format_diagnostics(source, diagnostics));
    CHECK(example.expects_errors == !errors.empty());
    CHECK(mismatches(diagnostics, Severity::Error, errors).empty());
    CHECK(mismatches(diagnostics, Severity::Warning, expected(example.text, "warning")).empty());
    (example.expects_errors ? invalid : valid) += 1;
  }
  // A broken extractor must not pass by finding nothing.
  CHECK(valid >= 10);
  CHECK(invalid >= 40);
}
