#include "core/check.h"

namespace fp8rl {

void check_fail(const char* file, int line, const char* func, std::string_view condition,
                std::string_view message) {
  // Keep only the path below src/ so messages do not depend on the build directory.
  std::string_view path(file);
  if (auto pos = path.rfind("src/"); pos != std::string_view::npos) path.remove_prefix(pos);
  throw Error(fmt::format("{}:{} in {}: check failed: {} ({})", path, line, func, condition, message));
}

}  // namespace fp8rl
