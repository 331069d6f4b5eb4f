#include "core/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace fp8rl {

namespace {

// Columns of the terminal behind `out` (80 if it does not say).
size_t terminal_columns(std::FILE* out) {
  winsize ws{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string format_progress(std::string_view label, int64_t step, int64_t total, int64_t steps_timed,
                            double elapsed_seconds, std::string_view fields) {
  const int width = static_cast<int>(fmt::formatted_size("{}", total));
  std::string line = fmt::format("{} {:>{}}/{}", label, step, width, total);
  if (steps_timed > 0) {
    const double per_step = elapsed_seconds / static_cast<double>(steps_timed);
    line += fmt::format("  {:.2f} s/step  ETA {}", per_step,
                        format_duration(per_step * static_cast<double>(std::max<int64_t>(0, total - step))));
  }
  if (!fields.empty()) line += fmt::format("  {}", fields);
  return line;
}

ProgressLine::ProgressLine(std::string label, int64_t first_step, int64_t total_steps, bool enabled, std::FILE* out)
    : label_(std::move(label)), first_step_(first_step), total_steps_(total_steps), enabled_(enabled), out_(out) {}

ProgressLine::~ProgressLine() { end_line(); }

void ProgressLine::update(int64_t step, std::string_view fields) {
  if (!enabled_) return;
  const double now = clock_.seconds();
  text_ = format_progress(label_, step, total_steps_, step - first_step_, now, fields);
  drawn_ = false;
  if (step >= total_steps_ || last_draw_s_ < 0 || now - last_draw_s_ >= 0.1) {
    last_draw_s_ = now;
    draw();
  }
}

void ProgressLine::end_line() {
  if (!enabled_) return;
  if (!drawn_) draw();
  if (width_ > 0) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  width_ = 0;
}

void ProgressLine::draw() {
  // Cut to the terminal's width: a wrapped line would not be overwritten by the next '\r'.
  std::string shown = text_.substr(0, std::max<size_t>(1, terminal_columns(out_)) - 1);
  const size_t width = shown.size();
  if (width < width_) shown.append(width_ - width, ' ');  // blank the rest of a longer old line
  std::fputc('\r', out_);
  std::fputs(shown.c_str(), out_);
  std::fflush(out_);
  width_ = width;
  drawn_ = true;
}

}  // namespace fp8rl
