// Errors are values: a Result holds either a T or a message (plus an optional log, such as
// NVRTC's). No exception crosses a stage boundary.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace flexjit {

struct Error {
  std::string message;
  std::string log = {};  // extra detail (a compiler log), may be empty
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  Result(Error error) : state_(std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

}  // namespace flexjit
