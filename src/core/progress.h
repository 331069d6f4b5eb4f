// The progress of a long job (`fp8rl train`, `fp8rl sft`) on a terminal: one line, redrawn in
// place after every step (a carriage return, no newline), with the step, the total, the mean
// step time so far, the time left at that rate, and what the job says about its last step:
//
//   grpo  37/150  2.31 s/step  ETA 4m21s  reward 0.531  val acc 0.420 @25  acc 0.500  mult_prob_err 1.0012
//
// The ETA is (steps left) x (wall time since the first step began / steps done so far): every
// second the job spent counts, validation and checkpoints included. When stdout is not a terminal
// (a log file, a pipe, a test) the jobs print their usual one line per step instead; `enabled()`
// tells which.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/timer.h"

namespace fp8rl {

// Whether standard output is a terminal (isatty).
bool stdout_is_terminal();

// "42s", "4m21s", "3h07m".
std::string format_duration(double seconds);

// The text of the progress line: `label`, step/total, the mean step time and the ETA when
// `steps_timed` > 0 steps took `elapsed_seconds`, then `fields`.
std::string format_progress(std::string_view label, int64_t step, int64_t total, int64_t steps_timed,
                            double elapsed_seconds, std::string_view fields);

class ProgressLine {
 public:
  // A line for steps first_step + 1 .. total_steps, drawn on `out` when `enabled` (otherwise
  // every call does nothing). The clock of the ETA starts here.
  ProgressLine(std::string label, int64_t first_step, int64_t total_steps, bool enabled, std::FILE* out = stdout);
  ~ProgressLine();  // end_line()
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool enabled() const { return enabled_; }
  // Step `step` (1-based) is done; `fields` describe it. Redraws at most 10 times a second, and
  // always for the last step.
  void update(int64_t step, std::string_view fields);
  // Draws the latest update if it was skipped and ends the line with a newline, so that other
  // output (a warning, the job's summary) starts on a line of its own.
  void end_line();

 private:
  void draw();

  std::string label_;
  int64_t first_step_, total_steps_;
  bool enabled_;
  std::FILE* out_;
  Timer clock_;              // since construction: the ETA's time base
  double last_draw_s_ = -1;  // clock_ time of the last redraw
  std::string text_;         // the latest update's line
  bool drawn_ = true;        // text_ is on the screen
  size_t width_ = 0;         // characters of the line on the screen (0: no open line)
};

}  // namespace fp8rl
