// The fuzz input as a file, for parsers that take a path: one temporary directory per process
// (created on first use under $TMPDIR or /tmp, removed at normal exit), one file in it that each
// call overwrites.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace fp8rl::fuzz {

// The per-process directory, e.g. /tmp/fp8rl-fuzz-Ab12Cd.
inline const std::filesystem::path& temp_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      const char* base = std::getenv("TMPDIR");
      std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/fp8rl-fuzz-XXXXXX";
      if (mkdtemp(pattern.data()) == nullptr) {
        std::perror("fp8rl fuzz: mkdtemp");
        std::abort();
      }
      path = pattern;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes `bytes` to temp_dir()/name (replacing what is there) and returns the path.
inline std::filesystem::path write_input_file(std::string_view name, std::string_view bytes) {
  std::filesystem::path path = temp_dir() / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror("fp8rl fuzz: writing the input file");
    std::abort();
  }
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace fp8rl::fuzz
