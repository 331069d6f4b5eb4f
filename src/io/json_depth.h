// The nesting depth of a JSON text, measured before it is parsed: nlohmann::json parses and frees
// nested arrays and objects recursively, so a line of a few hundred thousand '[' (a plug-in's
// reply, a model-written program's output, a dataset line, a file header) would overflow the
// stack. Every parse of text from outside the process checks it against kMaxJsonDepth first.
#pragma once

#include <cstddef>
#include <string_view>

namespace fp8rl {

inline constexpr size_t kMaxJsonDepth = 256;

// The deepest nesting of [ and { in `text`, outside strings (a scan, not a validation: the
// parse that follows judges the rest).
size_t json_nesting_depth(std::string_view text);

}  // namespace fp8rl
